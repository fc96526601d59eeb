//! The WAL hook (FFI): under `synchronous=NORMAL` the store counts the WAL's frames itself and
//! checkpoints on its own thread (see `Db::try_inline`).

use std::sync::atomic::{AtomicU32, Ordering};

/// SQLite's WAL hook, called after each commit of the connection with the frames in the WAL.
pub(super) unsafe extern "C" fn count_wal_frames(
    frames: *mut std::ffi::c_void,
    _db: *mut rusqlite::ffi::sqlite3,
    _name: *const std::ffi::c_char,
    n: std::ffi::c_int,
) -> std::ffi::c_int {
    // SAFETY: `frames` is the `AtomicU32` registered in `Open::new`, alive while the hook is.
    let frames = unsafe { &*frames.cast::<AtomicU32>() };
    frames.store(u32::try_from(n).unwrap_or(0), Ordering::Relaxed);
    rusqlite::ffi::SQLITE_OK
}
