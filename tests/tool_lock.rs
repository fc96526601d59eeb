//! The lock of every side-effect tool's identity (`idemkit::lock`): written from the tools this
//! binary registers, it matches them; a lock written by an older build (edited here to what that
//! build had) fails the check naming the tool, what the change does to operations in flight or
//! stored outcomes, and the fix.

use idemkit::lock::{Checked, LockError};
use idemkit::{Classify, Failure, read_only, side_effect};
use serde_json::Value;

#[derive(Debug)]
pub struct PayError;

impl Classify for PayError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<idemkit::Error> for PayError {
    fn from(_: idemkit::Error) -> Self {
        PayError
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Receipt {
    pub id: String,
    pub cents: u64,
}

/// Charges a customer.
#[side_effect(key = "customer_id, period")]
pub async fn charge(
    customer_id: &str,
    period: u32,
    key: &idemkit::IdempotencyKey,
) -> Result<Receipt, PayError> {
    Ok(Receipt {
        id: format!("{customer_id}-{period}-{key}"),
        cents: 100,
    })
}

/// Sends a notice, which the gateway cannot deduplicate.
#[side_effect(key = "user", resend = false, tenant_required = true)]
pub async fn notify(user: String, text: String) -> Result<String, PayError> {
    Ok(format!("{user}: {text}"))
}

/// Reads a balance (not in the lock: read-only tools keep no record).
#[read_only]
pub async fn balance(customer_id: &str) -> Result<u64, PayError> {
    Ok(customer_id.len() as u64)
}

/// A lock file of its own, in a directory removed with it.
fn lock_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.lock");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// The lock as this binary writes it, edited by `edit` as an older build would have written it.
fn older_lock(edit: impl FnOnce(&mut Value)) -> String {
    let mut lock: Value = serde_json::from_str(&idemkit::lock::render()).unwrap();
    edit(&mut lock);
    serde_json::to_string_pretty(&lock).unwrap()
}

fn mismatch(text: &str) -> String {
    let (_dir, path) = lock_file(text);
    match idemkit::lock::compare(&path) {
        Err(LockError::Mismatch(m)) => m.to_string(),
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

#[test]
fn lock_records_each_side_effect_tool_key_fields_types_and_declarations() {
    let lock: Value = serde_json::from_str(&idemkit::lock::render()).unwrap();
    let tools = lock["tools"].as_object().unwrap();
    assert!(tools.contains_key("charge") && tools.contains_key("notify"));
    assert!(
        !tools.contains_key("balance"),
        "read-only tools are not locked"
    );
    let charge = &tools["charge"];
    assert_eq!(
        charge["key"],
        serde_json::json!(["customer_id: &str as text", "period: u32 as int"])
    );
    assert_eq!(charge["key_encoding"], 1);
    assert_eq!(charge["resend"], true, "takes the key: re-sent by default");
    assert_eq!(charge["verify"], false);
    assert_eq!(charge["tenant_required"], false);
    assert_eq!(charge["outcome"], "tool_lock::Receipt");
    let notify = &tools["notify"];
    assert_eq!(
        notify["key"],
        serde_json::json!(["user: alloc::string::String as text"])
    );
    assert_eq!(notify["resend"], false);
    assert_eq!(notify["tenant_required"], true);
    assert_eq!(notify["outcome"], "alloc::string::String");
    // Stable text: the same tools render the same bytes, keys sorted.
    assert_eq!(idemkit::lock::render(), idemkit::lock::render());
    let text = idemkit::lock::render();
    assert!(text.find("\"charge\"").unwrap() < text.find("\"notify\"").unwrap());
}

#[test]
fn lock_written_by_this_build_matches_it() {
    let (_dir, path) = lock_file(&idemkit::lock::render());
    assert!(matches!(
        idemkit::lock::compare(&path),
        Ok(Checked::Matches)
    ));
    idemkit::lock::check(&path);
}

#[test]
fn lock_fails_naming_the_tool_when_a_key_field_was_added_with_what_it_does_and_the_fix() {
    let said = mismatch(&older_lock(|lock| {
        lock["tools"]["charge"]["key"] = serde_json::json!(["customer_id: &str as text"]);
    }));
    assert!(said.contains("tool `charge`"), "{said}");
    assert!(said.contains("its key changed"), "{said}");
    assert!(said.contains("was: customer_id: &str as text\n"), "{said}");
    assert!(said.contains("runs it again"), "{said}");
    assert!(said.contains("not replayed"), "{said}");
    assert!(said.contains("previous = \"customer_id\""), "{said}");
    assert!(said.contains("IDEMKIT_LOCK=update cargo test"), "{said}");
}

#[test]
fn lock_fails_when_a_key_field_type_changed() {
    let said = mismatch(&older_lock(|lock| {
        lock["tools"]["charge"]["key"] = serde_json::json!([
            "customer_id: &str as text",
            "period: alloc::string::String as text"
        ]);
    }));
    assert!(said.contains("tool `charge`"), "{said}");
    assert!(said.contains("period: u32 as int"), "{said}");
    assert!(said.contains("runs it again"), "{said}");
}

#[test]
fn lock_fails_when_a_tool_was_renamed_and_says_to_keep_its_name() {
    let said = mismatch(&older_lock(|lock| {
        let tools = lock["tools"].as_object_mut().unwrap();
        let notify = tools.remove("notify").unwrap();
        tools.insert("send_notice".to_owned(), notify);
    }));
    assert!(
        said.contains("tool `send_notice` is in the lock but no tool has that name"),
        "{said}"
    );
    assert!(said.contains("name = \"send_notice\""), "{said}");
    assert!(said.contains("tool `notify`"), "{said}");
    assert!(said.contains("is not in the lock"), "{said}");
}

#[test]
fn lock_fails_when_an_outcome_field_is_required_that_stored_outcomes_lack() {
    let said = mismatch(&older_lock(|lock| {
        let schema = &mut lock["tools"]["charge"]["outcome_schema"];
        schema["properties"]
            .as_object_mut()
            .unwrap()
            .remove("cents");
        schema["required"] = serde_json::json!(["id"]);
    }));
    assert!(said.contains("tool `charge`"), "{said}");
    assert!(said.contains("`cents`"), "{said}");
    assert!(said.contains("unreplayable"), "{said}");
    assert!(said.contains("#[serde(default)]"), "{said}");
}

#[test]
fn lock_fails_when_resend_changed_and_says_keys_are_unchanged() {
    let said = mismatch(&older_lock(|lock| {
        lock["tools"]["notify"]["resend"] = Value::Bool(true);
    }));
    assert!(said.contains("tool `notify`"), "{said}");
    assert!(
        said.contains("`resend` changed from true to false"),
        "{said}"
    );
    assert!(
        said.contains("keys and stored outcomes are unchanged"),
        "{said}"
    );
}

#[test]
#[should_panic(expected = "tool `charge`")]
fn lock_check_panics_with_the_report() {
    let text = older_lock(|lock| {
        lock["tools"]["charge"]["key_encoding"] = Value::from(0);
    });
    let (_dir, path) = lock_file(&text);
    idemkit::lock::check(&path);
}

#[test]
fn lock_says_when_previous_was_removed_and_when_that_is_safe() {
    let said = mismatch(&older_lock(|lock| {
        lock["tools"]["charge"]["previous"] = serde_json::json!(["customer_id: &str as text"]);
    }));
    assert!(said.contains("tool `charge`"), "{said}");
    assert!(
        said.contains("`previous = \"customer_id\"` was removed"),
        "{said}"
    );
    assert!(
        said.contains("safe once every record made under it has expired"),
        "{said}"
    );
}

#[test]
fn lock_absent_is_written_then_matches_or_under_ci_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.lock");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    let update = std::env::var("IDEMKIT_LOCK").is_ok_and(|v| v == "update");
    match idemkit::lock::compare(&path) {
        Ok(Checked::Written) if !ci || update => {
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                idemkit::lock::render()
            );
            assert!(matches!(
                idemkit::lock::compare(&path),
                Ok(Checked::Matches | Checked::Written)
            ));
        }
        Err(LockError::File(why)) if ci && !update => {
            assert!(why.contains("missing, and CI is set"), "{why}");
            assert!(!path.exists());
        }
        other => panic!("CI={ci}: {other:?}"),
    }
}
