//! The rig example's agent loop against the scripted model (issue 17 part 2): the model calls
//! `charge` twice with the same arguments after a lost response; the provider counts one charge
//! with the `#[side_effect(rig)]` tool and two with the same tool without it. Also what rig's
//! envelope carries: a failure classified, a replay marked with its key.

#[path = "../examples/rig/mod.rs"]
mod rig;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fake_provider::{FakeProvider, Fault};
use idemkit::rig::{ToolExecutionError, ToolOutput};
use idemkit::{Classify, Failure, Idem, IdempotencyKey, MemoryStore, read_only, side_effect};
use rig_core::tool::{PortableTool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const GOLDEN_KEY: &str = "32e00e40-1a53-8058-93c7-e9d1adc8ecaa";

#[tokio::test]
async fn a_model_calling_charge_again_after_a_lost_response_charges_once_with_idemkit_twice_without()
 {
    let naive = rig::run(false).await.unwrap();
    let with = rig::run(true).await.unwrap();
    println!(
        "charges without idemkit: {}, with: {}",
        naive.charges, with.charges
    );
    assert_eq!(naive.charges, 2, "the model's second call charges again");
    assert_eq!(
        with.charges, 1,
        "the second call reuses the first call's key"
    );

    for run in [&naive, &with] {
        assert_eq!(run.answer, "The subscription for 2026-11 is paid.");
        assert_eq!(run.requests.len(), 3, "rig's loop fed each result back");
        let ids: Vec<&str> = run
            .tool_messages
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(
            ids,
            ["call_k3Xq", "call_p8Zw"],
            "one tool message per tool call id"
        );
        // The model's two calls had the same arguments, under two call ids.
        let calls: Vec<&Value> = run.requests[2]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .flat_map(|m| m["tool_calls"].as_array().unwrap())
            .collect();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["function"]["name"], "charge");
        let args = |c: &Value| -> Value {
            serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap()
        };
        assert_eq!(args(calls[0]), args(calls[1]));
        assert_eq!(args(calls[0])["customer_id"], "cus_1");
        // The tool the model saw was declared by rig from the impl.
        let tools = &run.requests[0]["tools"];
        assert_eq!(tools[0]["function"]["name"], "charge");
    }

    // With idemkit the model was told the first call may have happened and a repeat is safe…
    let (_, first) = &with.tool_messages[0];
    assert!(
        first.contains("may or may not have taken effect"),
        "{first}"
    );
    assert!(first.contains("\"reason\":\"failed_ambiguous\""), "{first}");
    assert!(first.contains(GOLDEN_KEY), "{first}");
    // …and the second call ran under the same key (the contract's golden key), which the
    // provider had seen: it replayed its stored charge, and the model sees that with the key.
    let second: Value = serde_json::from_str(&with.tool_messages[1].1).unwrap();
    assert_eq!(second["idempotencyKey"], GOLDEN_KEY);
    assert_eq!(second["result"]["key"], GOLDEN_KEY);
    assert_eq!(second["result"]["provider_replayed"], true);
    assert_eq!(
        second["replayed"], false,
        "the body ran again, with the key"
    );

    // Without idemkit the second call made a new charge.
    let naive_second: Value = serde_json::from_str(&naive.tool_messages[1].1).unwrap();
    assert!(naive_second["key"].is_null());
    assert_eq!(naive_second["provider_replayed"], false);
}

fn args() -> rig::ChargeArgs {
    rig::ChargeArgs {
        customer_id: "cus_1".into(),
        purpose: "subscription".into(),
        period: "2026-11".into(),
        amount_cents: 4200,
    }
}

#[tokio::test]
async fn a_repeat_after_completion_is_replayed_from_the_record_and_says_so_with_its_key() {
    let provider = FakeProvider::start().await.unwrap();
    let charge = rig::Charge {
        provider: fake_provider::Client::new(provider.base_url(), Duration::from_secs(10)),
        idem: Idem::new(MemoryStore::new()),
    };
    let first = charge.call(args()).await.unwrap();
    assert_eq!(
        first.as_json().unwrap()["replayed"],
        false,
        "{}",
        first.render()
    );
    let again = charge.call(args()).await.unwrap();
    assert_eq!(provider.count("charges"), 1);
    let blocks = again.as_content();
    assert_eq!(blocks.len(), 2, "a note, then the result");
    let note = blocks[0].as_text().unwrap();
    assert!(
        note.starts_with("Replayed:") && note.contains(GOLDEN_KEY),
        "{note}"
    );
    let value = blocks[1].as_json().unwrap();
    assert_eq!(value["replayed"], true);
    assert_eq!(value["idempotencyKey"], GOLDEN_KEY);
    assert_eq!(value["result"], first.as_json().unwrap()["result"]);

    // The same key with another amount is refused before anything runs: not retryable.
    let other = rig::ChargeArgs {
        amount_cents: 9900,
        ..args()
    };
    let refused = charge.call(other).await.unwrap_err();
    assert_eq!(provider.count("charges"), 1);
    assert_eq!(refused.code(), Some("key_reuse"));
    assert_eq!(refused.retryable(), Some(false));
    assert_eq!(refused.kind(), rig_core::tool::ToolErrorKind::InvalidArgs);
}

#[tokio::test]
async fn a_lost_response_reaches_rig_as_a_retryable_failure_that_keeps_its_source() {
    let provider = FakeProvider::start().await.unwrap();
    provider.inject([Fault::DropAfterCommit]);
    let charge = rig::Charge {
        provider: fake_provider::Client::new(provider.base_url(), Duration::from_millis(300)),
        idem: Idem::new(MemoryStore::new()),
    };
    let error = charge.call(args()).await.unwrap_err();
    assert_eq!(error.code(), Some("failed_ambiguous"));
    assert_eq!(error.retryable(), Some(true));
    assert!(matches!(
        error.downcast_ref::<rig::PayError>(),
        Some(rig::PayError::Provider(
            fake_provider::ProviderError::Timeout
        ))
    ));
    let feedback = error.model_output().render();
    assert!(feedback.contains("is safe"), "{feedback}");
    assert!(
        error.model_output().as_content()[1].as_json().unwrap()
            == &json!({"error": "the provider did not answer in time", "reason": "failed_ambiguous", "idempotencyKey": GOLDEN_KEY,
                // S35: the advice beside it: the outcome unknown, the same key safe, a new key not.
                "advice": {"state": "unknown", "reason": "failed_ambiguous", "sameKeySafe": true, "newKeySafe": false,
                           "retryable": true, "retryAfterSeconds": null, "key": GOLDEN_KEY}})
    );
}

/// Why `balance` failed.
#[derive(Debug)]
enum LedgerError {
    /// The ledger was briefly unreachable: a read may simply be tried again.
    Unavailable,
    /// No such customer: asking again will not help.
    UnknownCustomer,
    /// The ledger did not answer in time: for a read, asking again is safe all the same.
    Timeout,
    Idem(idemkit::Error),
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerError::Unavailable => f.write_str("the ledger is unavailable"),
            LedgerError::UnknownCustomer => f.write_str("no such customer"),
            LedgerError::Timeout => f.write_str("the ledger did not answer in time"),
            LedgerError::Idem(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LedgerError {}

impl From<idemkit::Error> for LedgerError {
    fn from(e: idemkit::Error) -> Self {
        LedgerError::Idem(e)
    }
}

impl Classify for LedgerError {
    fn classify(&self) -> Failure {
        match self {
            LedgerError::Unavailable => Failure::Transient,
            LedgerError::Timeout => Failure::Ambiguous,
            LedgerError::UnknownCustomer | LedgerError::Idem(_) => Failure::Permanent,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct BalanceArgs {
    customer_id: String,
}

/// A read-only rig tool: the ledger is unavailable for its first `outages` reads.
struct Balance {
    outages: AtomicU32,
    reads: AtomicU32,
}

impl Balance {
    fn new(outages: u32) -> Self {
        Balance {
            outages: AtomicU32::new(outages),
            reads: AtomicU32::new(0),
        }
    }
}

impl PortableTool for Balance {
    const NAME: &'static str = "balance";
    type Args = BalanceArgs;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "A customer's balance in cents.".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"customer_id": {"type": "string"}}})
    }

    #[read_only(rig, max_attempts = 3)]
    async fn call(&self, args: BalanceArgs) -> Result<u64, LedgerError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        match args.customer_id.as_str() {
            "cus_1" => {}
            "cus_slow" => return Err(LedgerError::Timeout),
            _ => return Err(LedgerError::UnknownCustomer),
        }
        let down = self
            .outages
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if down {
            return Err(LedgerError::Unavailable);
        }
        Ok(4200)
    }
}

fn balance_of(customer_id: &str) -> BalanceArgs {
    BalanceArgs {
        customer_id: customer_id.into(),
    }
}

// Paused time: the backoff between attempts elapses at once, so nothing here depends on the clock.
#[tokio::test(start_paused = true)]
async fn a_read_only_rig_tool_is_retried_through_a_transient_failure_and_reaches_rig_without_a_key()
{
    let balance = Balance::new(2);
    // Through rig's own `Tool` (its context is not handed to the body).
    let mut context = ToolContext::new();
    let output = rig_core::tool::Tool::call(&balance, &mut context, balance_of("cus_1"))
        .await
        .unwrap();
    assert_eq!(
        balance.reads.load(Ordering::SeqCst),
        3,
        "two transient failures, then the read"
    );
    assert_eq!(
        output.as_json(),
        // S35: beside the result, the advice a read gets.
        Some(
            &json!({"result": 4200, "advice": {"state": "ran", "reason": null, "sameKeySafe": true, "newKeySafe": true, "retryable": false, "retryAfterSeconds": null, "key": null}})
        ),
        "{}",
        output.render()
    );
    assert!(!output.render().contains("idempotencyKey"));
}

#[tokio::test(start_paused = true)]
async fn a_read_only_rig_tool_surfaces_a_permanent_failure_at_once_as_not_retryable() {
    let balance = Balance::new(0);
    let error = balance.call(balance_of("cus_404")).await.unwrap_err();
    assert_eq!(balance.reads.load(Ordering::SeqCst), 1, "not retried");
    assert_eq!(error.code(), Some("failed"));
    assert_eq!(error.retryable(), Some(false));
    assert_eq!(error.kind(), rig_core::tool::ToolErrorKind::Other);
    assert!(matches!(
        error.downcast_ref::<LedgerError>(),
        Some(LedgerError::UnknownCustomer)
    ));
    let feedback = &error.model_output().as_content()[1];
    assert_eq!(
        feedback.as_json(),
        // S35: a read's failure: it ran, and calling again is safe either way (it changes nothing).
        Some(
            &json!({"error": "no such customer", "reason": "failed", "idempotencyKey": null,
                     "advice": {"state": "ran", "reason": "failed", "sameKeySafe": true, "newKeySafe": true,
                                "retryable": false, "retryAfterSeconds": null, "key": null}})
        )
    );
}

#[tokio::test(start_paused = true)]
async fn a_read_only_rig_tool_out_of_attempts_is_retryable_and_promises_no_key() {
    for (customer, code) in [
        ("cus_1", "failed_transient"),
        ("cus_slow", "failed_ambiguous"),
    ] {
        let balance = Balance::new(5);
        let error = balance.call(balance_of(customer)).await.unwrap_err();
        assert_eq!(balance.reads.load(Ordering::SeqCst), 3, "max_attempts = 3");
        assert_eq!(error.code(), Some(code));
        assert_eq!(error.retryable(), Some(true));
        // A read has no key and changes nothing: the model is told so, not that a key protects it.
        let explanation = error.model_output().as_content()[0].as_text().unwrap();
        assert_eq!(
            explanation,
            "The tool failed after retries. It only reads, so calling again later with the same \
             arguments is safe."
        );
        let feedback = error.model_output().as_content()[1].as_json().unwrap();
        assert!(feedback["idempotencyKey"].is_null(), "{feedback}");
    }
}

/// Why `refund` failed.
#[derive(Debug)]
enum RefundError {
    /// Sent, no answer: the refund may have happened.
    Timeout,
    /// The provider said no: nothing happened.
    Declined,
    Idem(idemkit::Error),
}

impl std::fmt::Display for RefundError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefundError::Timeout => f.write_str("the provider did not answer in time"),
            RefundError::Declined => f.write_str("the refund was declined"),
            RefundError::Idem(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RefundError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RefundError::Idem(e) => Some(e),
            _ => None,
        }
    }
}

impl From<idemkit::Error> for RefundError {
    fn from(e: idemkit::Error) -> Self {
        RefundError::Idem(e)
    }
}

impl Classify for RefundError {
    fn classify(&self) -> Failure {
        match self {
            RefundError::Timeout => Failure::Ambiguous,
            RefundError::Declined | RefundError::Idem(_) => Failure::Permanent,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RefundArgs {
    order_id: String,
}

/// A refund whose provider behaves by order: `ord_lost` times out, then declines (the first
/// attempt may have refunded); `ord_nan` refunds and answers an amount JSON cannot hold;
/// `ord_stalled` never answers while the store refuses every renewal of the lease.
struct Refund {
    runs: AtomicU32,
    idem: Idem,
}

impl Refund {
    fn new() -> Self {
        // Every lease renewal fails, as when the holder cannot reach the store: a call that
        // outlives its lease loses it (S13).
        let store = idem_runtime::testing::Intercept::new(MemoryStore::new(), |step, _| {
            (step == idem_runtime::testing::Step::Renew)
                .then(|| idemkit::StoreError::unavailable("connection refused"))
        });
        Refund {
            runs: AtomicU32::new(0),
            idem: Idem::new(store),
        }
    }
}

impl PortableTool for Refund {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Refunds an order.".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"order_id": {"type": "string"}}})
    }

    #[side_effect(key = "args.order_id", rig, idem = self.idem, lease = "1s")]
    async fn call(&self, key: &IdempotencyKey, args: RefundArgs) -> Result<f64, RefundError> {
        let _ = key;
        let run = self.runs.fetch_add(1, Ordering::SeqCst);
        match args.order_id.as_str() {
            "ord_lost" if run == 0 => Err(RefundError::Timeout),
            "ord_lost" => Err(RefundError::Declined),
            "ord_nan" => Ok(f64::NAN),
            _ => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(0.0)
            }
        }
    }
}

fn refund_of(order_id: &str) -> RefundArgs {
    RefundArgs {
        order_id: order_id.into(),
    }
}

/// The sentence and feedback of `error`: never "not run", the key, and what settles it.
fn assert_outcome_unknown(error: &ToolExecutionError, code: &str, key: &IdempotencyKey) {
    assert_eq!(error.code(), Some(code));
    assert_eq!(
        error.retryable(),
        Some(false),
        "a repeat does not send it again"
    );
    let blocks = error.model_output().as_content();
    let sentence = blocks[0].as_text().unwrap();
    assert!(!sentence.contains("Not run"), "{sentence}");
    assert!(
        sentence.starts_with("Outcome unknown") && sentence.contains("may or may not"),
        "{sentence}"
    );
    assert!(sentence.contains("will not do it twice"), "{sentence}");
    assert!(
        sentence.contains(&format!("idemkit resolve {key} applied --outcome JSON"))
            && sentence.contains(&format!("idemkit resolve {key} not-applied"))
            && sentence.contains("`verify`"),
        "{sentence}"
    );
    let feedback = blocks[1].as_json().unwrap();
    assert_eq!(feedback["reason"], code);
    assert_eq!(feedback["idempotencyKey"], key.as_str());
}

#[tokio::test(start_paused = true)]
async fn issue30_5_s20_an_attempt_that_may_have_refunded_reaches_rig_as_ambiguous_not_refused() {
    let refund = Refund::new();
    let error = refund.call(refund_of("ord_lost")).await.unwrap_err();
    assert_eq!(
        refund.runs.load(Ordering::SeqCst),
        2,
        "timed out, then declined"
    );
    let key = IdempotencyKey::derive("refund", &[("order_id", &"ord_lost")]);
    assert_outcome_unknown(&error, "ambiguous", &key);
    assert!(matches!(
        error.downcast_ref::<RefundError>(),
        Some(RefundError::Idem(idemkit::Error::Ambiguous { .. }))
    ));
}

#[tokio::test(start_paused = true)]
async fn issue30_5_a_call_that_lost_its_lease_reaches_rig_as_lease_lost_not_refused() {
    let refund = Refund::new();
    let error = refund.call(refund_of("ord_stalled")).await.unwrap_err();
    assert_eq!(refund.runs.load(Ordering::SeqCst), 1);
    let key = IdempotencyKey::derive("refund", &[("order_id", &"ord_stalled")]);
    assert_outcome_unknown(&error, "lease_lost", &key);
}

#[tokio::test(start_paused = true)]
async fn issue30_5_an_outcome_that_cannot_be_replayed_reaches_rig_as_done_not_refused() {
    let refund = Refund::new();
    refund.call(refund_of("ord_nan")).await.unwrap();
    let error = refund.call(refund_of("ord_nan")).await.unwrap_err();
    assert_eq!(refund.runs.load(Ordering::SeqCst), 1, "not run again");
    assert_eq!(error.code(), Some("unreplayable"));
    assert_eq!(error.retryable(), Some(false));
    let sentence = error.model_output().as_content()[0]
        .as_text()
        .unwrap()
        .to_owned();
    assert!(
        sentence.starts_with("Already done") && !sentence.contains("Not run"),
        "{sentence}"
    );
}
