//! Lease tokens: the fence of every holder's write, unique across threads, processes and forks.

use uuid::Uuid;

/// The token of one lease on a record: writes that carry a stale token are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub Uuid);

impl LeaseToken {
    /// A fresh random token (a UUID v4), unique among every token of every process.
    pub fn new() -> Self {
        LeaseToken(fresh_token())
    }
}

impl Default for LeaseToken {
    fn default() -> Self {
        Self::new()
    }
}

/// A UUID v4 without a `getrandom` system call per token (a fifth of an in-memory call's time):
/// each thread draws 122 random bits once and makes its tokens by XOR-ing a counter into the low
/// 48 bits, so its tokens are distinct and other threads' and processes' bases differ at random.
/// A forked child inherits the thread's state, so a fork draws a new base: a child never repeats
/// its parent's tokens (a repeated token would pass the fence).
fn fresh_token() -> Uuid {
    use std::cell::Cell;
    const COUNTER_BITS: u32 = 48;
    thread_local! {
        /// (fork generation, random base, tokens made from it)
        static STATE: Cell<Option<(u64, u128, u64)>> = const { Cell::new(None) };
    }
    STATE.with(|state| {
        let generation = fork_generation();
        let (base, n) = match state.get() {
            Some((g, base, n)) if g == generation && n < 1 << COUNTER_BITS => (base, n),
            _ => (Uuid::new_v4().as_u128(), 0),
        };
        state.set(Some((generation, base, n + 1)));
        // The counter's bits are below the version (bits 76..80) and variant (bits 62..64) bits.
        let bytes = (base ^ u128::from(n)).to_be_bytes();
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    })
}

/// How many times this process's ancestry forked since it started using tokens: a child sees
/// a new number. (Checking the process id instead costs a system call per token.)
#[cfg(unix)]
pub(crate) fn fork_generation() -> u64 {
    use std::sync::Once;
    use std::sync::atomic::{AtomicU64, Ordering};
    static GENERATION: AtomicU64 = AtomicU64::new(0);
    static WATCH: Once = Once::new();
    extern "C" fn in_child() {
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
    WATCH.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic, as fork handlers must.
        let registered = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        assert_eq!(registered, 0, "idemkit: cannot watch for fork()");
    });
    GENERATION.load(Ordering::Relaxed)
}

#[cfg(not(unix))]
pub(crate) fn fork_generation() -> u64 {
    0
}
