//! How records and counts look: a table or lines for people, JSON for programs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_runtime::sentences::{self, EFFECT_UNKNOWN};
use idem_runtime::store::{Count, Outcome, Record, RecordState, Resolution};
use serde_json::{Value, json};

/// `t` as RFC 3339 in UTC, to the millisecond; `-` when the store does not know it (a record
/// written before stores kept times).
pub fn time(t: SystemTime) -> String {
    let Ok(since) = t.duration_since(UNIX_EPOCH) else {
        return "-".to_owned();
    };
    if since.is_zero() {
        return "-".to_owned();
    }
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 as a proleptic Gregorian date (H. Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A span for people: `350ms`, `42s`, `3m 05s`, `2h 10m`, `3d 4h`.
pub fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {:02}m", s / 3600, s / 60 % 60),
        _ => format!("{}d {}h", s / 86_400, s / 3600 % 24),
    }
}

/// When a record expires, for people: a span, or never (S34: a running or ambiguous record with
/// no decision never expires by time; `long` says what ends it).
fn expires(d: Duration, long: bool) -> String {
    match (d == Duration::MAX, long) {
        (false, _) => span(d),
        (true, false) => "never".to_owned(),
        (true, true) => "never: kept until it completes or a decision settles it".to_owned(),
    }
}

/// An age for the command line: a number and a unit, `500ms`, `30s`, `10m`, `2h`, `7d`.
pub fn parse_age(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| {
        format!("`{s}` is not an age; write a number and a unit: 500ms, 30s, 10m, 2h, 7d")
    })?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("`{s}`: the unit is one of ms, s, m, h, d")),
    };
    Ok(Duration::from_millis(n.saturating_mul(unit_ms)))
}

/// The stored outcome: its JSON, or what it is when it is not JSON.
fn outcome_json(outcome: &[u8]) -> Value {
    if let Some(why) = Outcome::unreplayable_reason(outcome) {
        return json!({ "unreplayable": String::from_utf8_lossy(why) });
    }
    serde_json::from_slice(outcome)
        .unwrap_or_else(|_| json!({ "not_json": String::from_utf8_lossy(outcome) }))
}

/// A record as JSON (`--json`): every field, times in RFC 3339, spans in milliseconds.
pub fn record_json(r: &Record) -> Value {
    // A record a not-applied decision released (an operator's or the settler's) no longer
    // counts: it is shown as released, not as the state it stood in then (a settler's record
    // stood running under the settler's own lease).
    let released = !r.is_live()
        && r.resolution
            .as_ref()
            .is_some_and(|res| res.decision == idem_runtime::store::Decision::NotApplied);
    let mut v = json!({
        "key": r.key.to_string(),
        "tool": r.tool,
        "state": if released {
            "released"
        } else if forgotten(r) {
            "forgotten"
        } else {
            r.state.kind().as_str()
        },
        "fingerprint": r.fingerprint.to_hex(),
        "first_made": time(r.first_made),
        "created": time(r.created),
        "updated": time(r.updated),
        "unknowns": r.unknowns,
        "unknown_since": r.unknown_since.map(time),
        // S34: null for a record that never expires by time (running or ambiguous, undecided).
        "expires_in_ms": (r.expires_in != Duration::MAX).then_some(r.expires_in.as_millis() as u64),
        "tenant": r.tenant,
        "live": r.is_live(),
        "resolution": r.resolution.as_ref().map(resolution_json),
    });
    match &r.state {
        RecordState::Running { .. } if released => {}
        RecordState::Running {
            token,
            lease_remaining,
        } => {
            v["lease"] = json!({
                "holder": token.0.to_string(),
                "remaining_ms": lease_remaining.as_millis() as u64,
            })
        }
        RecordState::Completed { outcome } => v["outcome"] = outcome_json(outcome),
        // S33: done on `updated`, its outcome no longer kept.
        RecordState::Tombstone => {
            v["done"] = json!(time(r.updated));
            v["note"] = json!(sentences::done_not_kept(
                r.updated,
                r.resolution
                    .as_ref()
                    .is_some_and(|res| res.decision == idem_runtime::store::Decision::Applied),
            ));
        }
        RecordState::Ambiguous { note } => {
            v["note"] = json!(note);
            if r.is_live() {
                v["settle"] = json!({
                    "applied": format!("{} --note TEXT", sentences::resolve_applied(r.key)),
                    "not_applied": format!("{} --note TEXT", sentences::resolve_not_applied(r.key)),
                });
            }
        }
    }
    v
}

/// S33: a tombstone an operator forgot: no longer counts, kept to show that decision.
fn forgotten(r: &Record) -> bool {
    !r.is_live()
        && r.resolution
            .as_ref()
            .is_some_and(|res| res.decision == idem_runtime::store::Decision::Forgotten)
}

/// An operator's decision as JSON.
fn resolution_json(res: &Resolution) -> Value {
    json!({
        "decision": res.decision.as_str(),
        "at": time(res.at),
        "note": res.note,
    })
}

/// Under `list --state ambiguous`: how to settle each record listed.
pub fn settle_hint(records: &[Record]) -> String {
    if records.is_empty() {
        return "no record waits for a decision\n".to_owned();
    }
    let mut out = format!(
        "\n{} record(s) wait for a decision: each call ran, and {EFFECT_UNKNOWN}. {}. Each with the same \
         --store, and --note TEXT to keep a note with the decision:\n",
        records.len(),
        sentences::how_to_settle("KEY")
    );
    for r in records {
        out += &format!(
            "{} --note TEXT  |  {} --note TEXT\n",
            sentences::resolve_applied(r.key),
            sentences::resolve_not_applied(r.key)
        );
    }
    out
}

/// What a record's lease says, for people.
fn lease(r: &Record) -> String {
    match &r.state {
        RecordState::Running {
            lease_remaining, ..
        } if lease_remaining.is_zero() => "ran out".to_owned(),
        RecordState::Running {
            lease_remaining, ..
        } => format!("live {}", span(*lease_remaining)),
        _ => "-".to_owned(),
    }
}

/// Rows as an aligned table.
fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if i + 1 == widths.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(&mut head.iter().copied());
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

/// Records as a table, newest first as listed.
pub fn records_table(records: &[Record]) -> String {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.key.to_string(),
                r.tool.clone(),
                match &r.resolution {
                    Some(res) => format!("{}, resolved {}", r.state.kind(), res.decision),
                    None => r.state.kind().to_string(),
                },
                time(r.first_made),
                time(r.updated),
                lease(r),
                expires(r.expires_in, false),
            ]
        })
        .collect();
    table(
        &[
            "KEY",
            "TOOL",
            "STATE",
            "MADE",
            "CHANGED",
            "LEASE",
            "EXPIRES IN",
        ],
        &rows,
    )
}

/// One record for people, its outcome as pretty JSON.
pub fn record_text(r: &Record) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: String| out += &format!("{name:<12} {value}\n");
    field("key", r.key.to_string());
    field("tool", r.tool.clone());
    if r.is_live() {
        field("state", r.state.kind().to_string());
    } else if forgotten(r) {
        field(
            "state",
            format!(
                "forgotten by an operator (it was a tombstone, {}): no longer counts, the next call with this \
                 key runs the operation again",
                idem_runtime::sentences::done_on(r.updated)
            ),
        );
    } else {
        // S28: a settler's decision is kept as an operator's is; its note says it was the settler.
        let by = match r.resolution.as_ref().and_then(|res| res.note.as_deref()) {
            Some(note) if note.starts_with(idem_runtime::settle::SETTLER_NOTE_PREFIX) => {
                "the settler (its tool's verify)"
            }
            _ => "an operator",
        };
        field(
            "state",
            format!(
                "released by {by} (it was {}): no longer counts, the next call with this key runs the operation",
                r.state.kind()
            ),
        );
    }
    field("fingerprint", r.fingerprint.to_hex());
    // S32: when the operation was first made, which no takeover moves.
    field("made", time(r.first_made));
    if r.created != r.first_made {
        field("taken over", time(r.created));
    }
    field("changed", time(r.updated));
    if let Some(since) = r.unknown_since {
        field(
            "unknowns",
            format!(
                "verify answered unknown {} time(s), first at {}",
                r.unknowns,
                time(since)
            ),
        );
    }
    if let Some(tenant) = &r.tenant {
        field("tenant", tenant.clone());
    }
    if let Some(res) = &r.resolution {
        field("resolved", format!("{} at {}", res.decision, time(res.at)));
        if let Some(note) = &res.note {
            field("resolve note", note.clone());
        }
    }
    if !r.is_live() {
        return out;
    }
    field("expires in", expires(r.expires_in, true));
    match &r.state {
        RecordState::Running {
            token,
            lease_remaining,
        } => {
            field("holder", token.0.to_string());
            field(
                "lease",
                if lease_remaining.is_zero() {
                    "ran out: its holder is gone or stuck; the next call takes it over".to_owned()
                } else {
                    format!("live for {}", span(*lease_remaining))
                },
            );
        }
        RecordState::Ambiguous { note } => {
            field("note", note.clone());
            field("settle", sentences::how_to_settle(r.key));
        }
        // S33: done, its outcome no longer kept; a repeat of its key runs nothing.
        RecordState::Tombstone => {
            field(
                "tombstone",
                sentences::done_not_kept(r.updated, r.resolution.is_some()),
            );
            field(
                "forget",
                format!("`idemkit forget {}` lets the next call run it again", r.key),
            );
        }
        RecordState::Completed { outcome } => {
            out += "outcome:\n";
            out +=
                &serde_json::to_string_pretty(&outcome_json(outcome)).expect("a JSON value prints");
            out += "\n";
        }
    }
    out
}

/// Counts as a table, with a total.
pub fn counts_table(counts: &[Count]) -> String {
    let mut rows: Vec<Vec<String>> = counts
        .iter()
        .map(|c| vec![c.tool.clone(), c.state.to_string(), c.records.to_string()])
        .collect();
    let total: u64 = counts.iter().map(|c| c.records).sum();
    rows.push(vec!["(all)".to_owned(), String::new(), total.to_string()]);
    table(&["TOOL", "STATE", "RECORDS"], &rows)
}

pub fn counts_json(counts: &[Count]) -> Value {
    counts
        .iter()
        .map(|c| json!({ "tool": c.tool, "state": c.state.as_str(), "records": c.records }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_spans() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_000_000_123);
        assert_eq!(time(t), "2026-11-18T11:06:40.123Z");
        assert_eq!(time(UNIX_EPOCH), "-");
        assert_eq!(span(Duration::from_millis(350)), "350ms");
        assert_eq!(span(Duration::from_secs(185)), "3m 05s");
        assert_eq!(span(Duration::from_secs(7800)), "2h 10m");
        assert_eq!(parse_age("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_age("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_age("10").is_err() && parse_age("m").is_err());
    }
}
