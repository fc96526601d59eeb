//! Which keys this process is calling, and which just gave up retrying: a call of the same key
//! again while one is in progress, or right after one ran out of attempts, is a retry loop
//! around the tool (idemkit already retries it), which multiplies the attempts; it is said once
//! per repeat as a `tracing` warning, and the call goes on as it would have.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::key::IdempotencyKey;

/// How many keys that gave up are remembered (the oldest is forgotten first).
const GAVE_UP: usize = 256;

/// A call's identity in this process: the tenant it runs for, and its key.
type Id = (Option<Arc<str>>, IdempotencyKey);

#[derive(Default)]
struct Calls {
    /// Calls in progress, by key: how many.
    active: HashMap<Id, u32>,
    /// Keys whose last call ended after retrying, with its attempts.
    gave_up: VecDeque<(Id, u32)>,
}

static CALLS: Mutex<Option<Calls>> = Mutex::new(None);

/// One side-effect call in progress; it leaves the set when dropped.
#[derive(Debug)]
pub(crate) struct InProgress {
    id: Option<Id>,
}

/// Enters the call of `tool` with `key`, warning if the key is in progress here already or
/// just gave up retrying.
pub(crate) fn enter(tool: &str, key: &IdempotencyKey) -> InProgress {
    let id = (crate::idem::task_tenant(), *key);
    let mut guard = CALLS.lock().unwrap_or_else(|p| p.into_inner());
    let calls = guard.get_or_insert_with(Calls::default);
    let running = calls.active.get(&id).copied().unwrap_or(0);
    let gave_up = calls
        .gave_up
        .iter()
        .position(|(known, _)| *known == id)
        .and_then(|i| calls.gave_up.remove(i))
        .map(|(_, attempts)| attempts);
    *calls.active.entry(id.clone()).or_default() += 1;
    drop(guard);
    if running > 0 {
        tracing::warn!(
            target: "idemkit.side_effect",
            tool,
            %key,
            "tool `{tool}` was called again with key {key} while a call of it in this process is still in progress \
             (retrying its own failed attempts): idemkit already retries a tool by its `max_attempts`/`retry`; a retry \
             loop around the call multiplies the attempts. Call it once and let the attribute decide, or lower \
             `max_attempts`"
        );
    } else if let Some(attempts) = gave_up {
        tracing::warn!(
            target: "idemkit.side_effect",
            tool,
            %key,
            attempts,
            "tool `{tool}` was called again with key {key} right after a call of it gave up after {attempts} attempt(s): \
             idemkit already retried it; a retry loop around the call multiplies the attempts (your loop's count \
             times {attempts}). Raise the attribute's `max_attempts` (or `retry`) instead of looping"
        );
    }
    InProgress { id: Some(id) }
}

impl InProgress {
    /// The call ended after `attempts` attempts without succeeding, the last failure retryable:
    /// it gave up.
    pub(crate) fn gave_up(&mut self, attempts: u32) {
        let Some(id) = self.id.take() else { return };
        let mut guard = CALLS.lock().unwrap_or_else(|p| p.into_inner());
        let calls = guard.get_or_insert_with(Calls::default);
        leave(calls, &id);
        if calls.gave_up.len() == GAVE_UP {
            calls.gave_up.pop_front();
        }
        calls.gave_up.push_back((id, attempts));
    }
}

fn leave(calls: &mut Calls, id: &Id) {
    if let Some(n) = calls.active.get_mut(id) {
        *n -= 1;
        if *n == 0 {
            calls.active.remove(id);
        }
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let mut guard = CALLS.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(calls) = guard.as_mut() {
                leave(calls, &id);
            }
        }
    }
}
