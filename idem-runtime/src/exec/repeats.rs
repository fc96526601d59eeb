//! Which keys this process is retrying, and which just gave up retrying: a call of the same key
//! while one of it is between failed attempts, or right after one ran out of attempts, is a retry
//! loop around the tool (idemkit already retries it), which multiplies the attempts; it is said
//! once per repeat as a `tracing` warning, and the call goes on as it would have.
//!
//! Only a call that has failed an attempt enters the set, so a call while nothing is retrying or
//! has given up (the usual case) costs one atomic load, and callers of one key that run at the
//! same time without failing (several agents, a fan-out) are not warned of: that is what the
//! claim is for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::key::IdempotencyKey;

/// How many keys that gave up are remembered (the oldest is forgotten first).
const GAVE_UP: usize = 256;

/// How long "right after it gave up" lasts.
const GAVE_UP_FOR: Duration = Duration::from_secs(60);

/// A call's identity in this process: the tenant it runs for, and its key.
type Id = (Option<Arc<str>>, IdempotencyKey);

#[derive(Default)]
struct Calls {
    /// Calls between failed attempts, by key: how many.
    retrying: HashMap<Id, u32>,
    /// Keys whose last call ended after retrying: when, and after how many attempts.
    gave_up: HashMap<Id, (Instant, u32)>,
    /// When expired `gave_up` entries are next dropped (so the set empties, and calls stop
    /// taking the lock, at most a little after a minute of no give-ups).
    next_prune: Option<Instant>,
}

impl Calls {
    /// Drops the give-ups older than [`GAVE_UP_FOR`], at most every quarter of it.
    fn prune(&mut self, now: Instant) {
        if self.next_prune.is_some_and(|at| now < at) {
            return;
        }
        let before = self.gave_up.len();
        self.gave_up
            .retain(|_, (at, _)| now.duration_since(*at) <= GAVE_UP_FOR);
        ENTRIES.fetch_sub(before - self.gave_up.len(), Ordering::AcqRel);
        self.next_prune = Some(now + GAVE_UP_FOR / 4);
    }
}

static CALLS: Mutex<Option<Calls>> = Mutex::new(None);

/// Entries in `CALLS` (both collections): none, and a call need not look.
static ENTRIES: AtomicUsize = AtomicUsize::new(0);

fn calls() -> std::sync::MutexGuard<'static, Option<Calls>> {
    CALLS.lock().unwrap_or_else(|p| p.into_inner())
}

/// One side-effect call; while it is retrying, it is in the set, and leaves it when dropped.
#[derive(Debug)]
pub(crate) struct InProgress {
    key: IdempotencyKey,
    /// Set once an attempt failed and the call may retry.
    retrying: Option<Id>,
}

/// Enters the call of `tool` with `key`, warning if the key is being retried here already or
/// just gave up retrying.
pub(crate) fn enter(tool: &str, key: &IdempotencyKey) -> InProgress {
    let in_progress = InProgress {
        key: *key,
        retrying: None,
    };
    if ENTRIES.load(Ordering::Acquire) == 0 {
        return in_progress;
    }
    let id = (crate::scope::task_tenant(), *key);
    let mut guard = calls();
    let calls = guard.get_or_insert_with(Calls::default);
    let now = Instant::now();
    calls.prune(now);
    let retrying = calls.retrying.contains_key(&id);
    let gave_up = calls
        .gave_up
        .remove(&id)
        .inspect(|_| {
            ENTRIES.fetch_sub(1, Ordering::AcqRel);
        })
        .filter(|(at, _)| now.duration_since(*at) <= GAVE_UP_FOR)
        .map(|(_, attempts)| attempts);
    drop(guard);
    if retrying {
        let message = format!(
            "tool `{tool}` was called again with key {key} while a call of it in this process is still in progress \
             (retrying its own failed attempts): idemkit already retries a tool by its `max_attempts`/`retry`; a retry \
             loop around the call multiplies the attempts. Call it once and let the attribute decide, or lower \
             `max_attempts`"
        );
        tracing::warn!(target: "idemkit.side_effect", tool, %key, "{message}");
        to_stderr_once(&message);
    } else if let Some(attempts) = gave_up {
        let message = format!(
            "tool `{tool}` was called again with key {key} right after a call of it gave up after {attempts} attempt(s): \
             idemkit already retried it; a retry loop around the call multiplies the attempts (your loop's count \
             times {attempts}). Raise the attribute's `max_attempts` (or `retry`) instead of looping"
        );
        tracing::warn!(target: "idemkit.side_effect", tool, %key, attempts, "{message}");
        to_stderr_once(&message);
    }
    in_progress
}

/// Without a `tracing` subscriber a warning goes nowhere: the first retry-loop warning of a
/// process that has none (a loop around a tool here, or one that makes a new key each turn:
/// `core::fresh`) is printed to stderr as well, once, with how to see the rest.
pub(crate) fn to_stderr_once(message: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let unheard = tracing::dispatcher::get_default(|d| d.is::<tracing::subscriber::NoSubscriber>());
    if unheard && !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "idemkit: warning: {message}\n\
             idemkit: no `tracing` subscriber is set, so idemkit's other warnings are not shown; install one \
             (for example `tracing_subscriber::fmt::init()`) to see them"
        );
    }
}

impl InProgress {
    /// An attempt failed and the call may try again: the key is being retried.
    pub(crate) fn retrying(&mut self) {
        if self.retrying.is_some() {
            return;
        }
        let id = (crate::scope::task_tenant(), self.key);
        let mut guard = calls();
        let calls = guard.get_or_insert_with(Calls::default);
        let n = calls.retrying.entry(id.clone()).or_default();
        if *n == 0 {
            ENTRIES.fetch_add(1, Ordering::AcqRel);
        }
        *n += 1;
        self.retrying = Some(id);
    }

    /// The call ended after `attempts` attempts without succeeding, the last failure retryable:
    /// it gave up.
    pub(crate) fn gave_up(&mut self, attempts: u32) {
        let retrying = self.retrying.take();
        let mut guard = calls();
        let calls = guard.get_or_insert_with(Calls::default);
        let id = match retrying {
            Some(id) => {
                leave(calls, &id);
                id
            }
            None => (crate::scope::task_tenant(), self.key),
        };
        let now = Instant::now();
        if calls.gave_up.len() >= GAVE_UP && !calls.gave_up.contains_key(&id) {
            // Full: the expired go first, else the oldest.
            calls.next_prune = None;
            calls.prune(now);
            if calls.gave_up.len() >= GAVE_UP
                && let Some(oldest) = calls
                    .gave_up
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(id, _)| id.clone())
            {
                calls.gave_up.remove(&oldest);
                ENTRIES.fetch_sub(1, Ordering::AcqRel);
            }
        }
        if calls.gave_up.insert(id, (now, attempts)).is_none() {
            ENTRIES.fetch_add(1, Ordering::AcqRel);
        }
    }
}

fn leave(calls: &mut Calls, id: &Id) {
    if let Some(n) = calls.retrying.get_mut(id) {
        *n -= 1;
        if *n == 0 {
            calls.retrying.remove(id);
            ENTRIES.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        if let Some(id) = self.retrying.take() {
            let mut guard = calls();
            if let Some(calls) = guard.as_mut() {
                leave(calls, &id);
            }
        }
    }
}
