//! Tools called by name with JSON arguments (feature `json`, issue 17 part 1): the same key as
//! from Rust (the contract's golden vector), one shared record, schemas in the chat APIs' shape,
//! and malformed calls refused before anything runs.

use std::collections::HashMap;
use std::sync::Mutex;

use idemkit::{
    Classify, Failure, Idem, IdempotencyKey, JsonCallError, JsonTools, MemoryStore, ToolKind,
    observe, read_only, side_effect,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const GOLDEN: &str = "32e00e40-1a53-8058-93c7-e9d1adc8ecaa";

#[derive(Debug)]
enum PayError {
    Declined(String),
    /// Sent, no answer: it may have happened.
    Timeout,
    Idem(idemkit::Error),
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Declined(why) => write!(f, "card declined: {why}"),
            PayError::Timeout => f.write_str("the provider did not answer in time"),
            PayError::Idem(e) => e.fmt(f),
        }
    }
}

// idemkit's own error in its chain: a failed JSON call's explanation names it (key reuse, …).
impl std::error::Error for PayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PayError::Declined(_) | PayError::Timeout => None,
            PayError::Idem(e) => Some(e),
        }
    }
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            PayError::Timeout => Failure::Ambiguous,
            PayError::Declined(_) | PayError::Idem(_) => Failure::Permanent,
        }
    }
}

impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError::Idem(e)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    key: String,
    cents: u64,
}

/// Times each body ran, by customer (tests run in parallel, each with customers of its own).
static RUNS: Mutex<Option<HashMap<String, u32>>> = Mutex::new(None);

fn ran(customer: &str) {
    *RUNS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .entry(customer.to_owned())
        .or_default() += 1;
}

fn runs(customer: &str) -> u32 {
    RUNS.lock()
        .unwrap()
        .as_ref()
        .and_then(|m| m.get(customer).copied())
        .unwrap_or(0)
}

/// Charges a customer once per purpose and period.
#[side_effect(key = "customer_id, purpose, period", json)]
async fn charge(
    key: &IdempotencyKey,
    customer_id: &str,
    purpose: &str,
    period: &str,
    amount_cents: u64,
) -> Result<Receipt, PayError> {
    ran(customer_id);
    if customer_id == "cus_declined" {
        return Err(PayError::Declined("insufficient funds".into()));
    }
    let _ = (purpose, period);
    Ok(Receipt {
        key: key.to_string(),
        cents: amount_cents,
    })
}

/// Reads a customer's balance in cents.
#[read_only(json)]
async fn balance(customer_id: String, currency: Option<String>) -> Result<u64, PayError> {
    ran(&customer_id);
    let _ = currency;
    Ok(4200)
}

/// Not marked `json`: not listed, not callable from JSON.
#[side_effect(key = "order_id")]
async fn ship(order_id: &str) -> Result<(), PayError> {
    let _ = order_id;
    Ok(())
}

fn idem() -> Idem {
    Idem::new(MemoryStore::new())
}

#[tokio::test]
async fn a_json_call_derives_the_golden_key_and_the_rust_call_after_it_replays_its_record() {
    let tools = JsonTools::all();
    let idem = idem();
    let args = r#"{"customer_id": "cus_1", "purpose": "subscription", "period": "2026-11", "amount_cents": 4200}"#;
    let reply = idem
        .scope(tools.call("charge", args))
        .await
        .expect("a well-formed call runs");
    assert_eq!(reply.key().map(|k| k.to_string()).as_deref(), Some(GOLDEN));
    assert_eq!(reply.value, json!({"key": GOLDEN, "cents": 4200}));
    assert!(!reply.replayed());
    assert_eq!(runs("cus_1"), 1);

    // The same call from Rust shares the record: a replay, the body does not run again.
    let (receipt, info) = idem
        .scope(observe(charge("cus_1", "subscription", "2026-11", 4200)))
        .await;
    let info = info.expect("the call reports what happened");
    assert!(
        info.replayed,
        "the Rust call after the JSON call is a replay"
    );
    assert_eq!(info.key.unwrap().to_string(), GOLDEN);
    assert_eq!(
        receipt.unwrap(),
        Receipt {
            key: GOLDEN.into(),
            cents: 4200
        }
    );
    assert_eq!(runs("cus_1"), 1);
}

#[tokio::test]
async fn a_rust_call_then_the_same_call_from_json_is_a_replay_with_the_same_value() {
    let tools = JsonTools::all();
    let idem = idem();
    let first = idem
        .scope(charge("cus_rust_first", "subscription", "2026-12", 990))
        .await
        .unwrap();
    let args = json!({"customer_id": "cus_rust_first", "purpose": "subscription", "period": "2026-12", "amount_cents": 990});
    let reply = idem.scope(tools.call_value("charge", args)).await.unwrap();
    assert!(reply.replayed());
    assert_eq!(reply.value, serde_json::to_value(&first).unwrap());
    assert_eq!(reply.key().unwrap().to_string(), first.key);
    assert_eq!(runs("cus_rust_first"), 1);
}

/// Each malformed call: refused with the variant named, nothing run.
#[tokio::test]
async fn malformed_calls_are_refused_with_a_message_for_the_model_and_run_nothing() {
    let tools = JsonTools::all().max_arguments_len(256);
    let idem = idem();
    let c = "cus_bad_json";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "charge",
            json!({"customer_id": c, "purpose": "subscription", "amount_cents": 1}).to_string(),
            "missing field `period`",
        ),
        (
            "charge",
            json!({"customer_id": c, "purpose": "subscription", "period": "2026-11", "amount_cents": "4200"})
                .to_string(),
            "invalid type: string \"4200\", expected u64",
        ),
        (
            "charge",
            json!({"customer_id": c, "purpose": "subscription", "period": "2026-11", "amount_cents": -1})
                .to_string(),
            "invalid value: integer `-1`, expected u64",
        ),
        (
            "charge",
            json!({"customer_id": c, "purpose": "s", "period": "p", "amount_cents": 1, "currency": "eur"})
                .to_string(),
            "unknown field `currency`",
        ),
        (
            "charge",
            json!({"customer_id": c, "purpose": "s", "period": "p", "amount_cents": 1, "key": GOLDEN})
                .to_string(),
            "unknown field `key`",
        ),
        ("charge", format!("[\"{c}\", \"s\", \"p\", 1]"), "must be a JSON object"),
        ("charge", format!("{{\"customer_id\": \"{c}\""), "EOF while parsing"),
        ("charge", "\"cus_bad_json\"".to_owned(), "must be a JSON object"),
        ("balance", json!({"currency": "eur"}).to_string(), "missing field `customer_id`"),
    ];
    for (tool, args, says) in cases {
        let err = idem.scope(tools.call(tool, &args)).await.unwrap_err();
        assert!(
            matches!(err, JsonCallError::InvalidArguments { .. }),
            "{args}: {err:?}"
        );
        assert!(!err.called());
        let text = err.to_string();
        assert!(text.contains(says), "{args}: {text}");
        assert!(text.contains("the tool was not run"), "{text}");
    }

    let long =
        json!({"customer_id": c, "purpose": "x".repeat(300), "period": "p", "amount_cents": 1});
    let err = idem
        .scope(tools.call("charge", &long.to_string()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, JsonCallError::ArgumentsTooLarge { limit: 256, .. }),
        "{err:?}"
    );
    let err = idem
        .scope(tools.call_value("charge", long))
        .await
        .unwrap_err();
    assert!(
        matches!(err, JsonCallError::ArgumentsTooLarge { limit: 256, .. }),
        "{err:?}"
    );

    for name in ["refund", "ship", "Charge"] {
        let err = idem
            .scope(tools.call(name, &json!({"customer_id": c}).to_string()))
            .await
            .unwrap_err();
        let JsonCallError::UnknownTool { known, .. } = &err else {
            panic!("{name}: {err:?}")
        };
        assert!(known.contains(&"charge") && !known.contains(&"ship"));
        assert!(err.to_string().contains("nothing was run"));
    }
    assert_eq!(runs(c), 0, "no malformed call ran a body");
}

#[tokio::test]
async fn a_tool_error_and_a_key_reused_with_other_arguments_come_back_as_failed_calls() {
    let tools = JsonTools::all();
    let idem = idem();
    let declined =
        json!({"customer_id": "cus_declined", "purpose": "s", "period": "p", "amount_cents": 1});
    let err = idem
        .scope(tools.call_value("charge", declined))
        .await
        .unwrap_err();
    assert!(err.called());
    assert_eq!(
        err.to_string(),
        "`charge` failed: card declined: insufficient funds\n\
         The tool failed, and calling again with the same arguments will not help."
    );
    assert_eq!(runs("cus_declined"), 1);

    let c = "cus_reuse";
    let args = |cents: u64| json!({"customer_id": c, "purpose": "s", "period": "p", "amount_cents": cents});
    idem.scope(tools.call_value("charge", args(100)))
        .await
        .unwrap();
    let err = idem
        .scope(tools.call_value("charge", args(999)))
        .await
        .unwrap_err();
    let JsonCallError::Failed {
        info,
        message,
        explanation,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(message.contains("different arguments"), "{message}");
    assert_eq!(
        (explanation.reason, explanation.retryable),
        ("key_reuse", false)
    );
    assert!(
        explanation.text.contains("customer_id, purpose, period"),
        "{explanation:?}"
    );
    assert!(!info.as_ref().unwrap().replayed);
    assert_eq!(runs(c), 1, "a key reused with other arguments does not run");
}

#[tokio::test]
async fn read_only_tools_are_called_from_json_too_and_optional_parameters_may_be_left_out() {
    let tools = JsonTools::only(["balance"]).unwrap();
    assert_eq!(tools.names().collect::<Vec<_>>(), ["balance"]);
    let reply = tools
        .call("balance", r#"{"customer_id": "cus_balance"}"#)
        .await
        .unwrap();
    assert_eq!(reply.value, json!(4200));
    assert!(!reply.replayed() && reply.key().is_none());
    assert_eq!(runs("cus_balance"), 1);
    assert!(matches!(
        JsonTools::only(["balance", "ship"]),
        Err(JsonCallError::UnknownTool { .. })
    ));
}

/// Every registered tool's schema is a JSON Schema object of its parameters, in the chat APIs'
/// `{"type": "function", "function": {...}}` shape; the injected key is no parameter.
#[test]
fn every_json_tool_has_an_object_schema_of_its_parameters_in_the_chat_shape() {
    let tools = JsonTools::all();
    let chat = tools.chat_tools();
    let chat = chat.as_array().unwrap();
    assert_eq!(chat.len(), tools.definitions().len());
    assert!(!chat.is_empty());
    for tool in chat {
        assert_eq!(tool["type"], "function");
        let function = &tool["function"];
        let name = function["name"].as_str().unwrap();
        assert!(
            !function["description"].as_str().unwrap().is_empty(),
            "{name}"
        );
        let parameters = function["parameters"].as_object().unwrap();
        assert_eq!(parameters["type"], "object", "{name}");
        assert_eq!(parameters["additionalProperties"], false, "{name}");
        assert!(!parameters.contains_key("$schema") && !parameters.contains_key("title"));
        let properties = parameters["properties"].as_object().unwrap();
        let required: Vec<&str> = parameters["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        assert!(
            required.iter().all(|r| properties.contains_key(*r)),
            "{name}"
        );
        assert!(
            !properties.contains_key("key"),
            "{name}: the injected key is no argument"
        );
        // Round trip: the schema is JSON a client can send as is.
        let text = serde_json::to_string(&tool).unwrap();
        assert_eq!(&serde_json::from_str::<Value>(&text).unwrap(), tool);
    }

    let defs = tools.definitions();
    let charge = defs.iter().find(|d| d.name == "charge").unwrap();
    assert_eq!(charge.kind, ToolKind::SideEffect);
    assert_eq!(
        charge.description,
        "Charges a customer once per purpose and period."
    );
    assert_eq!(
        charge.parameters["required"],
        json!(["customer_id", "purpose", "period", "amount_cents"])
    );
    assert_eq!(
        charge.parameters["properties"]["customer_id"]["type"],
        "string"
    );
    assert_eq!(
        charge.parameters["properties"]["amount_cents"]["type"],
        "integer"
    );
    let balance = defs.iter().find(|d| d.name == "balance").unwrap();
    assert_eq!(balance.kind, ToolKind::ReadOnly);
    assert_eq!(balance.parameters["required"], json!(["customer_id"]));
    assert!(defs.iter().all(|d| d.name != "ship"));
}

#[tokio::test]
async fn the_tool_not_marked_json_still_runs_from_rust() {
    idem().scope(ship("order_1")).await.unwrap();
}

/// Times `reimburse`'s body ran, by order.
static REIMBURSE_RUNS: Mutex<Option<HashMap<String, u32>>> = Mutex::new(None);

/// Reimburses an order; the provider times out on the first attempt, then declines.
#[side_effect(key = "order_id", json)]
async fn reimburse(order_id: &str) -> Result<u64, PayError> {
    let mut runs = REIMBURSE_RUNS.lock().unwrap();
    let run = runs
        .get_or_insert_with(HashMap::new)
        .entry(order_id.to_owned())
        .or_default();
    *run += 1;
    if *run == 1 {
        // Sent, no answer: it may have refunded.
        return Err(PayError::Timeout);
    }
    Err(PayError::Declined("already refunded?".into()))
}

/// An error that is only `Display`: idemkit's own error is not in any chain, so a JSON call is
/// explained by how it ended.
#[derive(Debug)]
struct Plain(String);

impl std::fmt::Display for Plain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Classify for Plain {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<idemkit::Error> for Plain {
    fn from(e: idemkit::Error) -> Self {
        Plain(e.to_string())
    }
}

/// Quotes a price in an amount JSON cannot hold (NaN): it runs, and its outcome cannot be
/// replayed.
#[side_effect(key = "item", json)]
async fn quote(item: &str) -> Result<f64, Plain> {
    let _ = item;
    Ok(f64::NAN)
}

/// Waits on a provider that never answers.
#[side_effect(key = "job", json, lease = "1s")]
async fn hold(job: &str) -> Result<u64, Plain> {
    let _ = job;
    tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    Ok(0)
}

/// `err`, a failed call: its explanation says the outcome is unknown, never "not run", names
/// the key and what settles it; the text the model reads says so first.
fn assert_outcome_unknown(err: &JsonCallError, reason: &str, key: &IdempotencyKey) {
    let JsonCallError::Failed { explanation, .. } = err else {
        panic!("{err:?}")
    };
    assert_eq!((explanation.reason, explanation.retryable), (reason, false));
    let text = err.to_string();
    assert!(!text.contains("Not run"), "{text}");
    assert!(
        explanation.text.starts_with("Outcome unknown") && text.contains(&explanation.text),
        "{text}"
    );
    assert!(
        text.contains("will not do it twice")
            && text.contains(&format!("idemkit resolve {key} applied --outcome JSON"))
            && text.contains(&format!("idemkit resolve {key} not-applied")),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn issue30_5_s20_a_json_call_that_may_have_reimbursed_is_told_ambiguous_not_refused() {
    let err = idem()
        .scope(JsonTools::all().call("reimburse", r#"{"order_id": "ord_1"}"#))
        .await
        .unwrap_err();
    let key = IdempotencyKey::derive("reimburse", &[("order_id", &"ord_1")]);
    assert_outcome_unknown(&err, "ambiguous", &key);
    assert_eq!(err.to_string().matches("Outcome unknown").count(), 1);
}

#[tokio::test(start_paused = true)]
async fn issue30_5_a_json_call_that_lost_its_lease_is_told_so_even_when_the_error_is_only_display()
{
    let store = idem_runtime::testing::Intercept::new(MemoryStore::new(), |step, _| {
        (step == idem_runtime::testing::Step::Renew)
            .then(|| idemkit::StoreError::unavailable("connection refused"))
    });
    let err = Idem::new(store)
        .scope(JsonTools::all().call("hold", r#"{"job": "job_1"}"#))
        .await
        .unwrap_err();
    let key = IdempotencyKey::derive("hold", &[("job", &"job_1")]);
    assert_outcome_unknown(&err, "lease_lost", &key);
}

#[tokio::test]
async fn issue30_5_a_json_call_whose_outcome_cannot_be_replayed_is_told_it_was_done() {
    let tools = JsonTools::all();
    let idem = idem();
    let first = idem
        .scope(tools.call("quote", r#"{"item": "sku_1"}"#))
        .await
        .unwrap();
    assert_eq!(first.value, Value::Null, "NaN is no JSON number");
    let err = idem
        .scope(tools.call("quote", r#"{"item": "sku_1"}"#))
        .await
        .unwrap_err();
    let JsonCallError::Failed { explanation, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (explanation.reason, explanation.retryable),
        ("unreplayable", false)
    );
    let text = err.to_string();
    assert!(
        text.contains("Already done") && !text.contains("Not run"),
        "{text}"
    );
}

static CONVERTED: Mutex<u32> = Mutex::new(0);

/// Converts an amount at a rate: the rate's every digit counts.
#[side_effect(key = "order_id", json)]
async fn convert(order_id: &str, rate: f64) -> Result<f64, Plain> {
    let _ = order_id;
    *CONVERTED.lock().unwrap() += 1;
    Ok(rate)
}

/// Issue 52 finding 7: serde_json reads a number a double does not hold (an integer beyond 64
/// bits, a decimal of more digits than a double keeps) as the double nearest it, so two calls
/// that differ in it were one operation, and the second was answered with the first's result.
/// Such a number is refused from the text, before anything runs; one a double holds runs.
#[tokio::test]
async fn issue52_a_number_that_a_double_would_round_is_refused_never_rounded() {
    let tools = JsonTools::all();
    let idem = idem();
    let call = |args: &'static str| idem.scope(tools.call("convert", args));
    let first = call(r#"{"order_id": "o52", "rate": 0.1}"#).await.unwrap();
    assert_eq!(first.value, json!(0.1));
    for args in [
        r#"{"order_id": "o52", "rate": 0.10000000000000000001}"#,
        r#"{"order_id": "o52", "rate": 18446744073709551617}"#,
        r#"{"rate": 1e-400, "order_id": "o52"}"#,
    ] {
        let err = call(args).await.unwrap_err();
        assert!(
            matches!(err, JsonCallError::InvalidArguments { .. }),
            "{args}: {err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("pass it as a string"), "{args}: {text}");
        assert!(!err.called(), "{args}");
    }
    // Of the charge's u64, too (where serde_json said only "floating point").
    let err = idem
        .scope(tools.call(
            "charge",
            r#"{"customer_id": "cus_52", "purpose": "p", "period": "p", "amount_cents": 18446744073709551617}"#,
        ))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("18446744073709551617 would be read as"),
        "{err}"
    );
    // Spellings of a number a double holds are that number: the same call, replayed.
    let again = call(r#"{"order_id": "o52", "rate": 1.0e-1}"#)
        .await
        .unwrap();
    assert_eq!(again.value, json!(0.1));
    assert!(again.replayed());
    assert_eq!(*CONVERTED.lock().unwrap(), 1);
}
