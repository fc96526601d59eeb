//! Whether an operator's outcome (`idemkit resolve KEY applied --outcome JSON`) has the shape of
//! what the tool returns, judged by outcomes the tool stored itself. The command does not have
//! the tool's Rust type, so it compares with real outcomes of the same tool in the same store: a
//! field that every one of them has (and not as `null`) must be there, as serde's derive requires
//! of a field without a default; a number where they all have integers must be an integer; a
//! value must be of a kind they have (object, array, string, number, bool). Fields they never have
//! are reported only beside a missing one (serde ignores unknown fields, so alone they decode).
//! A one-field object where they have other one-field objects is taken as another variant of an
//! enum, and not looked into.

use idem_runtime::IdempotencyKey;
use idem_runtime::store::{RecordFilter, StateKind};
use serde_json::Value;

use crate::Failed;

/// What in `given` does not fit the shape of `references` (outcomes the tool wrote), each a
/// sentence naming the path; empty when it fits.
pub fn mismatches(references: &[Value], given: &Value) -> Vec<String> {
    let refs: Vec<&Value> = references.iter().collect();
    let mut found = Vec::new();
    check("", &refs, given, &mut found);
    found
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn at(path: &str) -> String {
    if path.is_empty() {
        "the outcome".to_owned()
    } else {
        format!("`{path}`")
    }
}

fn check(path: &str, refs: &[&Value], given: &Value, found: &mut Vec<String>) {
    // `null` is an `Option`'s `None` (or a unit): it fits wherever a value may be absent.
    let refs: Vec<&Value> = refs.iter().copied().filter(|v| !v.is_null()).collect();
    if refs.is_empty() || given.is_null() {
        return;
    }
    if !refs.iter().any(|r| kind(r) == kind(given)) {
        let mut kinds: Vec<&str> = refs.iter().map(|r| kind(r)).collect();
        kinds.dedup();
        found.push(format!(
            "{} is {}, where the tool's outcomes have {}",
            at(path),
            kind(given),
            kinds.join(" or ")
        ));
        return;
    }
    match given {
        Value::Number(n) => {
            let integers = refs
                .iter()
                .all(|r| r.as_number().is_some_and(|r| !r.is_f64()));
            if integers && n.is_f64() {
                found.push(format!(
                    "{} is {n}, where the tool's outcomes have whole numbers",
                    at(path)
                ));
            }
        }
        Value::Array(items) => {
            let elements: Vec<&Value> =
                refs.iter().filter_map(|r| r.as_array()).flatten().collect();
            for (i, item) in items.iter().enumerate() {
                check(&format!("{path}[{i}]"), &elements, item, found);
            }
        }
        Value::Object(fields) => {
            let objects: Vec<&serde_json::Map<String, Value>> =
                refs.iter().filter_map(|r| r.as_object()).collect();
            // An enum's variant (`{"Charged": {...}}`) where the outcomes have others.
            if fields.len() == 1 && objects.iter().all(|o| o.len() == 1) {
                let (name, value) = fields.iter().next().expect("one field");
                let same: Vec<&Value> = objects.iter().filter_map(|o| o.get(name)).collect();
                if !same.is_empty() {
                    check(&join(path, name), &same, value, found);
                }
                return;
            }
            // Sorted: serde_json's maps keep insertion order when a crate of the build turns on
            // its `preserve_order`, and the message must not depend on that.
            let mut missing: Vec<&String> = objects[0]
                .iter()
                .filter(|(name, value)| {
                    !value.is_null()
                        && !fields.contains_key(*name)
                        && objects
                            .iter()
                            .all(|o| o.get(*name).is_some_and(|v| !v.is_null()))
                })
                .map(|(name, _)| name)
                .collect();
            missing.sort();
            if !missing.is_empty() {
                let mut unknown: Vec<String> = fields
                    .keys()
                    .filter(|name| !objects.iter().any(|o| o.contains_key(*name)))
                    .map(|name| format!("`{}`", join(path, name)))
                    .collect();
                unknown.sort();
                let missing: Vec<String> = missing
                    .iter()
                    .map(|name| format!("`{}`", join(path, name)))
                    .collect();
                let mut sentence = format!(
                    "{} lacks {}, which every outcome the tool stored has",
                    at(path),
                    missing.join(", ")
                );
                if !unknown.is_empty() {
                    sentence += &format!(", and has {}, which none has", unknown.join(", "));
                }
                found.push(sentence);
            }
            for (name, value) in fields {
                let same: Vec<&Value> = objects.iter().filter_map(|o| o.get(name)).collect();
                check(&join(path, name), &same, value, found);
            }
        }
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// How many of a tool's own stored outcomes an operator's outcome is compared with.
const SHAPE_REFERENCES: usize = 20;

/// Refuses an applied outcome whose shape differs from the outcomes the record's tool stored
/// itself (see `shape`), unless `unchecked`; warns when the store holds none to compare with.
/// The next call would otherwise fail to replay it, blaming the tool's return type.
pub(crate) async fn check_outcome(
    store: &dyn idem_runtime::Records,
    key: &IdempotencyKey,
    outcome: &str,
    unchecked: bool,
) -> Result<(), Failed> {
    use idem_runtime::store::{Outcome, RecordState};

    let Ok(Some(record)) = store.get(key).await else {
        // Absent or unreadable: `resolve` itself says so.
        return Ok(());
    };
    let tool = record.tool;
    let given: serde_json::Value = serde_json::from_str(outcome).expect("checked to be JSON");
    let filter = RecordFilter::new()
        .tool(tool.clone())
        .state(StateKind::Completed)
        .limit(SHAPE_REFERENCES * 2);
    let listed = match store.list(&filter).await {
        Ok(listed) => listed,
        Err(e) => {
            eprintln!(
                "idemkit: warning: the outcome's shape was not checked: the tool's own outcomes could not be read \
                 ({e})"
            );
            return Ok(());
        }
    };
    // Outcomes the tool wrote itself: not an operator's, not one kept as unreplayable.
    let references: Vec<(IdempotencyKey, serde_json::Value)> = listed
        .into_iter()
        .filter(|r| r.resolution.is_none() && r.key != *key)
        .filter_map(|r| match r.state {
            RecordState::Completed { outcome }
                if Outcome::unreplayable_reason(&outcome).is_none() =>
            {
                serde_json::from_slice(&outcome).ok().map(|v| (r.key, v))
            }
            _ => None,
        })
        .take(SHAPE_REFERENCES)
        .collect();
    let Some((example, _)) = references.first() else {
        eprintln!(
            "idemkit: warning: the outcome's shape was not checked: no call of tool `{tool}` completed in this \
             store to compare it with. Later calls of {key} replay it as what the tool returns; if it does not \
             read back as that type they fail, saying so"
        );
        return Ok(());
    };
    let values: Vec<serde_json::Value> = references.iter().map(|(_, v)| v.clone()).collect();
    let wrong = mismatches(&values, &given);
    if wrong.is_empty() {
        return Ok(());
    }
    let judged = format!(
        "judged by {} outcome(s) tool `{tool}` stored itself (`idemkit show {example}` shows one)",
        values.len()
    );
    if unchecked {
        eprintln!(
            "idemkit: warning: written unchecked, though its shape differs from what tool `{tool}` returns, {judged}: {}",
            wrong.join("; ")
        );
        return Ok(());
    }
    Err(Failed(format!(
        "refused: the outcome does not have the shape of what tool `{tool}` returns, {judged}: {}. Later calls \
         of {key} would fail to read it back. Give the JSON a call of the tool returns; `--unchecked` writes it \
         anyway (only if the tool's return type changed since). Nothing was written",
        wrong.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::mismatches;

    #[test]
    fn an_object_without_the_tools_fields_is_told_what_it_lacks() {
        let refs = [
            json!({"charge_id": "ch_1", "cents": 4200, "memo": null}),
            json!({"charge_id": "ch_2", "cents": 100, "memo": "x"}),
        ];
        let found = mismatches(&refs, &json!({"id": 1}));
        assert_eq!(
            found,
            [
                "the outcome lacks `cents`, `charge_id`, which every outcome the tool stored has, \
              and has `id`, which none has"
            ]
        );
        assert!(mismatches(&refs, &json!({"charge_id": "ch_op", "cents": 1})).is_empty());
        assert!(
            mismatches(
                &refs,
                &json!({"charge_id": "ch_op", "cents": 1, "extra": true})
            )
            .is_empty(),
            "an unknown field alone decodes (serde ignores it)"
        );
    }

    #[test]
    fn kinds_integers_arrays_and_nesting() {
        let refs = [json!({"receipt": {"cents": 4200, "lines": [{"sku": "a"}]}})];
        assert_eq!(
            mismatches(&refs, &json!({"receipt": {"cents": 1.5, "lines": []}})),
            ["`receipt.cents` is 1.5, where the tool's outcomes have whole numbers"]
        );
        assert_eq!(
            mismatches(&refs, &json!({"receipt": {"cents": "42", "lines": [{}]}})),
            [
                "`receipt.cents` is a string, where the tool's outcomes have a number",
                "`receipt.lines[0]` lacks `receipt.lines[0].sku`, which every outcome the tool stored has"
            ]
        );
        assert_eq!(
            mismatches(&[json!("ch_1")], &json!({"charge_id": "ch_1"})),
            ["the outcome is an object, where the tool's outcomes have a string"]
        );
    }

    #[test]
    fn enum_variants_options_and_maps_are_not_refused() {
        let refs = [json!({"Charged": {"id": "ch_1", "cents": 5}})];
        assert!(mismatches(&refs, &json!({"Refunded": {"amount": 3}})).is_empty());
        assert_eq!(
            mismatches(&refs, &json!({"Charged": {"amount": 3, "cents": 5}})),
            [
                "`Charged` lacks `Charged.id`, which every outcome the tool stored has, and has \
                 `Charged.amount`, which none has"
            ]
        );
        assert!(
            mismatches(
                &[json!({"memo": "a", "id": 1})],
                &json!({"memo": null, "id": 2})
            )
            .is_empty()
        );
        assert!(mismatches(&[json!(null)], &json!({"anything": 1})).is_empty());
        // A map's keys differ from outcome to outcome: only keys every outcome has are required.
        let maps = [json!({"a": 1, "b": 2}), json!({"c": 3})];
        assert!(mismatches(&maps, &json!({"d": 4})).is_empty());
    }
}
