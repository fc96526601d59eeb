//! A SQLite VFS that simulates a power cut, for the SQLite store's power-loss tests (issue 43).
//!
//! # What it models
//!
//! A disk with a volatile write cache, as POSIX promises it: a write reaches the platter only
//! once its file is synced. The VFS (registered as [`NAME`]) wraps SQLite's default `unix` VFS
//! and, per file, keeps the **durable content** (what the last `xSync` of that file made
//! durable) apart from the **pending writes** since (writes and truncations, in order). At a
//! simulated power cut ([`arm_at_sync`]: on entering the N-th `xSync`, before it takes effect;
//! or [`cut_now`]: between two operations) every later write, sync, truncation and deletion
//! fails (`SQLITE_IOERR`) and changes nothing, and [`snapshot`] takes what the disk holds. A
//! [`Cut`] then writes the files that survive into a fresh directory, dropping a chosen part of
//! the pending writes ([`Loss`]): all of them, none, a random prefix, a random subset, or each
//! pending write torn at the 512-byte sector (each sector old, new or garbage), as SQLite's own
//! crash tests (`src/test6.c`) do. What it covers beyond `test6.c`:
//!
//! - **The WAL** is a file like the database: its frames since its last sync are pending.
//! - **The `-shm` index is never durable**: SQLite's `unix` VFS maps it itself, and a cut never
//!   copies it (SQLite rebuilds it from the WAL on the next open).
//! - **A new file's directory entry**: a file created since tracking began vanishes at a cut
//!   (with everything in it) unless its directory was synced after the creation. SQLite's
//!   `unix` VFS syncs the directory at the first `xSync` of a WAL or rollback journal it opened
//!   with `SQLITE_OPEN_CREATE` (`unixOpen`'s `isNewJrnl`, `unixSync`'s `UNIXFILE_DIRSYNC`), and
//!   this VFS applies the same rule to its own entries. The `Random`, `Prefix` and `Torn` losses
//!   drop an unsynced entry with probability ½; `All` always, `None` never.
//!
//! What it does not model: a deletion whose directory was not synced coming back after a cut
//! (a deletion counts as durable at once; [`deletions`] counts those made while tracking, and the
//! tests assert none fell in their cut windows: a store keeps its connection, and in WAL mode
//! SQLite deletes nothing per commit), and writes reordered *across* syncs (a sync is a barrier
//! for its own file, which is what `fsync` promises).
//!
//! # Why a VFS
//!
//! A VFS sees every write, truncation and sync SQLite makes, per file, in process, with no kernel
//! module, FUSE or root: on a Debian machine without extra kernel support it is the only layer that
//! needs nothing installed. A preload library intercepting `pwrite`/`fsync` would miss nothing
//! either, but it would have to rebuild SQLite's file boundaries from file descriptors; LazyFS
//! needs FUSE. The wrapped `unix` VFS still does the locking and the shared memory, so the
//! store's connections behave as on a real file system; writes go through to the real files (the
//! files a live process sees), and the model keeps the durable image in memory beside them. Real
//! `fsync`s are skipped: nothing here needs the real disk to keep anything.
//!
//! The library crate of idemkit keeps its own FFI minimal; this crate is test-only
//! (`publish = false`) and is the only place with this VFS's `unsafe` code.
//!
//! # Use
//!
//! One world per process: the tests that use it run one at a time. [`register`] once; open the
//! store through [`NAME`]; [`reset`] makes what is on disk durable and starts counting syncs.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use libsqlite3_sys as ffi;

/// The VFS's name, for `sqlite3_open_v2` (or a store builder's `vfs`).
pub const NAME: &str = "crash";

/// The sector at which [`Loss::Torn`] tears a write.
pub const SECTOR: usize = 512;

/// A write or truncation made since the file's last sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Write { offset: u64, data: Vec<u8> },
    Truncate(u64),
}

/// One file as the cut left it.
#[derive(Debug, Clone)]
pub struct CutFile {
    pub path: PathBuf,
    /// Whether its directory entry is durable (it existed when tracking began, or its
    /// directory was synced after its creation).
    pub entry_durable: bool,
    /// Its content as of its last sync.
    pub durable: Vec<u8>,
    /// What was written since, in order.
    pub pending: Vec<Op>,
}

/// The files at a power cut.
#[derive(Debug, Clone, Default)]
pub struct Cut {
    pub files: Vec<CutFile>,
}

/// Which pending writes a cut loses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Every pending write, and every unsynced directory entry.
    All,
    /// None: what a process kill leaves.
    None,
    /// All after a random point, per file.
    Prefix,
    /// Each pending write with probability ½.
    Random,
    /// Each sector of each pending write: kept, lost, or garbage (2:2:1); a truncation with ½.
    Torn,
}

/// What [`Cut::materialize`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Survived {
    pub pending: usize,
    pub kept: usize,
    pub torn: usize,
    pub files_vanished: usize,
}

impl Cut {
    /// Writes the files that survive the cut into `dir` (under their file names), losing what
    /// `loss` says, with choices from `seed`. No `-shm` file is ever written.
    pub fn materialize(&self, loss: Loss, seed: u64, dir: &Path) -> std::io::Result<Survived> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut done = Survived::default();
        for file in &self.files {
            done.pending += file.pending.len();
            let vanishes = !file.entry_durable
                && match loss {
                    Loss::All => true,
                    Loss::None => false,
                    Loss::Prefix | Loss::Random | Loss::Torn => rng.bool(),
                };
            if vanishes {
                done.files_vanished += 1;
                continue;
            }
            let mut data = file.durable.clone();
            let prefix = rng.usize(0..=file.pending.len());
            for (i, op) in file.pending.iter().enumerate() {
                let keep = match loss {
                    Loss::All => false,
                    Loss::None => true,
                    Loss::Prefix => i < prefix,
                    Loss::Random => rng.bool(),
                    Loss::Torn => {
                        if let Op::Write { offset, data: new } = op {
                            done.torn += 1;
                            tear(&mut data, *offset, new, &mut rng);
                            continue;
                        }
                        rng.bool()
                    }
                };
                if keep {
                    done.kept += 1;
                    apply(&mut data, op);
                }
            }
            let name = file.path.file_name().expect("a file's path");
            std::fs::write(dir.join(name), &data)?;
        }
        Ok(done)
    }
}

fn apply(data: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write { offset, data: new } => {
            let at = usize::try_from(*offset).expect("offset fits");
            if data.len() < at + new.len() {
                data.resize(at + new.len(), 0);
            }
            data[at..at + new.len()].copy_from_slice(new);
        }
        Op::Truncate(size) => data.resize(usize::try_from(*size).expect("size fits"), 0),
    }
}

/// A write torn at the sector: each sector it touches is new, old, or garbage.
fn tear(data: &mut Vec<u8>, offset: u64, new: &[u8], rng: &mut fastrand::Rng) {
    let start = usize::try_from(offset).expect("offset fits");
    let end = start + new.len();
    let mut at = start;
    while at < end {
        let sector_end = ((at / SECTOR) + 1) * SECTOR;
        let piece = at..sector_end.min(end);
        match rng.u8(0..5) {
            0 | 1 => {} // lost: the sector keeps its durable bytes
            2 | 3 => apply(
                data,
                &Op::Write {
                    offset: piece.start as u64,
                    data: new[piece.start - start..piece.end - start].to_vec(),
                },
            ),
            _ => {
                let garbage: Vec<u8> = piece.clone().map(|_| rng.u8(..)).collect();
                apply(
                    data,
                    &Op::Write {
                        offset: piece.start as u64,
                        data: garbage,
                    },
                );
            }
        }
        at = piece.end;
    }
}

/// A sync entered while tracking (see [`syncs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncPoint {
    /// 1, 2, … since [`reset`].
    pub n: u64,
    /// The file's name (`idemkit.db`, `idemkit.db-wal`).
    pub file: String,
    /// The label set by [`set_label`] when it was entered.
    pub label: String,
}

struct Tracked {
    entry_durable: bool,
    durable: Vec<u8>,
    pending: Vec<Op>,
}

struct Handle {
    path: Option<String>,
    epoch: u64,
    /// The first sync of this handle syncs its directory (SQLite's `UNIXFILE_DIRSYNC`).
    dir_sync: bool,
}

#[derive(Default)]
struct World {
    epoch: u64,
    off: bool,
    armed: Option<u64>,
    syncs: Vec<SyncPoint>,
    label: String,
    files: HashMap<String, Tracked>,
    handles: HashMap<u64, Handle>,
    next_handle: u64,
    deletions: u64,
}

static WORLD: Mutex<Option<World>> = Mutex::new(None);

fn world() -> MutexGuard<'static, Option<World>> {
    WORLD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn with<T>(f: impl FnOnce(&mut World) -> T) -> T {
    let mut w = world();
    f(w.get_or_insert_with(World::default))
}

/// Registers the VFS (once per process; not the default VFS) and returns its name.
pub fn register() -> &'static str {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find initialises SQLite and returns the registered `unix` VFS,
        // which lives for the process; the VFS built here is leaked, so it does too.
        unsafe {
            let unix = ffi::sqlite3_vfs_find(c"unix".as_ptr());
            assert!(!unix.is_null(), "SQLite has no unix VFS");
            let _ = UNIX.set(Unix(unix));
            let name = CString::new(NAME).unwrap();
            let mut vfs: ffi::sqlite3_vfs = *unix;
            vfs.zName = name.into_raw();
            vfs.pNext = std::ptr::null_mut();
            vfs.szOsFile =
                c_int::try_from(std::mem::size_of::<CrashFile>()).unwrap() + (*unix).szOsFile;
            vfs.xOpen = Some(x_open);
            vfs.xDelete = Some(x_delete);
            let vfs = Box::leak(Box::new(vfs));
            let rc = ffi::sqlite3_vfs_register(vfs, 0);
            assert_eq!(rc, ffi::SQLITE_OK, "registering the crash VFS");
        }
    });
    NAME
}

/// Power on, nothing armed, nothing tracked: what is on disk now is durable, and the syncs are
/// counted from 1. Handles opened before stay refused (their writes fail) until closed.
pub fn reset() {
    with(|w| {
        w.epoch += 1;
        w.off = false;
        w.armed = None;
        w.syncs.clear();
        w.label.clear();
        w.files.clear();
        w.deletions = 0;
    });
}

/// Cuts the power on entering the `n`-th sync since [`reset`] (before it takes effect).
pub fn arm_at_sync(n: u64) {
    with(|w| w.armed = Some(n));
}

/// Cuts the power now.
pub fn cut_now() {
    with(|w| w.off = true);
}

/// Whether the power is cut.
pub fn is_off() -> bool {
    with(|w| w.off)
}

/// Names what runs from now on (each sync records it).
pub fn set_label(label: &str) {
    with(|w| label.clone_into(&mut w.label));
}

/// The syncs entered since [`reset`], the one the cut came at included.
pub fn syncs() -> Vec<SyncPoint> {
    with(|w| w.syncs.clone())
}

/// Files open through the VFS now.
pub fn open_handles() -> usize {
    with(|w| w.handles.len())
}

/// Deletions of tracked files since [`reset`] (treated as durable at once: see the crate docs).
pub fn deletions() -> u64 {
    with(|w| w.deletions)
}

/// The tracked files as the disk holds them now: durable content and pending writes.
pub fn snapshot() -> Cut {
    with(|w| {
        let mut files: Vec<CutFile> = w
            .files
            .iter()
            .map(|(path, t)| CutFile {
                path: PathBuf::from(path),
                entry_durable: t.entry_durable,
                durable: t.durable.clone(),
                pending: t.pending.clone(),
            })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Cut { files }
    })
}

// ---- The VFS (FFI) ----

struct Unix(*mut ffi::sqlite3_vfs);
// SAFETY: the unix VFS is a process-wide static of SQLite's, safe to call from any thread.
unsafe impl Send for Unix {}
unsafe impl Sync for Unix {}
static UNIX: OnceLock<Unix> = OnceLock::new();

fn unix() -> *mut ffi::sqlite3_vfs {
    UNIX.get().expect("registered").0
}

/// A file of this VFS: SQLite's header, this VFS's handle number, then the `unix` file.
#[repr(C)]
struct CrashFile {
    base: ffi::sqlite3_file,
    id: u64,
    real: *mut ffi::sqlite3_file,
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};

/// The wrapped file and its methods.
///
/// # Safety
/// `f` is a file this VFS opened (its `real` set by `x_open`).
unsafe fn real(
    f: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    // SAFETY: per the contract, `f` is a `CrashFile` whose `real` file is open (its methods set).
    unsafe {
        let real = (*f.cast::<CrashFile>()).real;
        (real, &*(*real).pMethods)
    }
}

/// # Safety
/// `f` is a file this VFS opened.
unsafe fn id(f: *mut ffi::sqlite3_file) -> u64 {
    // SAFETY: per the contract.
    unsafe { (*f.cast::<CrashFile>()).id }
}

unsafe extern "C" fn x_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite gives a buffer of `szOsFile` bytes: our header, then room for the unix file.
    unsafe {
        let me = file.cast::<CrashFile>();
        (*me).base.pMethods = std::ptr::null();
        let real = file
            .cast::<u8>()
            .add(std::mem::size_of::<CrashFile>())
            .cast::<ffi::sqlite3_file>();
        (*me).real = real;
        let path = (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned());
        let existed = path.as_ref().is_some_and(|p| Path::new(p).exists());
        let rc = ((*unix()).xOpen.expect("unix xOpen"))(unix(), name, real, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let kind = flags & 0x0FFF_FF00;
        let new_journal = flags & ffi::SQLITE_OPEN_CREATE != 0
            && [
                ffi::SQLITE_OPEN_SUPER_JOURNAL,
                ffi::SQLITE_OPEN_MAIN_JOURNAL,
                ffi::SQLITE_OPEN_WAL,
            ]
            .iter()
            .any(|t| kind & t != 0);
        let id = with(|w| {
            w.next_handle += 1;
            let id = w.next_handle;
            if let Some(p) = &path {
                w.files.entry(p.clone()).or_insert_with(|| Tracked {
                    entry_durable: existed,
                    durable: if existed {
                        std::fs::read(p).unwrap_or_default()
                    } else {
                        Vec::new()
                    },
                    pending: Vec::new(),
                });
            }
            w.handles.insert(
                id,
                Handle {
                    path,
                    epoch: w.epoch,
                    dir_sync: new_journal,
                },
            );
            id
        });
        (*me).id = id;
        (*me).base.pMethods = &METHODS;
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_delete(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    // SAFETY: `name` is a path SQLite passes, nul-terminated.
    let path = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    let refused = with(|w| {
        if w.off {
            return true;
        }
        if w.files.remove(&path).is_some() {
            w.deletions += 1;
        }
        false
    });
    if refused {
        return ffi::SQLITE_IOERR_DELETE;
    }
    // SAFETY: forwarding SQLite's own arguments to the unix VFS.
    unsafe { ((*unix()).xDelete.expect("unix xDelete"))(unix(), name, sync_dir) }
}

/// Whether writes through handle `id` are refused: the power is cut, or the handle is from
/// before the last [`reset`].
fn refused(w: &World, id: u64) -> bool {
    w.off || w.handles.get(&id).is_none_or(|h| h.epoch != w.epoch)
}

unsafe extern "C" fn x_close(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `f` is ours; the real file is closed once.
    unsafe {
        let (real, m) = real(f);
        let rc = (m.xClose.expect("xClose"))(real);
        let id = id(f);
        with(|w| w.handles.remove(&id));
        rc
    }
}

unsafe extern "C" fn x_read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    n: c_int,
    off: i64,
) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xRead.expect("xRead"))(real, buf, n, off)
    }
}

unsafe extern "C" fn x_write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    n: c_int,
    off: i64,
) -> c_int {
    // SAFETY: forwarding; `buf` holds `n` bytes.
    unsafe {
        let id = id(f);
        let mut w = world();
        let w = w.get_or_insert_with(World::default);
        if refused(w, id) {
            return ffi::SQLITE_IOERR_WRITE;
        }
        let (real, m) = real(f);
        let rc = (m.xWrite.expect("xWrite"))(real, buf, n, off);
        if rc == ffi::SQLITE_OK {
            let path = w.handles[&id].path.clone();
            if let Some(t) = path.and_then(|p| w.files.get_mut(&p)) {
                let data =
                    std::slice::from_raw_parts(buf.cast::<u8>(), usize::try_from(n).unwrap())
                        .to_vec();
                t.pending.push(Op::Write {
                    offset: u64::try_from(off).unwrap(),
                    data,
                });
            }
        }
        rc
    }
}

unsafe extern "C" fn x_truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let id = id(f);
        let mut w = world();
        let w = w.get_or_insert_with(World::default);
        if refused(w, id) {
            return ffi::SQLITE_IOERR_TRUNCATE;
        }
        let (real, m) = real(f);
        let rc = (m.xTruncate.expect("xTruncate"))(real, size);
        if rc == ffi::SQLITE_OK {
            let path = w.handles[&id].path.clone();
            if let Some(t) = path.and_then(|p| w.files.get_mut(&p)) {
                t.pending.push(Op::Truncate(u64::try_from(size).unwrap()));
            }
        }
        rc
    }
}

/// A sync: counted; the armed one cuts the power instead. Otherwise the file's pending writes
/// become durable (no real `fsync`: nothing needs the real disk), and a journal's or WAL's first
/// sync makes its directory's entries durable, as `unixSync` does.
unsafe extern "C" fn x_sync(f: *mut ffi::sqlite3_file, _flags: c_int) -> c_int {
    // SAFETY: `f` is ours.
    let id = unsafe { id(f) };
    with(|w| {
        if refused(w, id) {
            return ffi::SQLITE_IOERR_FSYNC;
        }
        let n = w.syncs.len() as u64 + 1;
        let handle = w.handles.get_mut(&id).expect("checked above");
        let path = handle.path.clone();
        let dir_sync = std::mem::take(&mut handle.dir_sync);
        let file = path
            .as_deref()
            .and_then(|p| Path::new(p).file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let label = w.label.clone();
        w.syncs.push(SyncPoint { n, file, label });
        if w.armed == Some(n) {
            w.off = true;
            // The handle keeps its directory sync owed (it never happened).
            if let Some(h) = w.handles.get_mut(&id) {
                h.dir_sync = dir_sync;
            }
            return ffi::SQLITE_IOERR_FSYNC;
        }
        let Some(path) = path else {
            return ffi::SQLITE_OK;
        };
        if let Some(t) = w.files.get_mut(&path) {
            for op in std::mem::take(&mut t.pending) {
                apply(&mut t.durable, &op);
            }
        }
        if dir_sync {
            let dir = Path::new(&path).parent().map(Path::to_path_buf);
            for (p, t) in &mut w.files {
                if Path::new(p).parent().map(Path::to_path_buf) == dir {
                    t.entry_durable = true;
                }
            }
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_file_size(f: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xFileSize.expect("xFileSize"))(real, size)
    }
}

unsafe extern "C" fn x_lock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xLock.expect("xLock"))(real, level)
    }
}

unsafe extern "C" fn x_unlock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xUnlock.expect("xUnlock"))(real, level)
    }
}

unsafe extern "C" fn x_check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xCheckReservedLock.expect("xCheckReservedLock"))(real, out)
    }
}

unsafe extern "C" fn x_file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xFileControl.expect("xFileControl"))(real, op, arg)
    }
}

unsafe extern "C" fn x_sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xSectorSize.expect("xSectorSize"))(real)
    }
}

unsafe extern "C" fn x_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xDeviceCharacteristics.expect("xDeviceCharacteristics"))(real)
    }
}

unsafe extern "C" fn x_shm_map(
    f: *mut ffi::sqlite3_file,
    page: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xShmMap.expect("xShmMap"))(real, page, size, extend, out)
    }
}

unsafe extern "C" fn x_shm_lock(
    f: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xShmLock.expect("xShmLock"))(real, offset, n, flags)
    }
}

unsafe extern "C" fn x_shm_barrier(f: *mut ffi::sqlite3_file) {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xShmBarrier.expect("xShmBarrier"))(real);
    }
}

unsafe extern "C" fn x_shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xShmUnmap.expect("xShmUnmap"))(real, delete)
    }
}

unsafe extern "C" fn x_fetch(
    f: *mut ffi::sqlite3_file,
    off: i64,
    n: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xFetch.expect("xFetch"))(real, off, n, out)
    }
}

unsafe extern "C" fn x_unfetch(f: *mut ffi::sqlite3_file, off: i64, p: *mut c_void) -> c_int {
    // SAFETY: forwarding.
    unsafe {
        let (real, m) = real(f);
        (m.xUnfetch.expect("xUnfetch"))(real, off, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_writes_change_only_the_written_range() {
        let cut = Cut {
            files: vec![CutFile {
                path: PathBuf::from("/x/f"),
                entry_durable: true,
                durable: vec![7; 2048],
                pending: vec![Op::Write {
                    offset: 512,
                    data: vec![9; 1024],
                }],
            }],
        };
        let dir = std::env::temp_dir().join(format!("crashvfs-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut saw = [false; 3];
        for seed in 0..64 {
            cut.materialize(Loss::Torn, seed, &dir).unwrap();
            let data = std::fs::read(dir.join("f")).unwrap();
            assert_eq!(data.len(), 2048);
            assert!(data[..512].iter().chain(&data[1536..]).all(|&b| b == 7));
            for sector in data[512..1536].chunks(SECTOR) {
                if sector.iter().all(|&b| b == 7) {
                    saw[0] = true;
                } else if sector.iter().all(|&b| b == 9) {
                    saw[1] = true;
                } else {
                    saw[2] = true;
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(saw, [true; 3], "old, new and garbage sectors");
    }

    #[test]
    fn an_unsynced_entry_vanishes_unless_nothing_is_lost() {
        let cut = Cut {
            files: vec![CutFile {
                path: PathBuf::from("/x/g"),
                entry_durable: false,
                durable: Vec::new(),
                pending: vec![Op::Write {
                    offset: 0,
                    data: vec![1; 10],
                }],
            }],
        };
        let dir = std::env::temp_dir().join(format!("crashvfs-unit2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(
            cut.materialize(Loss::All, 0, &dir).unwrap().files_vanished,
            1
        );
        assert!(!dir.join("g").exists());
        cut.materialize(Loss::None, 0, &dir).unwrap();
        assert_eq!(std::fs::read(dir.join("g")).unwrap(), vec![1; 10]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
