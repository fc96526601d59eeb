//! In-process wake-ups for calls that wait while another call of the same runtime holds their key.
//!
//! A caller that finds its key held polls the store (first after 10 ms, then less often), since
//! the holder may be another process. When the holder is a call of the same runtime ([`Idem`] and
//! its clones), its end wakes the waiters at once instead: they claim again and replay its outcome
//! (or take the key over) without waiting for their next poll. Holders elsewhere (other processes,
//! or another runtime of this process, even over the same store) are still found by polling.
//!
//! The registry belongs to one runtime, never to the process: an end in one runtime must not
//! wake a waiter of another (two tests, two stores, two simulated worlds on two threads), which
//! would couple their schedules.
//!
//! [`Idem`]: crate::Idem

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::key::IdempotencyKey;

/// One runtime's waiters: the keys waited on, each with its ends so far and who to tell.
#[derive(Default)]
pub(crate) struct Wakes {
    /// Waiters registered, in all: a holder's end looks at `keys` only when there are some.
    waiters: AtomicUsize,
    keys: Mutex<HashMap<IdempotencyKey, Entry>>,
}

struct Entry {
    ends: Arc<Ends>,
    waiters: usize,
}

/// Ends of holders of one key, counted, and who to tell.
#[derive(Default)]
pub(crate) struct Ends {
    count: AtomicU64,
    notify: Notify,
}

impl Ends {
    /// Ends so far: a waiter reads this before it claims, and does not wait if it moved since.
    pub(crate) fn seen(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Wakes {
    fn keys(&self) -> MutexGuard<'_, HashMap<IdempotencyKey, Entry>> {
        // Each critical section leaves the map whole: a poisoned lock is still consistent.
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a caller as a waiter on `key`, for as long as the registration lives.
    pub(crate) fn wait(&self, key: IdempotencyKey) -> Waiting<'_> {
        let mut keys = self.keys();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let entry = keys.entry(key).or_insert_with(|| Entry {
            ends: Arc::default(),
            waiters: 0,
        });
        entry.waiters += 1;
        Waiting {
            wakes: self,
            key,
            ends: Arc::clone(&entry.ends),
        }
    }

    /// A holder of `key` in this runtime wrote its end (an outcome, a release, an ambiguous
    /// mark): wakes this runtime's calls that wait on `key`. Costs one atomic load when nobody
    /// waits.
    pub(crate) fn ended(&self, key: &IdempotencyKey) {
        if self.waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(entry) = self.keys().get(key) {
            entry.ends.count.fetch_add(1, Ordering::SeqCst);
            entry.ends.notify.notify_waiters();
        }
    }
}

/// A caller's registration as a waiter on a key, for as long as it waits.
pub(crate) struct Waiting<'w> {
    wakes: &'w Wakes,
    key: IdempotencyKey,
    ends: Arc<Ends>,
}

impl Waiting<'_> {
    pub(crate) fn ends(&self) -> &Ends {
        &self.ends
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut keys = self.wakes.keys();
        if let Some(entry) = keys.get_mut(&self.key) {
            entry.waiters -= 1;
            if entry.waiters == 0 {
                keys.remove(&self.key);
            }
        }
        self.wakes.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiters(wakes: &Wakes, k: &IdempotencyKey) -> Option<usize> {
        wakes.keys().get(k).map(|e| e.waiters)
    }

    #[test]
    fn an_end_reaches_the_waiters_of_its_key_and_registrations_go_with_their_last_waiter() {
        let wakes = Wakes::default();
        let key = IdempotencyKey::from_uuid(uuid::Uuid::from_u128(0x1de4_0001));
        let other = IdempotencyKey::from_uuid(uuid::Uuid::from_u128(0x1de4_0002));
        let a = wakes.wait(key);
        let b = wakes.wait(key);
        assert_eq!(waiters(&wakes, &key), Some(2));
        let seen = a.ends().seen();
        wakes.ended(&other);
        assert_eq!(a.ends().seen(), seen, "another key's end is not this one's");
        wakes.ended(&key);
        assert_eq!(b.ends().seen(), seen + 1);
        drop(a);
        assert_eq!(waiters(&wakes, &key), Some(1));
        drop(b);
        assert_eq!(waiters(&wakes, &key), None);
    }

    #[test]
    fn an_end_in_one_registry_never_reaches_a_waiter_of_another() {
        let (mine, theirs) = (Wakes::default(), Wakes::default());
        let key = IdempotencyKey::from_uuid(uuid::Uuid::from_u128(0x1de4_0003));
        let waiting = theirs.wait(key);
        let _also_mine = mine.wait(key);
        let seen = waiting.ends().seen();
        mine.ended(&key);
        assert_eq!(
            waiting.ends().seen(),
            seen,
            "the same key's end in another runtime"
        );
        theirs.ended(&key);
        assert_eq!(waiting.ends().seen(), seen + 1);
    }
}
