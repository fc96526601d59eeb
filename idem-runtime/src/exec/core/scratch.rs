//! The thread's scratch buffer an outcome is serialized into before the store keeps it.

/// Runs `f` on this thread's empty scratch buffer: an outcome is serialized there, then copied
/// once into the [`Outcome`](crate::store::Outcome) the store keeps (one allocation, the count beside the bytes),
/// instead of into a vector of its own that the outcome would then wrap (two).
pub(super) fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    use std::cell::RefCell;
    /// Past this, the buffer is not kept: an outlier outcome does not pin its size per thread.
    const KEPT: usize = 64 * 1024;
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    let mut f = Some(f);
    let kept = SCRATCH.try_with(|scratch| {
        // Busy when serializing an outcome ended another call on this thread (a `Serialize`
        // impl that runs a tool): that one gets a buffer of its own, below.
        let mut buf = scratch.try_borrow_mut().ok()?;
        buf.clear();
        let r = f.take().map(|f| f(&mut buf));
        if buf.capacity() > KEPT {
            *buf = Vec::new();
        }
        r
    });
    match (kept, f) {
        (Ok(Some(r)), _) => r,
        // No scratch buffer (busy, or this thread's are being torn down): a fresh one.
        (_, Some(f)) => f(&mut Vec::new()),
        (_, None) => unreachable!("idemkit: the outcome was serialized but not returned"),
    }
}
