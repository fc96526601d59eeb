//! In-process wake-ups for calls that wait while another call holds their key.
//!
//! A caller that finds its key held polls the store (first after 10 ms, then less often), since
//! the holder may be another process. When the holder is a call of this process, its end wakes
//! the waiters at once instead: they claim again and replay its outcome (or take the key over)
//! without waiting for their next poll. Holders in other processes are still found by polling.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::key::IdempotencyKey;

/// Waiters registered, in all: a holder's end looks at [`KEYS`] only when there are some.
static WAITERS: AtomicUsize = AtomicUsize::new(0);

/// The keys waited on, each with its ends so far, its wake-up and how many wait on it.
static KEYS: Mutex<Option<HashMap<IdempotencyKey, Entry>>> = Mutex::new(None);

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

fn keys() -> MutexGuard<'static, Option<HashMap<IdempotencyKey, Entry>>> {
    // Each critical section leaves the map whole: a poisoned lock is still consistent.
    KEYS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A caller's registration as a waiter on a key, for as long as it waits.
pub(crate) struct Waiting {
    key: IdempotencyKey,
    ends: Arc<Ends>,
}

impl Waiting {
    pub(crate) fn new(key: IdempotencyKey) -> Self {
        let mut keys = keys();
        WAITERS.fetch_add(1, Ordering::SeqCst);
        let entry = keys
            .get_or_insert_with(HashMap::new)
            .entry(key)
            .or_insert_with(|| Entry {
                ends: Arc::default(),
                waiters: 0,
            });
        entry.waiters += 1;
        Waiting {
            key,
            ends: Arc::clone(&entry.ends),
        }
    }

    pub(crate) fn ends(&self) -> &Ends {
        &self.ends
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut keys = keys();
        if let Some(map) = keys.as_mut()
            && let Some(entry) = map.get_mut(&self.key)
        {
            entry.waiters -= 1;
            if entry.waiters == 0 {
                map.remove(&self.key);
            }
        }
        WAITERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A holder of `key` wrote its end (an outcome, a release, an ambiguous mark): wakes the calls
/// of this process that wait on `key`. Costs one atomic load when nobody waits.
pub(crate) fn ended(key: &IdempotencyKey) {
    if WAITERS.load(Ordering::SeqCst) == 0 {
        return;
    }
    if let Some(entry) = keys().as_ref().and_then(|map| map.get(key)) {
        entry.ends.count.fetch_add(1, Ordering::SeqCst);
        entry.ends.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_reaches_the_waiters_of_its_key_and_registrations_go_with_their_last_waiter() {
        let key = IdempotencyKey::from_uuid(uuid::Uuid::from_u128(0x1de4_0001));
        let other = IdempotencyKey::from_uuid(uuid::Uuid::from_u128(0x1de4_0002));
        let waiters =
            |k: &IdempotencyKey| keys().as_ref().and_then(|m| m.get(k)).map(|e| e.waiters);
        let a = Waiting::new(key);
        let b = Waiting::new(key);
        assert_eq!(waiters(&key), Some(2));
        let seen = a.ends().seen();
        ended(&other);
        assert_eq!(a.ends().seen(), seen, "another key's end is not this one's");
        ended(&key);
        assert_eq!(b.ends().seen(), seen + 1);
        drop(a);
        assert_eq!(waiters(&key), Some(1));
        drop(b);
        assert_eq!(waiters(&key), None);
    }
}
