//! Issue 33 #9: a wrapped tool called inside the user's own retry loop multiplies attempts
//! (idemkit already retries it). It is detectable: a call of a key that is still in progress in
//! this process, or that just gave up retrying, is warned of through `tracing`.
//!
//! Issue 51 #3: so is a loop that makes a new key each turn (a key field filled with
//! `Uuid::new_v4()` by the caller), which nothing deduplicates.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemkit::{Classify, Failure, Idem, IdempotencyKey, MemoryStore, side_effect};
use uuid::Uuid;

/// Every event's message and level, as a test subscriber sees them (no formatting crate needed).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl Captured {
    /// The warnings about a retry loop (idemkit warns of each failed attempt too).
    fn warnings(&self) -> Vec<String> {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .filter(|(level, m)| *level == tracing::Level::WARN && m.contains("retry loop"))
            .map(|(_, message)| message.clone())
            .collect()
    }
}

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[derive(Debug)]
enum MailError {
    Unavailable,
    /// Try again in 50 ms: a wait with no jitter, so the test's timing is fixed.
    Busy,
    Idem(#[allow(dead_code)] idemkit::Error),
}

impl Classify for MailError {
    fn classify(&self) -> Failure {
        match self {
            MailError::Unavailable => Failure::Transient,
            MailError::Busy => Failure::RetryAfter(Duration::from_millis(50)),
            MailError::Idem(_) => Failure::Permanent,
        }
    }
}

impl From<idemkit::Error> for MailError {
    fn from(e: idemkit::Error) -> Self {
        MailError::Idem(e)
    }
}

static RUNS: AtomicU32 = AtomicU32::new(0);

/// Sends a receipt; the mail server is down.
#[side_effect(key = "order_id", max_attempts = 3)]
async fn send_receipt(order_id: &str) -> Result<(), MailError> {
    let _ = order_id;
    RUNS.fetch_add(1, Ordering::SeqCst);
    Err(MailError::Unavailable)
}

static SLOW_RUNS: AtomicU32 = AtomicU32::new(0);

/// Notifies a customer; the first attempt fails, the call then waits 50 ms before retrying.
#[side_effect(key = "customer_id", max_attempts = 2, in_flight_wait = "1ms")]
async fn notify(customer_id: &str) -> Result<u32, MailError> {
    let _ = customer_id;
    match SLOW_RUNS.fetch_add(1, Ordering::SeqCst) {
        0 => Err(MailError::Busy),
        n => Ok(n),
    }
}

#[test]
fn issue33_9_a_retry_loop_around_a_tool_is_warned_of_and_a_single_call_is_not() {
    let captured = Captured::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    tracing::subscriber::with_default(captured.clone(), || {
        runtime.block_on(Idem::new(MemoryStore::new()).scope(async {
            // One call: idemkit's own retries, no warning.
            assert!(send_receipt("ord_1").await.is_err());
            assert_eq!(RUNS.load(Ordering::SeqCst), 3);
            assert!(captured.warnings().is_empty(), "{:?}", captured.warnings());

            // The user's loop around it: each of its turns runs the tool's attempts again.
            for _ in 0..2 {
                let _ = send_receipt("ord_2").await;
            }
            assert_eq!(
                RUNS.load(Ordering::SeqCst),
                9,
                "3 attempts per turn of the loop"
            );
            let warnings = captured.warnings();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(
                warnings[0].contains("send_receipt")
                    && warnings[0].contains("gave up after 3 attempt(s)")
                    && warnings[0].contains("retry loop"),
                "{}",
                warnings[0]
            );

            // Called again while the first call is still between its attempts (a loop with a
            // timeout around the call, say): warned of too.
            let first = notify("cus_1");
            let second = async {
                tokio::time::sleep(Duration::from_millis(1)).await;
                notify("cus_1").await
            };
            let (a, _) = tokio::join!(first, second);
            assert!(a.is_ok());
            let warnings = captured.warnings();
            assert_eq!(warnings.len(), 2, "{warnings:?}");
            assert!(
                warnings[1].contains("notify") && warnings[1].contains("still in progress"),
                "{}",
                warnings[1]
            );
        }));
    });
}

static SHARED_RUNS: AtomicU32 = AtomicU32::new(0);

/// Books a slot; takes a while and does not fail.
#[side_effect(key = "slot", in_flight_wait = "1s")]
async fn book(slot: &str) -> Result<u32, MailError> {
    let _ = slot;
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(SHARED_RUNS.fetch_add(1, Ordering::SeqCst))
}

/// Callers of one key at the same time that do not fail (several agents, a fan-out) are what the
/// claim is for: the body runs once and nobody is warned of a retry loop.
#[test]
fn issue33_9_concurrent_callers_of_one_key_without_failures_are_not_warned_of() {
    let captured = Captured::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    tracing::subscriber::with_default(captured.clone(), || {
        runtime.block_on(Idem::new(MemoryStore::new()).scope(async {
            let (a, b, c) = tokio::join!(book("slot_1"), book("slot_1"), book("slot_1"));
            assert_eq!((a.unwrap(), b.unwrap(), c.unwrap()), (0, 0, 0));
            assert_eq!(SHARED_RUNS.load(Ordering::SeqCst), 1, "the body ran once");
            assert!(captured.warnings().is_empty(), "{:?}", captured.warnings());
        }));
    });
}

/// Issue 39 #9: with no `tracing` subscriber in effect, the first retry-loop warning goes to
/// stderr too, once per process, saying how to see the rest. Run in a process of its own (the
/// child below), since whether a subscriber is set is per process.
#[test]
fn issue39_9_without_a_subscriber_the_first_retry_loop_warning_goes_to_stderr_once() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "no_subscriber_child",
            "--exact",
            "--include-ignored",
            "--nocapture",
        ])
        .env("IDEMKIT_RETRY_LOOP_CHILD", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("idemkit: warning: ").count(),
        1,
        "one warning for the two repeats: {stderr}"
    );
    assert!(
        stderr.contains("gave up after 3 attempt(s)")
            && stderr.contains("no `tracing` subscriber is set"),
        "{stderr}"
    );
}

/// Issue 51 #3: so is the first warning of a loop that makes a new key each turn.
#[test]
fn issue51_3_without_a_subscriber_the_fresh_key_warning_goes_to_stderr_once() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "fresh_key_child",
            "--exact",
            "--include-ignored",
            "--nocapture",
        ])
        .env("IDEMKIT_FRESH_KEY_CHILD", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("idemkit: warning: ").count(), 1, "{stderr}");
    assert!(
        stderr.contains("was called with a new key")
            && stderr.contains("`request_id`")
            && stderr.contains("no `tracing` subscriber is set"),
        "{stderr}"
    );
}

/// Not a test: the child of the test above (three calls of a failing tool, each with a new key,
/// no subscriber).
#[test]
#[ignore = "a child process of issue51_3_without_a_subscriber_…; it runs it"]
fn fresh_key_child() {
    if std::env::var_os("IDEMKIT_FRESH_KEY_CHILD").is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(Idem::new(MemoryStore::new()).scope(async {
        for _ in 0..3 {
            assert!(
                send_sms(Uuid::new_v4(), "+15550199", "Child")
                    .await
                    .is_err()
            );
        }
    }));
}

/// Not a test: the child of issue39_9_… (a loop of three turns around a failing tool, no
/// subscriber).
#[test]
#[ignore = "a child process of issue39_9_…; it runs it"]
fn no_subscriber_child() {
    if std::env::var_os("IDEMKIT_RETRY_LOOP_CHILD").is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(Idem::new(MemoryStore::new()).scope(async {
        for _ in 0..3 {
            assert!(send_receipt("ord_child").await.is_err());
        }
    }));
}

/// Issue 51 #3: the warnings about a retry loop that makes a new key each turn.
fn fresh_key_warnings(captured: &Captured) -> Vec<String> {
    captured
        .warnings()
        .into_iter()
        .filter(|m| m.contains("was called with a new key"))
        .collect()
}

#[derive(Debug)]
enum ChargeError {
    /// No answer came: the charge may have happened.
    Timeout,
    /// Refused before anything happened.
    Unavailable,
    Idem(#[allow(dead_code)] idemkit::Error),
}

impl Classify for ChargeError {
    fn classify(&self) -> Failure {
        match self {
            ChargeError::Timeout => Failure::Ambiguous,
            ChargeError::Unavailable => Failure::Transient,
            ChargeError::Idem(_) => Failure::Permanent,
        }
    }
}

impl From<idemkit::Error> for ChargeError {
    fn from(e: idemkit::Error) -> Self {
        ChargeError::Idem(e)
    }
}

static CHARGE_RUNS: AtomicU32 = AtomicU32::new(0);

/// Charges a card; the answer is lost every time. It takes its key, so idemkit re-sends it under
/// that key (S20): 4 attempts per call.
#[side_effect(key = "request_id", max_attempts = 4)]
async fn charge_card(
    key: &IdempotencyKey,
    request_id: Uuid,
    customer_id: &str,
    cents: u64,
) -> Result<u32, ChargeError> {
    let _ = (key, request_id, customer_id, cents);
    CHARGE_RUNS.fetch_add(1, Ordering::SeqCst);
    Err(ChargeError::Timeout)
}

static SMS_RUNS: AtomicU32 = AtomicU32::new(0);

/// Sends an SMS; the gateway is down (nothing sent): 3 attempts per call.
#[side_effect(key = "request_id", max_attempts = 3)]
async fn send_sms(request_id: Uuid, to: &str, text: &str) -> Result<(), ChargeError> {
    let _ = (request_id, to, text);
    SMS_RUNS.fetch_add(1, Ordering::SeqCst);
    Err(ChargeError::Unavailable)
}

static REFUND_RUNS: AtomicU32 = AtomicU32::new(0);

/// Refunds part of a charge; the answer is lost every time.
#[side_effect(key = "request_id", max_attempts = 2)]
async fn refund(
    key: &IdempotencyKey,
    request_id: Uuid,
    charge_id: &str,
    cents: u64,
) -> Result<(), ChargeError> {
    let _ = (key, request_id, charge_id, cents);
    REFUND_RUNS.fetch_add(1, Ordering::SeqCst);
    Err(ChargeError::Timeout)
}

/// A recorder that counts `idemkit_fresh_key_retries_total` for one tool.
#[cfg(feature = "metrics")]
struct FreshKeyRetries(&'static str, Arc<std::sync::atomic::AtomicU64>);

#[cfg(feature = "metrics")]
impl metrics::Recorder for FreshKeyRetries {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let tool = key
            .labels()
            .any(|l| l.key() == "tool" && l.value() == self.0);
        if key.name() == "idemkit_fresh_key_retries_total" && tool {
            metrics::Counter::from_arc(self.1.clone())
        } else {
            metrics::Counter::noop()
        }
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// Runs `f` on a paused runtime under `captured`, with the counter of fresh-key retries of `tool`
/// in force (feature `metrics`); answers what it counted (0 without the feature).
fn with_capture(captured: &Captured, tool: &'static str, f: impl Future<Output = ()>) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let run = || {
        tracing::subscriber::with_default(captured.clone(), || {
            runtime.block_on(Idem::new(MemoryStore::new()).scope(f))
        })
    };
    #[cfg(feature = "metrics")]
    {
        let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let recorder = FreshKeyRetries(tool, counted.clone());
        metrics::with_local_recorder(&recorder, run);
        counted.load(Ordering::SeqCst)
    }
    #[cfg(not(feature = "metrics"))]
    {
        let _ = tool;
        run();
        0
    }
}

/// Issue 51 #3: the README's opening mistake made by the caller. A loop around the tool that
/// fills its key field with `Uuid::new_v4()` each turn: 3 keys, 12 body runs (each call re-sends
/// its own lost answer 4 times), and said once, naming the tool, its key field and the fix; each
/// fresh-key retry counted.
#[test]
fn issue51_3_a_key_minted_in_the_callers_retry_loop_is_warned_of_once_and_counted() {
    let captured = Captured::default();
    let counted = with_capture(&captured, "charge_card", async {
        for _ in 0..3 {
            if charge_card(Uuid::new_v4(), "cus_1", 4200).await.is_ok() {
                break;
            }
        }
        assert_eq!(
            CHARGE_RUNS.load(Ordering::SeqCst),
            12,
            "3 keys, 4 attempts each"
        );
    });
    let warnings = fresh_key_warnings(&captured);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    for said in [
        "`charge_card`",
        "`request_id`",
        "Uuid::new_v4()",
        "idem.operation(\"plan/step\").await?",
    ] {
        assert!(warnings[0].contains(said), "{said} in {}", warnings[0]);
    }
    if cfg!(feature = "metrics") {
        assert_eq!(counted, 2, "the second and the third key");
    }
}

/// Issue 51 #3: a loop with a stable key is the right way to retry (warned of as a loop around
/// the tool, not as a fresh key); the same loop with a key made each turn (the gateway down:
/// `Transient`) is warned of.
#[test]
fn issue51_3_a_stable_key_is_not_taken_for_a_fresh_one() {
    let captured = Captured::default();
    let counted = with_capture(&captured, "send_sms", async {
        let request_id = Uuid::new_v4();
        for _ in 0..3 {
            let _ = send_sms(request_id, "+15550100", "Shipped!").await;
        }
        assert_eq!(SMS_RUNS.load(Ordering::SeqCst), 9);
        assert!(
            fresh_key_warnings(&captured).is_empty(),
            "{:?}",
            captured.warnings()
        );
        for _ in 0..2 {
            let _ = send_sms(Uuid::new_v4(), "+15550100", "Shipped!").await;
        }
    });
    let warnings = fresh_key_warnings(&captured);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("`send_sms`"), "{}", warnings[0]);
    if cfg!(feature = "metrics") {
        assert_eq!(
            counted, 2,
            "the first fresh key after the stable one, and the second"
        );
    }
}

/// Issue 51 #3: new keys for calls with other arguments are other operations.
#[test]
fn issue51_3_new_keys_with_other_arguments_are_not_warned_of() {
    let captured = Captured::default();
    let counted = with_capture(&captured, "refund", async {
        for cents in [100, 200, 300] {
            let _ = refund(Uuid::new_v4(), "ch_1", cents).await;
        }
        assert_eq!(REFUND_RUNS.load(Ordering::SeqCst), 6);
    });
    assert!(
        fresh_key_warnings(&captured).is_empty(),
        "{:?}",
        captured.warnings()
    );
    assert_eq!(counted, 0);
}

static HANG_RUNS: AtomicU32 = AtomicU32::new(0);

/// Books a table; the provider never answers.
#[side_effect(key = "request_id")]
async fn book_table(key: &IdempotencyKey, request_id: Uuid, seats: u32) -> Result<(), ChargeError> {
    let _ = (key, request_id, seats);
    HANG_RUNS.fetch_add(1, Ordering::SeqCst);
    std::future::pending().await
}

/// Issue 51 #3: a caller's time-out around the call, then a new key: the call cut off counts as
/// one that ended without succeeding.
#[test]
fn issue51_3_a_fresh_key_after_a_call_cut_off_by_a_timeout_is_warned_of() {
    let captured = Captured::default();
    let counted = with_capture(&captured, "book_table", async {
        for _ in 0..2 {
            let call = book_table(Uuid::new_v4(), 4);
            assert!(
                tokio::time::timeout(Duration::from_secs(5), call)
                    .await
                    .is_err()
            );
        }
        assert_eq!(HANG_RUNS.load(Ordering::SeqCst), 2);
    });
    let warnings = fresh_key_warnings(&captured);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("`book_table`"), "{}", warnings[0]);
    if cfg!(feature = "metrics") {
        assert_eq!(counted, 1);
    }
}
