//! The sentences idemkit says about how a call ended, to a model or to an operator, each written
//! once: MCP results, rig's errors and JSON calls (through [`Explanation`](crate::Explanation)),
//! the HTTP layer's problem+json, idemkit's own errors, the settler's report and the `idemkit`
//! command take them from here, so that a replay, an unknown outcome, how it is settled and
//! what was not run read alike on every surface.
//!
//! Not a stable API: the surfaces' one wording. Each surface keeps its own wire format (field
//! names, titles, status codes, exit codes); only the sentences are shared.

use std::fmt::Display;

/// The lead of an answer that says idemkit refused the call before any attempt of it: nothing
/// was done. Said only there (an attempt that may have started is never "not run").
pub const NOT_RUN: &str = "Not run";

/// `what` (the tool, the request) was refused before any attempt of it: nothing was done.
pub fn was_not_run(what: &str) -> String {
    format!("{what} was not run")
}

/// What an unknown outcome means for the effect: it may have happened, or not.
pub const EFFECT_UNKNOWN: &str = "the effect may or may not have happened";

/// The command an operator runs when the effect of `key`'s operation happened: the record
/// completes with the outcome given, which later calls replay.
pub fn resolve_applied(key: impl Display) -> String {
    format!("idemkit resolve {key} applied --outcome JSON")
}

/// The command an operator runs when the effect of `key`'s operation did not happen: the record
/// is released, and the next call runs the operation.
pub fn resolve_not_applied(key: impl Display) -> String {
    format!("idemkit resolve {key} not-applied")
}

/// How an operator settles the operation of `key` (a record's key, or `KEY`) whose outcome is
/// unknown, and what each decision does; a clause with no full stop, for any surface to end.
///
/// ```
/// let said = idem_runtime::sentences::how_to_settle("KEY");
/// assert!(said.contains("`idemkit resolve KEY applied --outcome JSON` if it happened"));
/// assert!(said.contains("`idemkit resolve KEY not-applied` if it did not"));
/// ```
pub fn how_to_settle(key: impl Display) -> String {
    format!(
        "To settle it, look the effect up, then run `{}` if it happened (later calls replay that outcome) or \
         `{}` if it did not (the next call runs it)",
        resolve_applied(&key),
        resolve_not_applied(&key)
    )
}

/// The note of a record whose holder's lease lapsed at `at` while it ran (S31): how operators
/// and the settler read it, as an ambiguous record.
pub fn lease_lapsed(at: std::time::SystemTime) -> String {
    format!(
        "its holder's lease lapsed at {} (the holder died, stalled or was cut off) and its body may have \
         started: {EFFECT_UNKNOWN}",
        utc(at)
    )
}

/// A duration for a person, to two units: `45s`, `12m 05s`, `3h 20m`, `4d 6h`.
pub fn span(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {:02}m", s / 3600, s / 60 % 60),
        _ => format!("{}d {}h", s / 86_400, s / 3600 % 24),
    }
}

/// `t` as RFC 3339 in UTC, to the millisecond.
pub fn utc(t: std::time::SystemTime) -> String {
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 as a proleptic Gregorian date (H. Hinnant's `civil_from_days`).
    let z = days as i64 + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// The sentence a model reads before a replayed result: it was done before, nothing was done
/// again.
pub fn replayed(key: Option<&str>) -> String {
    format!(
        "Replayed: an earlier call with the same arguments already did this (idempotency key {}). \
         This is its recorded result; nothing was done again.",
        key.unwrap_or("?")
    )
}

/// S33: what a repeat of an operation whose record is a tombstone is told: it was done on
/// `done` (by a decision, when `resolved`), its result is no longer kept, and it is not run
/// again; a clause with no full stop, for any surface to end.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// let said = idem_runtime::sentences::done_not_kept(UNIX_EPOCH + Duration::from_secs(86_400), false);
/// assert!(said.starts_with("done on 1970-01-02T00:00:00.000Z; its result is no longer kept"));
/// ```
pub fn done_not_kept(done: std::time::SystemTime, resolved: bool) -> String {
    let when = done_on(done);
    let how = match resolved {
        true => " (an operator or its verify function settled it as applied)",
        false => "",
    };
    format!(
        "{when}{how}; its result is no longer kept (its time-to-live has passed), and it is not run again \
         under this key"
    )
}

/// S33: "done on DATE" (the store's clock), or that the store did not keep the date.
pub fn done_on(done: std::time::SystemTime) -> String {
    match done {
        std::time::UNIX_EPOCH => "done on a date this store did not keep".to_owned(),
        at => format!("done on {}", utc(at)),
    }
}

/// S33: what to do about an operation answered [`done_not_kept`]: nothing, if it was meant;
/// a new operation needs the field that tells it apart in its key.
pub const DONE_WHAT_TO_DO: &str = "If this is the same operation, it is done: do not call it again. If it is a new one, \
     it needs a key of its own (a field that tells it apart, such as a date or a reference)";
