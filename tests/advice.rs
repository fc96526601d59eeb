//! S35: every answer idemkit gives a model or a client carries one machine-readable advice
//! (`"advice"`, [`idemkit::Advice`]) beside the sentence the model reads first: the state, whether
//! calling again is safe with the same key and with a new one, when to retry, and the key.
//!
//! One tool, one situation at a time, on every surface: a `json` tool called through
//! [`JsonTools`] and served over MCP by [`JsonToolsServer`], a rig tool, and an axum route behind
//! the HTTP [`IdempotencyLayer`]. The same situation gives the same advice on each (the key aside:
//! each surface's operation has its own), and each surface's answers are pinned by a snapshot
//! (`tests/snapshots/advice__s35_*.snap`, reviewed; a changed answer fails until it is reviewed
//! again). Every `idemkit::Error` variant's advice on the MCP method path and rig is in
//! [`s35_every_error_is_advised_alike_on_mcp_rig_and_json`].
#![cfg(all(feature = "json", feature = "rmcp", feature = "rig", feature = "tower"))]

use std::fmt::Write as _;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt as _;
use idemkit::advice::State;
use idemkit::http::IdempotencyLayer;
use idemkit::mcp::JsonToolsServer;
use idemkit::rig::{ToolExecutionError, ToolOutput};
use idemkit::{
    Advice, Classify, Error, Explanation, Failure, Idem, IdempotencyKey, JsonCallError, JsonTools,
    MemoryStore, StoreError, ToolKind, side_effect,
};
use rig_core::tool::PortableTool;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};
use tower::ServiceExt as _;

/// A slow call signals that its body started, then waits for the gate.
static STARTED: Notify = Notify::const_new();
static GATE: Semaphore = Semaphore::const_new(0);

#[derive(Debug)]
enum PayError {
    /// Sent, no answer: it may have happened.
    Timeout,
    /// Refused by the provider: nothing happened, and it will not succeed.
    Declined,
    /// The provider said when to come back: nothing happened.
    RateLimited(Duration),
    Idem(Error),
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Timeout => f.write_str("the provider did not answer in time"),
            PayError::Declined => f.write_str("card declined"),
            PayError::RateLimited(after) => write!(f, "rate limited: come back in {after:?}"),
            PayError::Idem(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PayError::Timeout | PayError::Declined | PayError::RateLimited(_) => None,
            PayError::Idem(e) => Some(e),
        }
    }
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            PayError::Timeout => Failure::Ambiguous,
            PayError::Declined | PayError::Idem(_) => Failure::Permanent,
            PayError::RateLimited(after) => Failure::RetryAfter(*after),
        }
    }
}

impl From<Error> for PayError {
    fn from(e: Error) -> Self {
        PayError::Idem(e)
    }
}

/// What every surface's body does with an order: `…lost` times out after sending (its outcome
/// unknown), `…declined` is declined, `…limited` rate limited for 2.5 s, `…slow` waits for the
/// gate, anything else is charged.
async fn provider(order: &str, cents: u64) -> Result<String, PayError> {
    if order.ends_with("lost") {
        return Err(PayError::Timeout);
    }
    if order.ends_with("declined") {
        return Err(PayError::Declined);
    }
    if order.ends_with("limited") {
        return Err(PayError::RateLimited(Duration::from_millis(2500)));
    }
    if order.ends_with("slow") {
        STARTED.notify_one();
        GATE.acquire().await.unwrap().forget();
    }
    Ok(format!("charged {cents} for {order}"))
}

/// Charges an order once.
#[side_effect(
    key = "order",
    json,
    name = "s35.charge",
    max_attempts = 1,
    in_flight_wait = "0s"
)]
async fn charge(order: String, cents: u64) -> Result<String, PayError> {
    provider(&order, cents).await
}

#[derive(Clone, Serialize, Deserialize)]
struct ChargeArgs {
    order: String,
    cents: u64,
}

struct RigCharge;

impl PortableTool for RigCharge {
    const NAME: &'static str = "s35.rig_charge";
    type Args = ChargeArgs;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Charges an order once.".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }

    #[side_effect(key = "args.order", rig, max_attempts = 1, in_flight_wait = "0s")]
    async fn call(&self, args: ChargeArgs) -> Result<String, PayError> {
        provider(&args.order, args.cents).await
    }
}

/// One answer as a surface gave it: what the model reads first, and the advice beside it
/// (`None`: the surface has none for this answer, as the HTTP layer's successes, which are the
/// handler's own responses).
struct Answer {
    read_first: String,
    whole: String,
    advice: Option<Advice>,
}

fn advice_of(value: &Value) -> Advice {
    serde_json::from_value(value["advice"].clone())
        .unwrap_or_else(|e| panic!("no advice in {value}: {e}"))
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap()
}

#[derive(Clone, Copy)]
enum Surface {
    Json,
    Mcp,
    Rig,
    Http,
}

const SURFACES: [Surface; 4] = [Surface::Json, Surface::Mcp, Surface::Rig, Surface::Http];

impl Surface {
    fn name(self) -> &'static str {
        match self {
            Surface::Json => "json",
            Surface::Mcp => "mcp",
            Surface::Rig => "rig",
            Surface::Http => "http",
        }
    }
}

struct Cx {
    idem: Idem,
    json: JsonTools,
    mcp: JsonToolsServer,
    http: Router,
}

impl Cx {
    fn new() -> Self {
        let idem = Idem::new(MemoryStore::new());
        let json = JsonTools::only(["s35.charge"]).unwrap();
        let mcp = JsonToolsServer::new(json.clone()).idem(idem.clone());
        let http = Router::new()
            .route(
                "/charges",
                post(|body: String| async move {
                    let args: ChargeArgs = serde_json::from_str(&body).unwrap();
                    match provider(&args.order, args.cents).await {
                        Ok(done) => (StatusCode::OK, HeaderMap::new(), done),
                        Err(PayError::Declined) => (
                            StatusCode::PAYMENT_REQUIRED,
                            HeaderMap::new(),
                            "card declined".into(),
                        ),
                        Err(PayError::RateLimited(_)) => {
                            let mut headers = HeaderMap::new();
                            headers.insert("retry-after", "3".parse().unwrap());
                            (
                                StatusCode::TOO_MANY_REQUESTS,
                                headers,
                                "come back later".into(),
                            )
                        }
                        // The handler's answer is lost after it sent the charge (S25).
                        Err(e) => panic!("{e}"),
                    }
                }),
            )
            .layer(
                IdempotencyLayer::new(idem.clone())
                    .in_flight_wait(Duration::ZERO)
                    .require_key(true),
            );
        Cx {
            idem,
            json,
            mcp,
            http,
        }
    }

    /// One call of `surface`'s charge with `order` and `cents` (the HTTP request's
    /// Idempotency-Key is the order).
    async fn call(&self, surface: Surface, order: &str, cents: u64) -> Answer {
        let args = json!({"order": order, "cents": cents});
        match surface {
            Surface::Json => match self
                .idem
                .scope(self.json.call_value("s35.charge", args))
                .await
            {
                Ok(reply) => {
                    let content = reply.content();
                    let advice = reply.advice();
                    let envelope = content.lines().last().unwrap().to_owned();
                    assert_eq!(advice_of(&serde_json::from_str(&envelope).unwrap()), advice);
                    Answer {
                        read_first: content.lines().next().unwrap().to_owned(),
                        whole: content,
                        advice: Some(advice),
                    }
                }
                Err(e) => {
                    let content = e.content();
                    let advice = e.advice();
                    let line = content.lines().last().unwrap().to_owned();
                    assert_eq!(advice_of(&serde_json::from_str(&line).unwrap()), advice);
                    Answer {
                        read_first: e.to_string(),
                        whole: content,
                        advice: Some(advice),
                    }
                }
            },
            Surface::Mcp => {
                let out = self
                    .mcp
                    .call("s35.charge", args.as_object().cloned(), None)
                    .await
                    .unwrap();
                let structured = out.structured_content.clone().unwrap();
                let texts: Vec<String> = out
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                    .collect();
                Answer {
                    read_first: texts[0].clone(),
                    whole: format!("isError: {:?}\n{}", out.is_error, texts.join("\n---\n")),
                    advice: Some(advice_of(&structured)),
                }
            }
            Surface::Rig => {
                let args: ChargeArgs = serde_json::from_value(args).unwrap();
                match self.idem.scope(RigCharge.call(args)).await {
                    Ok(out) => {
                        // A replay: its sentence, then the envelope; else the envelope alone.
                        let (read_first, json) = match out.as_json() {
                            Some(json) => (json.to_string(), json.clone()),
                            None => {
                                let blocks = out.as_content();
                                let sentence = blocks[0].as_text().unwrap().to_owned();
                                (sentence, blocks[1].as_json().unwrap().clone())
                            }
                        };
                        Answer {
                            read_first,
                            whole: out.render(),
                            advice: Some(advice_of(&json)),
                        }
                    }
                    Err(e) => {
                        let blocks = e.model_output().as_content();
                        let feedback = blocks[1].as_json().unwrap().clone();
                        Answer {
                            read_first: blocks[0].as_text().unwrap().to_owned(),
                            whole: format!(
                                "code: {:?}, retryable: {:?}\n{}\n---\n{}",
                                e.code(),
                                e.retryable(),
                                blocks[0].as_text().unwrap(),
                                pretty(&feedback)
                            ),
                            advice: Some(advice_of(&feedback)),
                        }
                    }
                }
            }
            Surface::Http => {
                let request = axum::http::Request::post("/charges")
                    .header("idempotency-key", format!("\"{order}\""))
                    .body(Body::from(args.to_string()))
                    .unwrap();
                let response = self.http.clone().oneshot(request).await.unwrap();
                let status = response.status();
                let replayed = response.headers().get("idempotent-replayed").cloned();
                let problem = response.headers()["content-type"] == "application/problem+json";
                let body = response.into_body().collect().await.unwrap().to_bytes();
                let body = String::from_utf8(body.to_vec()).unwrap();
                if !problem {
                    return Answer {
                        read_first: body.clone(),
                        whole: format!("{status}, replayed header: {replayed:?}\n{body}"),
                        advice: None,
                    };
                }
                let problem: Value = serde_json::from_str(&body).unwrap();
                Answer {
                    read_first: problem["detail"].as_str().unwrap().to_owned(),
                    whole: format!("{status}\n{}", pretty(&problem)),
                    advice: Some(advice_of(&problem)),
                }
            }
        }
    }

    /// A call of `order` made while another call of it runs (its body waits for the gate).
    async fn while_running(&self, surface: Surface, order: &str) -> Answer {
        let first = self.call(surface, order, 1);
        let second = async {
            STARTED.notified().await;
            let answer = self.call(surface, order, 1).await;
            GATE.add_permits(1);
            answer
        };
        let (first, second) = tokio::join!(first, second);
        assert_eq!(
            first.advice.map(|a| a.state),
            expected_on(surface, State::Ran)
        );
        second
    }
}

/// The situations, in order, each surface's answer to it, and the state they must advise.
async fn situations(cx: &Cx, surface: Surface) -> Vec<(&'static str, Answer)> {
    let s = surface.name();
    let order = |what: &str| format!("{s}-{what}");
    vec![
        ("ran", cx.call(surface, &order("o1"), 1).await),
        ("replayed", cx.call(surface, &order("o1"), 1).await),
        (
            "not_run (the key reused with other arguments)",
            cx.call(surface, &order("o1"), 2).await,
        ),
        (
            "running_elsewhere",
            cx.while_running(surface, &order("slow")).await,
        ),
        (
            "unknown (this call's attempt)",
            cx.call(surface, &order("lost"), 1).await,
        ),
        (
            "unknown (a repeat of it)",
            cx.call(surface, &order("lost"), 1).await,
        ),
        (
            "ran (the tool's own failure, without effect)",
            cx.call(surface, &order("declined"), 1).await,
        ),
        (
            "ran (rate limited: when to retry)",
            cx.call(surface, &order("limited"), 1).await,
        ),
    ]
}

const EXPECTED: [State; 8] = [
    State::Ran,
    State::Replayed,
    State::NotRun,
    State::RunningElsewhere,
    State::Unknown,
    State::Unknown,
    State::Ran,
    State::Ran,
];

/// What `surface` advises where the others advise `state`: the same, except that the HTTP
/// layer's successes, and a handler's own failures, are the handler's own responses (no advice;
/// a replay is marked by its `Idempotent-Replayed` header).
fn expected_on(surface: Surface, state: State) -> Option<State> {
    match (surface, state) {
        (Surface::Http, State::Ran | State::Replayed) => None,
        _ => Some(state),
    }
}

/// `text` with how long a call waited (`(waited 4.697µs)`, which varies) written `(waited …)`.
fn without_waits(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("(waited ") {
        out.push_str(&rest[..at]);
        out.push_str("(waited …)");
        let after = &rest[at..];
        rest = &after[after.find(')').map_or(after.len(), |end| end + 1)..];
    }
    out.push_str(rest);
    out
}

/// A surface's answers, as its snapshot shows them.
fn rendered(answers: &[(&'static str, Answer)]) -> String {
    let mut out = String::new();
    for (situation, answer) in answers {
        let advice = match &answer.advice {
            Some(advice) => pretty(&serde_json::to_value(advice).unwrap()),
            None => "(none: the handler's own response)".to_owned(),
        };
        writeln!(
            out,
            "=== {situation}\n--- read first:\n{}\n--- whole:\n{}\n--- advice:\n{advice}\n",
            answer.read_first, answer.whole
        )
        .unwrap();
    }
    without_waits(&out)
}

/// The advice with its key taken out (each surface's operation has a key of its own).
fn keyless(advice: &Option<Advice>) -> Option<Advice> {
    advice.clone().map(|a| a.with_key(None))
}

#[tokio::test]
async fn s35_the_same_situation_gets_the_same_advice_on_json_mcp_rig_and_http() {
    let cx = Cx::new();
    let mut all = Vec::new();
    for surface in SURFACES {
        let answers = situations(&cx, surface).await;
        assert_eq!(answers.len(), EXPECTED.len());
        for ((situation, answer), expected) in answers.iter().zip(EXPECTED) {
            let expected = expected_on(surface, expected);
            assert_eq!(
                answer.advice.as_ref().map(|a| a.state),
                expected,
                "{} / {situation}",
                surface.name()
            );
            if let Some(advice) = &answer.advice {
                // The key: on HTTP only where the problem's detail names the record for an
                // operator (an unknown outcome); a client's reference is its own Idempotency-Key.
                let keyed = !matches!(surface, Surface::Http) || advice.state == State::Unknown;
                assert_eq!(
                    advice.key.is_some(),
                    keyed,
                    "{} / {situation}",
                    surface.name()
                );
                // A replay and a failure are read first as a sentence, the advice beside it.
                if advice.state != State::Ran {
                    assert!(
                        !answer.read_first.trim_start().starts_with('{'),
                        "{} / {situation}: {}",
                        surface.name(),
                        answer.read_first
                    );
                }
            }
        }
        all.push((surface, answers));
    }
    // The same situation, the same advice (the key aside), wherever the surface gives one.
    let (_, json) = &all[0];
    for (surface, answers) in &all[1..] {
        for ((situation, theirs), (_, ours)) in answers.iter().zip(json) {
            if theirs.advice.is_some() {
                assert_eq!(
                    keyless(&theirs.advice),
                    keyless(&ours.advice),
                    "{} and json disagree on {situation}",
                    surface.name()
                );
            }
        }
    }
    for (surface, answers) in &all {
        insta::assert_snapshot!(format!("s35_{}_answers", surface.name()), rendered(answers));
    }
}

/// The HTTP layer's own refusals before anything ran (no key where one is required, a malformed
/// one): problem details
/// with the advice `not_run`, no key.
#[tokio::test]
async fn s35_the_http_layers_refusals_carry_the_advice_not_run() {
    let cx = Cx::new();
    let mut out = String::new();
    for (what, key) in [("no key", None), ("an empty key", Some("\"\""))] {
        let mut request = axum::http::Request::post("/charges");
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let response = cx
            .http
            .clone()
            .oneshot(request.body(Body::from("{}")).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let problem: Value = serde_json::from_slice(&body).unwrap();
        let advice = advice_of(&problem);
        assert_eq!(advice.state, State::NotRun, "{what}");
        assert!(advice.same_key_safe && !advice.retryable && advice.key.is_none());
        writeln!(out, "=== {what}\n{status}\n{}\n", pretty(&problem)).unwrap();
    }
    insta::assert_snapshot!("s35_http_refusals", out);
}

/// Every `idemkit::Error` variant, the state its advice must say, and whether a new key is safe.
fn errors() -> Vec<(Error, State, bool)> {
    let tool = || "s35.charge".to_owned();
    let key = IdempotencyKey::derive("s35.charge", &[("order", &"o1")]);
    vec![
        (Error::KeyReuse { tool: tool(), key }, State::NotRun, false),
        (
            Error::Expired {
                tool: tool(),
                key,
                done: std::time::UNIX_EPOCH + Duration::from_secs(1_796_000_000),
                resolved: false,
            },
            State::Expired,
            false,
        ),
        (
            Error::InFlight {
                tool: tool(),
                key,
                waited: Duration::ZERO,
            },
            State::RunningElsewhere,
            false,
        ),
        (
            Error::Store {
                tool: tool(),
                key: Some(key),
                source: StoreError::unavailable("connection refused"),
            },
            State::NotRun,
            false,
        ),
        (
            Error::Store {
                tool: tool(),
                key: Some(key),
                source: StoreError::corrupt("the outcome does not deserialize"),
            },
            State::NotRun,
            false,
        ),
        (
            Error::LeaseLost {
                tool: tool(),
                key,
                attempts: 1,
                why: "taken over",
            },
            State::Unknown,
            false,
        ),
        (
            Error::Ambiguous {
                tool: tool(),
                key,
                attempts: 0,
                last: Failure::Ambiguous,
            },
            State::Unknown,
            false,
        ),
        (
            Error::Unreplayable {
                tool: tool(),
                key,
                reason: "NaN is no JSON number".into(),
            },
            State::Ran,
            false,
        ),
        (
            Error::Arguments {
                tool: tool(),
                source: serde_json::from_str::<u8>("x").unwrap_err(),
            },
            State::NotRun,
            false,
        ),
        (
            Error::Settings {
                tool: tool(),
                reason: "its ttl is shorter than its lease".into(),
            },
            State::NotRun,
            false,
        ),
        (Error::NoTenant { tool: tool() }, State::NotRun, false),
        (Error::NoOperation { tool: tool() }, State::NotRun, false),
        (
            Error::NotConfigured {
                tool: tool(),
                reason: "no store".into(),
            },
            State::NotRun,
            false,
        ),
        (
            Error::NoRuntime {
                reason: "outside any call".into(),
            },
            State::Ran,
            false,
        ),
        (
            Error::DuplicateTool {
                tool: tool(),
                first: "src/billing.rs:12 (app::billing)".into(),
                second: "src/shop.rs:40 (app::shop)".into(),
            },
            State::NotRun,
            false,
        ),
    ]
}

/// S35: every error the runtime has is advised alike on the MCP method path
/// (`mcp::side_effect_output`, what `#[tool]` methods return), rig (`rig::tool_error`) and a JSON
/// call's error (from the explanation a JSON call makes of it); none says a new key is safe (each
/// may follow an effect under this key, or says nothing of one), and every one says the same key
/// is.
#[test]
fn s35_every_error_is_advised_alike_on_mcp_rig_and_json() {
    let mut table = String::new();
    for (i, (error, state, new_key_safe)) in errors().into_iter().enumerate() {
        let name = format!("{error:?}");
        let name = name.split([' ', '{', '(']).next().unwrap().to_owned();
        let explained = Explanation::of(
            &error,
            Failure::Permanent,
            ToolKind::SideEffect,
            None,
            &["order"],
        );
        let json = JsonCallError::Failed {
            tool: "s35.charge",
            message: error.to_string(),
            info: None,
            explanation: Box::new(explained),
        }
        .advice();
        let mcp = idemkit::mcp::side_effect_output::<String, PayError>(
            Err(PayError::Idem(errors().swap_remove(i).0)),
            None,
            &["order"],
        )
        .unwrap();
        let mcp = advice_of(mcp.structured_content.as_ref().unwrap());
        let rig =
            idemkit::rig::tool_error(PayError::Idem(errors().swap_remove(i).0), None, &["order"]);
        let rig = advice_of(rig.model_output().as_content()[1].as_json().unwrap());
        assert_eq!(mcp, json, "{name}: MCP and JSON");
        assert_eq!(rig, json, "{name}: rig and JSON");
        assert_eq!(json.state, state, "{name}");
        assert_eq!(json.new_key_safe, new_key_safe, "{name}");
        assert!(json.same_key_safe, "{name}");
        writeln!(table, "{name}: {}", serde_json::to_string(&json).unwrap()).unwrap();
    }
    insta::assert_snapshot!("s35_errors_advised", table);
}

/// S35: on the surfaces that report the tool's own failures (JSON, MCP, rig), one without effect
/// says a new key is safe too, and a rate limit says when to retry; the same on each.
#[tokio::test]
async fn s35_a_failure_without_effect_says_a_new_key_is_safe_and_when_to_retry() {
    let cx = Cx::new();
    for surface in [Surface::Json, Surface::Mcp, Surface::Rig] {
        let declined = cx
            .call(surface, &format!("{}-x-declined", surface.name()), 1)
            .await;
        let declined = declined.advice.unwrap();
        assert_eq!(declined.state, State::Ran);
        assert_eq!(declined.reason.as_deref(), Some("failed"));
        assert!(declined.same_key_safe && declined.new_key_safe && !declined.retryable);
        let limited = cx
            .call(surface, &format!("{}-x-limited", surface.name()), 1)
            .await;
        let limited = limited.advice.unwrap();
        assert_eq!(limited.reason.as_deref(), Some("failed_transient"));
        assert!(limited.retryable && limited.new_key_safe);
        assert_eq!(limited.retry_after_seconds, Some(3), "2.5 s, rounded up");
    }
}
