//! The surfaces, one [`Surface`] each: how a call of an operation is made through it, and what
//! its caller is told, as one word (see [`Answer`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem_runtime::testing::Intercept;
use idemkit::http::IdempotencyLayer;
use idemkit::mcp::{JsonToolsServer, ToolOutput};
use idemkit::rig::{ToolExecutionError, ToolOutput as RigToolOutput};
use idemkit::{
    CallInfo, Fingerprint, Idem, IdempotencyKey, JsonCallError, JsonReply, JsonTools, MemoryStore,
    SqliteStore, StoreError, Tool, classified_tools, observe, side_effect,
};
use rig_core::tool::PortableTool;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::provider::{After, PayError, Receipt, after_effect, look_up, send, send_text};

/// Every tool's lease: what a killed holder's record waits out before it is taken over.
pub const LEASE: Duration = Duration::from_secs(3);

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a caller was told, as one word: `ok`, `replay`, `verified`, idemkit's reason for a
/// refusal (`ambiguous`, `in_flight`, `key_reuse`, `unreplayable`, `store_unavailable`, …), an
/// HTTP status (`201`, `201 replayed`, `409`, `422`, `503`, `500 ran`: "it ran, its outcome is
/// unknown, settled by `idemkit resolve`", never "retry"), or what cut the caller off
/// (`panicked`, `dropped`, `killed`, `lost`).
pub type Answer = String;

/// Where a cell's calls record: its runtime (store), and the HTTP app over it.
pub struct Cx {
    pub idem: Idem,
    /// The store refuses every transition while this is set (the store-down cells).
    pub down: Arc<AtomicBool>,
    /// How long a repeat of a running request waits at the HTTP layer (zero: `409` at once).
    pub in_flight_wait: Duration,
    app: OnceLock<Router>,
}

impl Cx {
    fn with(idem: Idem, down: Arc<AtomicBool>, in_flight_wait: Duration) -> Arc<Cx> {
        Arc::new(Cx {
            idem,
            down,
            in_flight_wait,
            app: OnceLock::new(),
        })
    }

    /// A memory store that is down while [`Cx::down`] is set; its records kept for `ttl` (the
    /// lease at least) where given, else the runtime's default.
    pub fn memory(in_flight_wait: Duration, ttl: Option<Duration>) -> Arc<Cx> {
        let down = Arc::new(AtomicBool::new(false));
        let is_down = down.clone();
        let store = Intercept::new(MemoryStore::new(), move |_, _| {
            is_down
                .load(SeqCst)
                .then(|| StoreError::unavailable("the store is down (matrix)"))
        });
        let idem = match ttl {
            Some(ttl) => Idem::builder()
                .store(store)
                .lease(LEASE)
                .ttl(ttl)
                .build()
                .expect("a ttl of the lease at least"),
            None => Idem::new(store),
        };
        Cx::with(idem, down, in_flight_wait)
    }

    /// The SQLite file at `path` (the SIGKILL cells: the child's and then the parent's).
    pub fn sqlite(path: &std::path::Path) -> Arc<Cx> {
        let store = SqliteStore::open(path).expect("the SQLite store opens");
        Cx::with(
            Idem::new(store),
            Arc::new(AtomicBool::new(false)),
            Duration::ZERO,
        )
    }
}

/// One way a tool is called.
pub trait Surface: Send + Sync {
    /// Its row in the table.
    fn name(&self) -> &'static str;
    /// Its short name (operations, the child's command line).
    fn id(&self) -> &'static str;
    /// What its caller's answers are spelled like.
    fn kind(&self) -> Kind {
        Kind::Plain
    }
    /// The key `op`'s call runs (and sends its request) under.
    fn key(&self, op: &str) -> IdempotencyKey;
    /// One call of `op` with the non-key argument `amount`.
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer>;
}

/// How a surface answers: a tool without `verify` (the attribute's default `resend = false` for
/// a function that does not take its key; `Tool::resend(false)`), one with `verify`, or HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Plain,
    Verify,
    Http,
    /// The MCP client (`mcp::IdempotentClient`): a fault upstream reaches it as an unanswered
    /// request, never as its own panic or unreadable outcome.
    Client,
}

fn of_rust(result: Result<Receipt, PayError>, info: Option<CallInfo>) -> Answer {
    match result {
        Ok(_) => ok_word(info.as_ref()),
        Err(e) => e.reason(),
    }
}

fn ok_word(info: Option<&CallInfo>) -> Answer {
    match info {
        Some(i) if i.replayed => "replay".into(),
        Some(i) if i.verified => "verified".into(),
        _ => "ok".into(),
    }
}

/// S35: the advice beside an answer says what its word says (checked here, apart from the
/// table that makes it): the state, and never that a new key is safe where the effect may have
/// happened. Panics otherwise, failing the cell.
fn advised(word: &str, advice: &Value) -> Answer {
    let state = match word {
        "ok" | "verified" | "unreplayable" => "ran",
        "replay" => "replayed",
        "ambiguous" | "lease_lost" | "failed_ambiguous" | "500 ran" => "unknown",
        "in_flight" | "409" => "running_elsewhere",
        "expired" | "410" => "expired",
        "key_reuse" | "store_unavailable" | "store_unreadable" | "refused" | "422" | "503" => {
            "not_run"
        }
        other => panic!("S35: no advice expected for the answer `{other}`: {advice}"),
    };
    assert_eq!(advice["state"], state, "S35: `{word}` advised as {advice}");
    assert_eq!(
        advice["sameKeySafe"], true,
        "S35: `{word}` advised as {advice}"
    );
    if state != "ran" || word == "unreplayable" {
        assert_eq!(
            advice["newKeySafe"], false,
            "S35: `{word}` advised as {advice}"
        );
    }
    word.into()
}

fn of_json(result: Result<JsonReply, JsonCallError>) -> Answer {
    match result {
        Ok(reply) => {
            let content = reply.content();
            let envelope: Value = serde_json::from_str(content.lines().last().unwrap()).unwrap();
            advised(&ok_word(reply.info.as_ref()), &envelope["advice"])
        }
        Err(e @ JsonCallError::Failed { .. }) => {
            let content = e.content();
            let line: Value = serde_json::from_str(content.lines().last().unwrap()).unwrap();
            advised(e.reason(), &line["advice"])
        }
        Err(e) => format!("refused before the call: {e}"),
    }
}

fn of_mcp(out: ToolOutput) -> Answer {
    match out {
        Ok(result) => {
            let structured = result.structured_content.unwrap_or_default();
            let word = if result.is_error == Some(true) {
                structured["reason"].as_str().unwrap_or("?")
            } else if structured["replayed"] == json!(true) {
                "replay"
            } else {
                "ok"
            };
            advised(word, &structured["advice"])
        }
        Err(e) => format!("protocol error: {e:?}"),
    }
}

fn of_rig(out: Result<RigToolOutput, ToolExecutionError>) -> Answer {
    match out {
        Ok(out) => {
            let (word, json) = match out.as_json() {
                Some(json) => ("ok", json.clone()),
                None => ("replay", out.as_content()[1].as_json().unwrap().clone()),
            };
            assert_eq!(word == "replay", out.render().contains("Replayed:"));
            advised(word, &json["advice"])
        }
        Err(e) => {
            let feedback = e.model_output().as_content()[1].as_json().unwrap().clone();
            advised(e.code().unwrap_or("?"), &feedback["advice"])
        }
    }
}

// ---- `#[side_effect]` on a free function ----

#[side_effect(key = "op", lease = "3s", in_flight_wait = "0ms")]
async fn m_attr(op: String, amount: u64) -> Result<Receipt, PayError> {
    send(&op, amount).await
}

pub struct Attr;

impl Surface for Attr {
    fn name(&self) -> &'static str {
        "`#[side_effect]` fn"
    }
    fn id(&self) -> &'static str {
        "attr"
    }
    fn key(&self, op: &str) -> IdempotencyKey {
        IdempotencyKey::derive("m_attr", &[("op", &op)])
    }
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer> {
        Box::pin(async move {
            let (result, info) = cx.idem.scope(observe(m_attr(op, amount))).await;
            of_rust(result, info)
        })
    }
}

// ---- `Tool::side_effect` ----

fn tool(name: &'static str) -> Tool<'static> {
    Tool::new(name)
        .resend(false)
        .lease(LEASE)
        .in_flight_wait(Duration::ZERO)
}

pub struct ToolSideEffect;

impl Surface for ToolSideEffect {
    fn name(&self) -> &'static str {
        "`Tool::side_effect`"
    }
    fn id(&self) -> &'static str {
        "tool"
    }
    fn key(&self, op: &str) -> IdempotencyKey {
        IdempotencyKey::derive("m_tool", &[("op", &op)])
    }
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer> {
        Box::pin(async move {
            let call = tool("m_tool")
                .idem(&cx.idem)
                .side_effect(&[("op", &op)], &amount, |_key| send(&op, amount));
            let (result, info) = observe(call).await;
            of_rust(result, info)
        })
    }
}

// ---- `Tool::verify(..).side_effect` ----

pub struct ToolVerify;

impl Surface for ToolVerify {
    fn name(&self) -> &'static str {
        "`Tool::verify(..).side_effect`"
    }
    fn id(&self) -> &'static str {
        "verify"
    }
    fn kind(&self) -> Kind {
        Kind::Verify
    }
    fn key(&self, op: &str) -> IdempotencyKey {
        IdempotencyKey::derive("m_verify", &[("op", &op)])
    }
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer> {
        Box::pin(async move {
            let call = tool("m_verify")
                .idem(&cx.idem)
                .verify(|_key| look_up(&op))
                .side_effect(&[("op", &op)], &amount, |_key| send(&op, amount));
            let (result, info) = observe(call).await;
            of_rust(result, info)
        })
    }
}

/// Issue 40 hole 4 re-introduced (the broken variant): `Tool::verify`'s loop as it was, its
/// closures called outside the call's key (`made_under`), on the runtime's own
/// `SideEffectCall`. Only the tests of the broken variants use it.
pub struct ToolVerifyUnkeyed;

impl Surface for ToolVerifyUnkeyed {
    fn name(&self) -> &'static str {
        "`Tool::verify`, closures not under the call's key (hole 4)"
    }
    fn id(&self) -> &'static str {
        "verify-unkeyed"
    }
    fn kind(&self) -> Kind {
        Kind::Verify
    }
    fn key(&self, op: &str) -> IdempotencyKey {
        ToolVerify.key(op)
    }
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer> {
        Box::pin(async move {
            let call = async {
                let tool = tool("m_verify").idem(&cx.idem).with_verify();
                let mut call = idemkit::__private::SideEffectCall::<Receipt, PayError>::new(
                    tool,
                    self.key(&op),
                    Fingerprint::of(&amount),
                );
                while call.attempt().await.is_some() {
                    if call.verifying() {
                        call.verify(look_up(&op)).await;
                    } else {
                        call.run(send(&op, amount)).await;
                    }
                }
                call.end()
            };
            let (result, info) = observe(call).await;
            of_rust(result, info)
        })
    }
}

// ---- a `json` tool through `JsonTools` ----

#[side_effect(key = "op", json, lease = "3s", in_flight_wait = "0ms")]
async fn m_json(op: String, amount: u64) -> Result<Receipt, PayError> {
    send(&op, amount).await
}

pub struct Json;

impl Surface for Json {
    fn name(&self) -> &'static str {
        "`json` tool via `JsonTools`"
    }
    fn id(&self) -> &'static str {
        "json"
    }
    fn key(&self, op: &str) -> IdempotencyKey {
        IdempotencyKey::derive("m_json", &[("op", &op)])
    }
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer> {
        Box::pin(async move {
            let tools = JsonTools::only(["m_json"]).expect("m_json is a json tool");
            let args = json!({"op": op, "amount": amount});
            of_json(cx.idem.scope(tools.call_value("m_json", args)).await)
        })
    }
}

// ---- `idemkit::mcp::JsonToolsServer` ----

#[side_effect(key = "op", json, lease = "3s", in_flight_wait = "0ms")]
async fn m_mcp_json(op: String, amount: u64) -> Result<Receipt, PayError> {
    send(&op, amount).await
}

pub struct McpJson;

impl Surface for McpJson {
    fn name(&self) -> &'static str {
        "`mcp::JsonToolsServer`"
    }
    fn id(&self) -> &'static str {
        "mcp-json"
    }
    fn key(&self, op: &str) -> IdempotencyKey {
        IdempotencyKey::derive("m_mcp_json", &[("op", &op)])
    }
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer> {
        Box::pin(async move {
            let tools = JsonTools::only(["m_mcp_json"]).expect("m_mcp_json is a json tool");
            let server = JsonToolsServer::new(tools).idem(cx.idem.clone());
            let Value::Object(args) = json!({"op": op, "amount": amount}) else {
                unreachable!()
            };
            of_mcp(server.call("m_mcp_json", Some(args), None).await)
        })
    }
}

// ---- an rmcp `#[tool]` method under `#[side_effect]` ----

/// The arguments of the rmcp and rig tools.
#[derive(Debug, Clone, Serialize, Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Req {
    /// The operation.
    op: String,
    /// Not a key field: the fingerprint.
    amount: u64,
}

pub struct McpTools;

#[classified_tools]
#[tool_router]
impl McpTools {
    /// The matrix's charge.
    #[side_effect(key = "req.op", lease = "3s", in_flight_wait = "0ms")]
    #[tool]
    async fn m_rmcp(&self, req: Parameters<Req>) -> Result<Receipt, PayError> {
        send(&req.0.op, req.0.amount).await
    }
}

#[tool_handler]
impl ServerHandler for McpTools {}

pub struct Rmcp;

impl Surface for Rmcp {
    fn name(&self) -> &'static str {
        "rmcp `#[tool]` method"
    }
    fn id(&self) -> &'static str {
        "rmcp"
    }
    fn key(&self, op: &str) -> IdempotencyKey {
        IdempotencyKey::derive("m_rmcp", &[("op", &op)])
    }
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer> {
        Box::pin(async move {
            // What rmcp's router calls for `tools/call` (the router is checked to list it).
            let out = cx
                .idem
                .scope(McpTools.m_rmcp(Parameters(Req { op, amount })))
                .await;
            of_mcp(out)
        })
    }
}

/// rmcp's router lists the method (the surface calls what the router would).
pub fn rmcp_router_lists_the_tool() -> bool {
    McpTools::tool_router()
        .list_all()
        .iter()
        .any(|t| t.name == "m_rmcp")
}

// ---- a rig tool ----

pub struct MRig;

impl PortableTool for MRig {
    const NAME: &'static str = "m_rig";
    type Args = Req;
    type Output = RigToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "The matrix's charge.".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }

    #[side_effect(key = "args.op", rig, lease = "3s", in_flight_wait = "0ms")]
    async fn call(&self, args: Req) -> Result<Receipt, PayError> {
        send(&args.op, args.amount).await
    }
}

pub struct Rig;

impl Surface for Rig {
    fn name(&self) -> &'static str {
        "rig tool"
    }
    fn id(&self) -> &'static str {
        "rig"
    }
    fn key(&self, op: &str) -> IdempotencyKey {
        IdempotencyKey::derive("m_rig", &[("op", &op)])
    }
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer> {
        Box::pin(async move { of_rig(cx.idem.scope(MRig.call(Req { op, amount })).await) })
    }
}

// ---- the HTTP `IdempotencyLayer` (axum, in process) ----

/// The handler: the charge of the body's `op` under the layer's key, relayed as `201`; after it,
/// what is scripted (hang, panic, a body that breaks off).
async fn charge(body: Bytes) -> Response {
    let args: Value = serde_json::from_slice(&body).expect("a JSON body");
    let op = args["op"].as_str().expect("an op").to_owned();
    let text = match send_text(&op).await {
        Ok(text) => text,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    if after_effect(&op).await == After::BreakBody {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"{\"id\":")),
            Err(std::io::Error::other("the handler's stream failed")),
        ];
        let body = Body::from_stream(futures_util::stream::iter(chunks));
        return (StatusCode::CREATED, body).into_response();
    }
    (StatusCode::CREATED, text).into_response()
}

/// The layer as configured, and how: as shipped, or with the broken variants' settings.
pub struct Http {
    pub resends: bool,
    pub attached: bool,
}

pub static HTTP: Http = Http {
    resends: false,
    attached: false,
};

impl Http {
    fn app(&self, cx: &Cx) -> Router {
        cx.app
            .get_or_init(|| {
                let layer = IdempotencyLayer::new(cx.idem.clone())
                    .name("m_http")
                    .require_key(true)
                    .lease(LEASE)
                    .in_flight_wait(cx.in_flight_wait)
                    .handler_resends(self.resends)
                    .cancel_on_disconnect(self.attached);
                Router::new().route("/charges", post(charge)).layer(layer)
            })
            .clone()
    }
}

impl Surface for Http {
    fn name(&self) -> &'static str {
        match (self.resends, self.attached) {
            (false, false) => "HTTP `IdempotencyLayer`",
            (true, false) => "HTTP layer, `handler_resends(true)`",
            (_, true) => "HTTP layer, `handler_resends(true)`, attached to the connection",
        }
    }
    fn id(&self) -> &'static str {
        "http"
    }
    fn kind(&self) -> Kind {
        Kind::Http
    }
    fn key(&self, op: &str) -> IdempotencyKey {
        IdempotencyKey::derive("m_http", &[("idempotency_key", &op)])
    }
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer> {
        Box::pin(async move {
            let request = Request::post("/charges")
                .header("idempotency-key", format!("\"{op}\""))
                .header("content-type", "application/json")
                .body(Body::from(json!({"op": op, "amount": amount}).to_string()))
                .unwrap();
            let response = self.app(&cx).oneshot(request).await.unwrap();
            of_http(response).await
        })
    }
}

async fn of_http(response: Response) -> Answer {
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key(idemkit::http::REPLAYED);
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|e| format!("(the body broke off: {e})"));
    // A problem the layer made carries the advice (S35); the handler's own responses do not.
    let advice = serde_json::from_str::<Value>(&body)
        .ok()
        .filter(|b| b.get("type").is_some() && b.get("detail").is_some())
        .map(|b| b["advice"].clone());
    let word = match (status, replayed) {
        (500, _)
            if body.contains("The request ran")
                && body.contains("idemkit resolve")
                && !body.to_lowercase().contains("retry with") =>
        {
            "500 ran".into()
        }
        (500, _) => format!("500: {body}"),
        (s, true) => format!("{s} replayed"),
        (s, false) => s.to_string(),
    };
    match advice {
        Some(advice) => advised(&word, &advice),
        None => word,
    }
}

/// The surfaces the matrix runs, in its rows' order.
pub static SURFACES: [&(dyn Surface + 'static); 9] = [
    &Attr,
    &ToolSideEffect,
    &ToolVerify,
    &Json,
    &McpJson,
    &Rmcp,
    &Rig,
    &HTTP,
    &super::client::CLIENT,
];

/// The surface a child process is told to run.
pub fn by_id(id: &str) -> &'static dyn Surface {
    *SURFACES
        .iter()
        .find(|s| s.id() == id)
        .unwrap_or_else(|| panic!("no surface `{id}`"))
}
