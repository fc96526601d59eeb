//! A retry loop around a tool that makes a new key each time (issue 51 #3): a caller that fills
//! a key field with `Uuid::new_v4()` inside its own loop, or a model that invents a request id
//! per call. Each turn is then a new operation, which nothing deduplicates.
//!
//! Seen as: a side-effect call of a tool, with the same other arguments (fingerprint) and tenant
//! as a call of it in this process that ended without succeeding (its outcome unknown, its
//! attempts spent, its lease lost, or it was dropped after something ran; not a `Permanent`
//! failure, nor a call refused before running) at most [`WINDOW`] ago, claims a **new** record
//! under another key. That is said once per tool, as a `tracing` warning naming the tool and
//! its key fields, and counted each time (`idemkit_fresh_key_retries_total{tool}`).
//!
//! What it costs: nothing is remembered until a call ends without succeeding, and until then a
//! claim of a new record looks at one atomic flag. The memory is bounded ([`REMEMBERED`]
//! failures, the oldest forgotten first; [`WARNED`] tools warned of).
//!
//! Two different operations whose key fields differ but whose other arguments are the same (two
//! customers charged the same amount right after one of the charges failed) look alike: the
//! warning says "if", and is said once per tool.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

/// How long after a call ended without succeeding a call of other arguments alike with a new key
/// counts as its retry.
const WINDOW: Duration = Duration::from_secs(10 * 60);

/// How many failed calls are remembered (the oldest is forgotten first).
const REMEMBERED: usize = 256;

/// How many tools are remembered as warned of (past it, the count goes on, the warning stops).
const WARNED: usize = 1024;

/// A call's other arguments and tenant, in a word: the first 8 bytes of the fingerprint (a
/// SHA-256), mixed with the tenant when there is one. A tool without other arguments, whose
/// calls all look alike (nothing to tell a retry by), has a slot that [`is_none`].
#[inline]
pub(crate) fn slot(fingerprint: &Fingerprint, tenant: Option<&str>) -> u64 {
    let mut first = [0; 8];
    first.copy_from_slice(&fingerprint.0[..8]);
    let slot = u64::from_le_bytes(first);
    match tenant {
        // Told from a call without arguments where it is used ([`is_none`]): the first
        // attempt's path reads 8 bytes, no more.
        None => slot,
        Some(_) if is_none(slot) => NONE,
        Some(tenant) => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            tenant.hash(&mut h);
            (slot ^ h.finish()).max(1)
        }
    }
}

/// Whether `slot` is a call's without other arguments.
fn is_none(slot: u64) -> bool {
    slot == NONE || slot == NO_ARGUMENTS || slot == NULL_ARGUMENTS
}

/// The [`slot`] of a tenant's call without other arguments: nothing is remembered of it.
const NONE: u64 = 0;

/// The first 8 bytes of the fingerprint of no arguments: SHA-256 of `{}` (what the attributes and
/// JSON tools fingerprint), as [`slot`] reads them.
const NO_ARGUMENTS: u64 = u64::from_le_bytes([0x44, 0x13, 0x6f, 0xa3, 0x55, 0xb3, 0x67, 0x8a]);

/// The same of SHA-256 of `null` (`Tool::side_effect` with `&()`).
const NULL_ARGUMENTS: u64 = u64::from_le_bytes([0x74, 0x23, 0x4e, 0x98, 0xaf, 0xe7, 0x49, 0x8f]);

/// A tool's call with these arguments ([`slot`]), in a word (the tool's name hashed in).
fn id(tool: &str, slot: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tool.hash(&mut h);
    slot.hash(&mut h);
    h.finish()
}

/// The last call of a tool with some arguments that ended without succeeding.
struct Last {
    tool: Box<str>,
    key: IdempotencyKey,
    at: Instant,
}

#[derive(Default)]
struct Failed {
    /// By [`id`].
    last: HashMap<u64, Last>,
    /// When expired entries are next dropped (so the set empties, and claims stop taking the
    /// lock, at most a quarter of [`WINDOW`] after it expired).
    next_prune: Option<Instant>,
    /// The tools warned of.
    warned: HashSet<Box<str>>,
}

impl Failed {
    /// Drops the entries older than [`WINDOW`]: at most every quarter of it, or now if `force`.
    fn prune(&mut self, now: Instant, force: bool) {
        if !force && self.next_prune.is_some_and(|at| now < at) {
            return;
        }
        self.last
            .retain(|_, last| now.duration_since(last.at) <= WINDOW);
        self.next_prune = Some(now + WINDOW / 4);
    }
}

static FAILED: Mutex<Option<Failed>> = Mutex::new(None);

/// Whether `FAILED.last` may hold anything: when not, a claim need not look.
static ANY: AtomicBool = AtomicBool::new(false);

fn failed() -> std::sync::MutexGuard<'static, Option<Failed>> {
    FAILED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A call of `tool` with `key` and these arguments ([`slot`]) ended without succeeding.
#[cold]
pub(crate) fn ended_unsucceeded(tool: &str, slot: u64, key: IdempotencyKey) {
    if is_none(slot) {
        return;
    }
    let now = Instant::now();
    let mut guard = failed();
    let failed = guard.get_or_insert_with(Failed::default);
    let id = id(tool, slot);
    if failed.last.len() >= REMEMBERED && !failed.last.contains_key(&id) {
        // Full: the expired go first, else the oldest.
        failed.prune(now, true);
        if failed.last.len() >= REMEMBERED
            && let Some(oldest) = failed
                .last
                .iter()
                .min_by_key(|(_, last)| last.at)
                .map(|(id, _)| *id)
        {
            failed.last.remove(&oldest);
        }
    }
    let tool = tool.into();
    failed.last.insert(id, Last { tool, key, at: now });
    ANY.store(true, Ordering::Release);
}

/// A claim of `key` for `tool` with these arguments took the key: a `new` record, or one taken
/// over. If a call alike ended without succeeding under another key within [`WINDOW`], and this
/// is a new record, the caller is retrying with a fresh key: counted, and warned of once per
/// tool. A claim of the failed call's own key (a retry done right) forgets it.
#[inline]
pub(crate) fn claimed(
    tool: &str,
    fingerprint: &Fingerprint,
    tenant: Option<&str>,
    key: IdempotencyKey,
    new: bool,
) {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    let slot = slot(fingerprint, tenant);
    if !is_none(slot) {
        claimed_slow(tool, slot, key, new);
    }
}

#[cold]
fn claimed_slow(tool: &str, slot: u64, key: IdempotencyKey, new: bool) {
    let now = Instant::now();
    let mut guard = failed();
    let Some(failed) = guard.as_mut() else {
        return;
    };
    failed.prune(now, false);
    let id = id(tool, slot);
    let found = failed
        .last
        .get(&id)
        .filter(|last| *last.tool == *tool)
        .map(|last| (last.key, now.duration_since(last.at)));
    let fresh = match found {
        Some((before, ago)) => {
            failed.last.remove(&id);
            (new && before != key && ago <= WINDOW).then_some((before, ago))
        }
        None => None,
    };
    if failed.last.is_empty() {
        ANY.store(false, Ordering::Release);
    }
    let Some((before, ago)) = fresh else {
        return;
    };
    let first = failed.warned.len() < WARNED && failed.warned.insert(tool.into());
    drop(guard);
    crate::meters::fresh_key_retry(tool);
    if first {
        warn(tool, before, key, ago);
    }
}

fn warn(tool: &str, before: IdempotencyKey, key: IdempotencyKey, ago: Duration) {
    let fields = crate::registry::tools()
        .find(|t| t.name == tool && !t.key_fields.is_empty())
        .map(|t| t.key_fields.join(", "));
    let named = match &fields {
        Some(fields) => format!("its key field(s) `{fields}`"),
        None => "its key fields".to_owned(),
    };
    let message = format!(
        "tool `{tool}` was called with a new key ({key}) and the same other arguments {ago:.0?} after a call of it with \
         key {before} ended without succeeding: if this is a retry whose key was made anew ({named} filled with \
         `Uuid::new_v4()` or a timestamp inside a retry loop, or made up by the model on each call), every retry is a \
         new operation and the provider may act again. Derive the key from fields that identify the operation, or \
         mint an `OperationId` once, before the loop (`idem.operation(\"plan/step\").await?`), and key on that. \
         (Said once per tool; counted in `idemkit_fresh_key_retries_total`.)"
    );
    tracing::warn!(
        target: "idemkit.side_effect",
        tool,
        key_fields = fields.as_deref().unwrap_or("?"),
        %key,
        previous_key = %before,
        "{message}"
    );
    super::super::repeats::to_stderr_once(&message);
}

#[cfg(test)]
mod tests {
    use super::{NONE, is_none, slot};
    use crate::fingerprint::{Fingerprint, Fingerprinter};

    /// A tool without other arguments: all its calls look alike, so none is remembered.
    #[test]
    fn no_other_arguments_is_no_slot() {
        assert!(is_none(slot(&Fingerprinter::new().finish(), None)));
        assert!(is_none(slot(&Fingerprint::of(&()).unwrap(), None)));
        let empty = Fingerprint::of(&serde_json::json!({})).unwrap();
        assert_eq!(slot(&empty, Some("acme")), NONE);
        let mut args = Fingerprinter::new();
        args.arg("cents", &4200).unwrap();
        let some = args.finish();
        assert!(!is_none(slot(&some, None)) && !is_none(slot(&some, Some("acme"))));
        assert_ne!(slot(&some, None), slot(&some, Some("acme")));
    }
}
