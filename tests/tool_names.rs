//! S21 (issue 30 #10): two tools that share a name would share keys and records, so one tool's
//! outcome would be replayed as the other's. This test binary deliberately defines two
//! side-effect tools named `refund` (in `billing` and `shop`, same key fields): every call of
//! that name is refused before anything is claimed, naming both places, and no body runs. It
//! also holds the registry's duplicate-name report, and JSON's listing of tools whose names
//! collide.
#![cfg(feature = "json")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use idemkit::{
    Classify, Failure, Idem, JsonCallError, JsonTools, MemoryStore, Records, ToolKind, observe,
    read_only, side_effect,
};

/// Times a `refund` body ran, either one.
static REFUND_RUNS: AtomicU32 = AtomicU32::new(0);

#[derive(Debug)]
enum RefundError {
    Idem(idemkit::Error),
}

impl std::fmt::Display for RefundError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefundError::Idem(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RefundError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RefundError::Idem(e) => Some(e),
        }
    }
}

impl Classify for RefundError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<idemkit::Error> for RefundError {
    fn from(e: idemkit::Error) -> Self {
        RefundError::Idem(e)
    }
}

mod billing {
    use super::*;

    /// Refunds an invoice from billing.
    #[side_effect(key = "order_id", json)]
    pub async fn refund(order_id: &str, cents: u64) -> Result<String, RefundError> {
        REFUND_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("billing refunded {cents} on {order_id}"))
    }
}

mod shop {
    use super::*;

    /// Refunds an order from the shop.
    #[side_effect(key = "order_id", json)]
    pub async fn refund(order_id: &str, cents: u64) -> Result<String, RefundError> {
        REFUND_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("shop refunded {cents} on {order_id}"))
    }
}

/// Where each `refund` is defined, as the registry has it: `file:line (module)`.
fn refund_places() -> Vec<String> {
    let mut places: Vec<String> = idemkit::tools()
        .filter(|t| t.name == "refund")
        .map(|t| format!("{}:{} ({})", t.file, t.line, t.module_path))
        .collect();
    places.sort();
    places
}

#[tokio::test]
async fn s21_two_tools_named_refund_are_refused_at_the_first_call_of_either_naming_both_places() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let places = refund_places();
    assert_eq!(places.len(), 2, "{places:?}");
    assert!(
        places.iter().any(|p| p.ends_with("(tool_names::billing)"))
            && places.iter().any(|p| p.ends_with("(tool_names::shop)")),
        "{places:?}"
    );

    let (billing, billing_info) = idem.scope(observe(billing::refund("ord_1", 500))).await;
    let (shop, shop_info) = idem.scope(observe(shop::refund("ord_1", 500))).await;
    assert_eq!(
        REFUND_RUNS.load(Ordering::SeqCst),
        0,
        "neither body ran, and shop was not replayed billing's outcome"
    );
    for (result, info) in [(billing, billing_info), (shop, shop_info)] {
        let message = result.expect_err("a shared name is refused").to_string();
        for place in &places {
            assert!(message.contains(place.as_str()), "{place} in {message}");
        }
        assert!(
            message.contains("`refund`")
                && message.contains("distinct name")
                && message.contains("was not run"),
            "{message}"
        );
        let info = info.expect("the refusal is reported");
        assert_eq!(
            (info.attempts, info.outcome),
            (0, idemkit::CallOutcome::Refused)
        );
        // Refused before anything is claimed: no record of the key.
        let key = info.key.unwrap();
        assert_eq!(store.get(&key).await.unwrap(), None);
    }

    // Repeats are refused alike: the refusal is not a one-off of the first call.
    let again = idem.scope(shop::refund("ord_2", 100)).await;
    assert!(matches!(
        again,
        Err(RefundError::Idem(idemkit::Error::DuplicateTool { ref tool, .. })) if tool == "refund"
    ));
    assert_eq!(REFUND_RUNS.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn s21_a_hand_built_tool_of_the_shared_name_is_refused_too() {
    let idem = Idem::new(MemoryStore::new());
    let mut runs = 0;
    let result: Result<u32, RefundError> = idemkit::Tool::new("refund")
        .idem(&idem)
        .side_effect(&[("order_id", &"ord_9")], &1u64, |_key| {
            runs += 1;
            async { Ok(1) }
        })
        .await;
    assert!(
        matches!(
            result,
            Err(RefundError::Idem(idemkit::Error::DuplicateTool { .. }))
        ),
        "{result:?}"
    );
    assert_eq!(runs, 0);
}

#[tokio::test]
async fn s21_other_tools_of_the_program_run_as_usual() {
    let idem = Idem::new(MemoryStore::new());
    let receipt = idem.scope(notify::notify("cus_1", "hello")).await.unwrap();
    assert_eq!(receipt, "sent hello to cus_1");
}

#[tokio::test]
async fn s21_a_json_call_of_the_shared_name_is_refused_naming_both_places_and_the_name_is_not_listed()
 {
    let tools = JsonTools::all();
    assert!(
        tools.names().all(|n| n != "refund"),
        "{:?}",
        tools.names().collect::<Vec<_>>()
    );
    assert!(tools.definitions().iter().all(|d| d.name != "refund"));
    let idem = Idem::new(MemoryStore::new());
    let err = idem
        .scope(tools.call("refund", r#"{"order_id": "ord_1", "cents": 500}"#))
        .await
        .unwrap_err();
    let JsonCallError::DuplicateTool { name, places } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*name, "refund");
    let mut places = places.clone();
    places.sort();
    assert_eq!(places, refund_places());
    assert!(!err.called());
    let text = err.to_string();
    assert!(
        text.contains("neither was run") && text.contains("distinct"),
        "{text}"
    );
    assert!(matches!(
        JsonTools::only(["refund"]),
        Err(JsonCallError::DuplicateTool { .. })
    ));
    assert_eq!(REFUND_RUNS.load(Ordering::SeqCst), 0);
}

/// Issue 44: JSON's shared names are the registry's view of them (one check, not two): the
/// name and places a JSON call's refusal gives are those the registry's report gives.
#[test]
fn issue44_json_refuses_a_shared_name_with_the_places_the_registry_reports() {
    let report = idemkit::check_unique_tool_names().expect_err("two tools are named `refund`");
    let (_, registry_places) = report
        .duplicates
        .iter()
        .find(|(name, _)| *name == "refund")
        .expect("the registry reports `refund`");
    let mut registry_places: Vec<String> = registry_places
        .iter()
        .map(|t| format!("{}:{} ({})", t.file, t.line, t.module_path))
        .collect();
    registry_places.sort();
    let err = JsonTools::only(["refund"]).expect_err("a shared name is refused");
    let JsonCallError::DuplicateTool { name, places } = &err else {
        panic!("{err:?}")
    };
    let said = format!(
        "two tools of this program are named `refund` ({}), so a call of `refund` cannot say which it means; \
         neither was run. Calling again will not help: the program must give each a distinct `name = \"...\"`",
        places.join(" and ")
    );
    assert_eq!(err.to_string(), said);
    let mut places = places.clone();
    places.sort();
    assert_eq!((*name, places), ("refund", registry_places));
}

/// `notify` is marked `json` here, and another tool of the same name, not marked `json`, is
/// defined below (in `audit`): the JSON listing describes `notify` by its own doc comment.
mod notify {
    use super::*;

    /// Sends a message to a customer.
    #[side_effect(key = "customer_id, text", json)]
    pub async fn notify(customer_id: &str, text: &str) -> Result<String, RefundError> {
        Ok(format!("sent {text} to {customer_id}"))
    }
}

mod audit {
    use super::*;

    /// Reads the audit log of notifications (a read: no key, no record, so it shares none).
    #[read_only]
    pub async fn notify(customer_id: &str) -> Result<u32, RefundError> {
        let _ = customer_id;
        Ok(0)
    }
}

#[tokio::test]
async fn s21_each_json_definition_carries_its_own_doc_comment_when_another_tool_shares_the_name() {
    let defs = JsonTools::all().definitions();
    let notify = defs.iter().find(|d| d.name == "notify").unwrap();
    assert_eq!(notify.description, "Sends a message to a customer.");
    assert_eq!(notify.kind, ToolKind::SideEffect);
    // The read-only `notify` keeps no record: the side effect is not refused for it.
    assert_eq!(audit::notify("cus_1").await.unwrap(), 0);
}

#[test]
fn registry_reports_two_tools_with_the_same_name() {
    let named_refund: Vec<_> = idemkit::tools().filter(|t| t.name == "refund").collect();
    assert_eq!(named_refund.len(), 2);
    assert!(named_refund.iter().all(|t| t.kind == ToolKind::SideEffect));
    assert!(named_refund.iter().all(|t| t.key_fields == ["order_id"]));
    let modules: Vec<_> = named_refund.iter().map(|t| t.module_path).collect();
    assert!(
        modules.contains(&"tool_names::billing") && modules.contains(&"tool_names::shop"),
        "{modules:?}"
    );

    let err = idemkit::check_unique_tool_names().expect_err("two tools are named `refund`");
    let names: Vec<&str> = err.duplicates.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["notify", "refund"]);
    let refund = &err.duplicates[1];
    assert_eq!(refund.1.len(), 2);
    let message = err.to_string();
    assert!(
        message.contains("`refund`") && message.contains("tool_names.rs"),
        "{message}"
    );
}
