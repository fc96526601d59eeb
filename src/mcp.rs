//! MCP tools served with [rmcp](https://docs.rs/rmcp) (feature `rmcp`).
//!
//! Write `#[side_effect(...)]` or `#[read_only]` **above** rmcp's `#[tool]` on a tool method, and
//! `#[classified_tools]` above `#[tool_router]` on the impl block:
//!
//! ```
//! use idemkit::{Idem, IdempotencyKey, MemoryStore, classified_tools, read_only, side_effect};
//! use rmcp::handler::server::wrapper::Parameters;
//! use rmcp::{tool, tool_router};
//! # #[derive(Debug)] struct PayError;
//! # impl std::fmt::Display for PayError {
//! #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("declined") }
//! # }
//! # impl std::error::Error for PayError {}
//! # impl idemkit::Classify for PayError {
//! #     fn classify(&self) -> idemkit::Failure { idemkit::Failure::Permanent }
//! # }
//! # impl From<idemkit::Error> for PayError { fn from(_: idemkit::Error) -> Self { PayError } }
//! # #[derive(Debug, serde::Serialize, serde::Deserialize)] struct Receipt { key: String }
//! # struct Provider;
//! # impl Provider {
//! #     async fn charge(&self, key: &str, _: &ChargeReq) -> Result<Receipt, PayError> {
//! #         Ok(Receipt { key: key.to_owned() })
//! #     }
//! # }
//! # #[derive(Clone, serde::Serialize, serde::Deserialize, rmcp::schemars::JsonSchema)]
//! # #[schemars(crate = "rmcp::schemars")]
//! # struct ChargeReq { customer_id: String, purpose: String, period: String, cents: u64 }
//! # #[derive(Clone, serde::Serialize, serde::Deserialize, rmcp::schemars::JsonSchema)]
//! # #[schemars(crate = "rmcp::schemars")]
//! # struct BalanceReq { customer_id: String }
//! struct Payments { provider: Provider, idem: Idem }
//!
//! #[classified_tools] // every #[tool] below must be #[side_effect] or #[read_only]
//! #[tool_router]
//! impl Payments {
//!     /// Charges a customer once per purpose and period.
//!     #[side_effect(key = "req.customer_id, req.purpose, req.period", idem = self.idem, destructive = false)]
//!     #[tool]
//!     async fn charge(&self, key: &IdempotencyKey, req: Parameters<ChargeReq>) -> Result<Receipt, PayError> {
//!         self.provider.charge(key.as_str(), &req.0).await
//!     }
//!
//!     /// The customer's balance.
//!     #[read_only]
//!     #[tool]
//!     async fn balance(&self, Parameters(req): Parameters<BalanceReq>) -> Result<u64, PayError> {
//!         Ok(req.customer_id.len() as u64)
//!     }
//! }
//!
//! let tools = Payments::tool_router().list_all();
//! let charge = tools.iter().find(|t| t.name == "charge").unwrap();
//! let hints = charge.annotations.as_ref().unwrap();
//! assert_eq!((hints.read_only_hint, hints.idempotent_hint), (Some(false), Some(true)));
//! # let _ = Payments { provider: Provider, idem: Idem::new(MemoryStore::new()) };
//! ```
//!
//! - **Order**: our attribute goes above `#[tool]`. Attributes expand top to bottom, so ours sees
//!   the `async fn` as written and rewrites `#[tool(...)]` before rmcp reads it. Below `#[tool]` it
//!   would get rmcp's boxed future instead, which is a compile error saying to move it up.
//! - **Annotations** come from the attribute: `#[read_only]` → `readOnlyHint: true`;
//!   `#[side_effect]` → `readOnlyHint: false, idempotentHint: true`, and `destructiveHint` /
//!   `openWorldHint` from `destructive = bool` / `open_world = bool`. A hint written in
//!   `#[tool(annotations(...))]` that contradicts them, or that does not exist, is a compile error; a
//!   `title` is kept.
//! - **Key fields** are fields of the request: `req.customer_id` for `req: Parameters<ChargeReq>`
//!   (the wrapper reads `req.0.customer_id`), or the names bound by
//!   `Parameters(ChargeReq { customer_id, .. })`. The other fields of the request are the
//!   fingerprint, so the same key fields with another amount are refused, not run.
//! - **Results**: the method serves [`ToolOutput`] (rmcp's `Result<CallToolResult, ErrorData>`).
//!   A success carries `{"result": …, "replayed": bool, "idempotencyKey": "…"}` as structured
//!   content and as text, and a replay says so in a sentence the model reads first. Every failure
//!   — the tool's own, [`Error::KeyReuse`](crate::Error::KeyReuse), [`Error::InFlight`](crate::Error::InFlight), a store failure — is a tool error
//!   (`isError: true`) that says what happened and whether calling again helps, never a protocol
//!   error: `{"error": …, "reason": …, "retryable": bool, "idempotencyKey": …}` after a sentence
//!   for the model (the reasons are [`Explanation`]'s). "Not run" is
//!   said only of a call refused before any attempt; when the outcome is unknown
//!   ([`Error::Ambiguous`](crate::Error::Ambiguous), [`Error::LeaseLost`](crate::Error::LeaseLost))
//!   the model is told the effect may have happened, that calling again will not do it twice, and
//!   what settles it (the tool's `verify`, or an operator's `idemkit resolve`).
//! - **Operations the host names**: a tool with no natural key takes an
//!   [`OperationId`](crate::OperationId) parameter, which rmcp's router never sees; serve the
//!   handler in [`Operations`], and each request runs as the operation its `_meta` names
//!   (`{"idemkit/operation": "plan-42/step-3"}`, [`OPERATION_META`]): the client (the agent's
//!   host) names it from its own durable state, never the model.
//! - **One definition for JSON and MCP**: a free function marked `json` is served over MCP by
//!   [`JsonToolsServer`] with the name, description and record it has in
//!   [`JsonTools`](crate::JsonTools) (feature `json`).
//! - **Errors**: the tool's error type is a `std::error::Error`, `anyhow::Error` (feature
//!   `anyhow`) or `Box<dyn Error + Send + Sync>`; the error it holds is searched for idemkit's
//!   own, to name the reason.
//! - **`#[classified_tools]`** on the impl block fails the build for a `#[tool]` method that is
//!   neither `#[side_effect]` nor `#[read_only]`.
//! - **Tenants**: a server that knows its client wraps its handler in [`Tenanted`], which runs
//!   each request under the tenant it reads from the request's [`RequestContext`] (an
//!   authenticated principal the transport put in its extensions, or the client named in the
//!   handshake), so the tools need no [`as_tenant`](crate::as_tenant) of their own: two clients
//!   calling `charge` with equal arguments are two operations, and neither is ever answered with
//!   the other's outcome (S18).

use std::borrow::Cow;
use std::error::Error as StdError;
use std::sync::Arc;

use idem_runtime::__private::serde::Serialize;
use idem_runtime::__private::serde_json::{self, Value, json};
use idem_runtime::{CallInfo, Classify, Explanation, Failure, ToolKind};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, ProtocolVersion};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, Service, ServiceRole};

/// What an idemkit MCP tool method returns to rmcp's router.
pub type ToolOutput = Result<CallToolResult, ErrorData>;

/// The MCP result of one call of a `#[side_effect]` tool: its outcome marked `replayed` (with a
/// sentence saying so first) or, on failure, a tool error that explains it. `info` is what
/// [`observe`](crate::observe) saw of the call; `key_fields` name the key fields for the model.
pub fn side_effect_output<T, E>(
    result: Result<T, E>,
    info: Option<CallInfo>,
    key_fields: &[&str],
) -> ToolOutput
where
    T: Serialize,
    E: StdError + Classify + 'static,
{
    side_effect_output_as(result, info, key_fields, |e| e)
}

/// [`side_effect_output`] for an error type seen as a `std::error::Error` through `as_error`
/// (`anyhow::Error`, `Box<dyn Error + Send + Sync>`, which are not one themselves).
pub(crate) fn side_effect_output_as<T, E>(
    result: Result<T, E>,
    info: Option<CallInfo>,
    key_fields: &[&str],
    as_error: fn(&E) -> &(dyn StdError + 'static),
) -> ToolOutput
where
    T: Serialize,
    E: Classify,
{
    let key = info
        .as_ref()
        .and_then(|i| i.key.as_ref())
        .map(|k| k.to_string());
    let replayed = info.as_ref().is_some_and(|i| i.replayed);
    match result {
        Ok(value) => Ok(success(to_value(&value)?, Some((replayed, key.as_deref())))),
        Err(e) => Ok(failure(
            as_error(&e),
            e.classify(),
            ToolKind::SideEffect,
            info.as_ref(),
            key,
            key_fields,
        )),
    }
}

/// The MCP result of one call of a `#[read_only]` tool.
pub fn read_only_output<T, E>(result: Result<T, E>) -> ToolOutput
where
    T: Serialize,
    E: StdError + Classify + 'static,
{
    read_only_output_as(result, |e| e)
}

/// [`read_only_output`] for an error type seen as a `std::error::Error` through `as_error`.
pub(crate) fn read_only_output_as<T, E>(
    result: Result<T, E>,
    as_error: fn(&E) -> &(dyn StdError + 'static),
) -> ToolOutput
where
    T: Serialize,
    E: Classify,
{
    match result {
        Ok(value) => Ok(success(to_value(&value)?, None)),
        Err(e) => Ok(failure(
            as_error(&e),
            e.classify(),
            ToolKind::ReadOnly,
            None,
            None,
            &[],
        )),
    }
}

/// A success as MCP carries it: the one envelope (`success_envelope`) as structured content,
/// after the one sentence a replay starts with.
fn success(result: Value, side_effect: Option<(bool, Option<&str>)>) -> CallToolResult {
    let mut out =
        CallToolResult::structured(crate::__private::success_envelope(result, side_effect));
    if let Some((true, key)) = side_effect {
        let note = crate::__private::replayed_note(key);
        out.content.insert(0, ContentBlock::text(note));
    }
    out
}

fn to_value<T: Serialize>(value: &T) -> Result<Value, ErrorData> {
    serde_json::to_value(value).map_err(|e| {
        ErrorData::internal_error(format!("the tool's result did not serialize: {e}"), None)
    })
}

/// An error's text as an MCP client reads it: a missing operation is the client's to send, in
/// the request's `_meta` (the runtime's own text tells a Rust host to use `operation_scope`).
fn for_the_client(reason: &str, error: String) -> String {
    if reason == "no_operation" {
        format!(
            "idemkit: this tool acts once per operation, which the MCP client names, and this request named none; \
             the tool was not run. Send the operation's name in the request's `_meta`: \
             `\"_meta\": {{\"{OPERATION_META}\": \"plan-42/step-3\"}}`, named from the client's own durable state \
             (the plan step, the ticket), never by the model"
        )
    } else {
        error
    }
}

/// A tool error: why, in words a model can act on, then the error itself, its reason (a stable
/// word, see [`Explanation`]) and whether calling again can help.
fn failure(
    e: &(dyn StdError + 'static),
    failure: Failure,
    kind: ToolKind,
    info: Option<&CallInfo>,
    key: Option<String>,
    key_fields: &[&str],
) -> CallToolResult {
    let told = Explanation::of(e, failure, kind, info, key_fields);
    failed(e.to_string(), &told, key)
}

/// A failure as MCP carries it, for `#[tool]` methods and `JsonToolsServer` alike: the
/// explanation's sentence first, then `{"error", "reason", "retryable", "idempotencyKey"}`.
fn failed(error: String, told: &Explanation, key: Option<String>) -> CallToolResult {
    let mut out = CallToolResult::structured_error(json!({
        "error": for_the_client(told.reason, error),
        "reason": told.reason,
        "retryable": told.retryable,
        "idempotencyKey": key,
    }));
    out.content.insert(0, ContentBlock::text(told.text.clone()));
    out
}

/// An rmcp server (any [`Service<RoleServer>`], so any `ServerHandler`) whose requests each run
/// under the tenant that `tenant` reads from the request's context: every idemkit call the
/// request makes is scoped to it, as if the tool had written
/// [`as_tenant`](crate::as_tenant)`(tenant, …)` around its body. Records of one tenant are never
/// replayed to, refused for, or shown to another (S18); a tool marked `tenant_required = true`
/// fails closed when `tenant` answers `None` (without one, the call is unscoped, or scoped to the
/// runtime's [`IdemBuilder::tenant`](crate::IdemBuilder::tenant)).
///
/// Where the tenant comes from is the server's decision, because only the server knows what it
/// authenticated:
///
/// - **Streamable HTTP** (rmcp's `transport-streamable-http-server`): rmcp puts the request's
///   `http::request::Parts` in `context.extensions`; an authentication layer in front of it (axum
///   middleware, a tower layer) that put the verified principal in the HTTP request's extensions
///   is read back as
///   `cx.extensions.get::<http::request::Parts>()?.extensions.get::<Principal>()`.
/// - **A connection per client** (stdio, a socket the server authenticated when it accepted it):
///   the server knows the client before it serves the connection, so the closure returns what it
///   captured: `move |_| Some(tenant.clone())`.
/// - **The client's name in the `initialize` handshake** (`cx.client_info()`): the client says who
///   it is, and nothing checks it. Use it only where every client is trusted (one operator's own
///   agents), never as the boundary between customers.
///
/// The tenant is a task-local of the request's task: work the tool spawns onto other tasks does
/// not inherit it (spawn it with [`in_current_scope`](crate::in_current_scope), which carries
/// the tenant, the operation and the runtime).
///
/// ```
/// use std::sync::Arc;
/// use idemkit::mcp::Tenanted;
/// use rmcp::ServerHandler;
///
/// # struct Payments;
/// # impl ServerHandler for Payments {}
/// // Each request under the client it comes from (trusted clients: see above).
/// let server = Tenanted::new(Payments, |cx| cx.client_info().map(|client| client.name));
/// # let _ = server;
/// // A connection the server authenticated before serving it.
/// let tenant: Arc<str> = Arc::from("acme");
/// let server = Tenanted::new(Payments, move |_| Some(tenant.clone()));
/// # let _ = server;
/// // Served like the handler itself: `server.serve(transport).await?`.
/// ```
pub struct Tenanted<S, F> {
    inner: S,
    tenant: F,
}

impl<S, F> Tenanted<S, F> {
    /// `inner`, with each request run under the tenant `tenant` reads from its context (`None`:
    /// the request runs without one).
    pub fn new<T>(inner: S, tenant: F) -> Self
    where
        F: Fn(&RequestContext<RoleServer>) -> Option<T>,
        T: Into<Arc<str>>,
    {
        Tenanted { inner, tenant }
    }

    /// The wrapped server.
    pub const fn inner(&self) -> &S {
        &self.inner
    }

    /// The wrapped server, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: std::fmt::Debug, F> std::fmt::Debug for Tenanted<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenanted")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, F, T> Service<RoleServer> for Tenanted<S, F>
where
    S: Service<RoleServer>,
    F: Fn(&RequestContext<RoleServer>) -> Option<T> + Send + Sync + 'static,
    T: Into<Arc<str>> + Send + 'static,
{
    async fn handle_request(
        &self,
        request: <RoleServer as ServiceRole>::PeerReq,
        context: RequestContext<RoleServer>,
    ) -> Result<<RoleServer as ServiceRole>::Resp, ErrorData> {
        match (self.tenant)(&context) {
            Some(tenant) => {
                idem_runtime::as_tenant(tenant.into(), self.inner.handle_request(request, context))
                    .await
            }
            None => self.inner.handle_request(request, context).await,
        }
    }

    async fn handle_notification(
        &self,
        notification: <RoleServer as ServiceRole>::PeerNot,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.handle_notification(notification, context).await
    }

    fn get_info(&self) -> <RoleServer as ServiceRole>::Info {
        self.inner.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }
}

/// The request `_meta` entry a client (the agent's host) names the operation in: a tool that
/// takes an [`OperationId`](crate::OperationId) is called as that operation
/// ([`operation_scope`](crate::operation_scope)), named by the host, never by the model.
pub const OPERATION_META: &str = "idemkit/operation";

/// The operation a request's `_meta` names ([`OPERATION_META`]), if any.
fn named_operation(meta: &serde_json::Map<String, Value>) -> Option<String> {
    meta.get(OPERATION_META)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Runs `fut` as the operation `named` (a request's), unless the host set one around it already.
async fn as_named_operation<F: std::future::Future>(named: Option<&str>, fut: F) -> F::Output {
    match named {
        Some(op) if idem_runtime::operation_name().is_none() => {
            idem_runtime::operation_scope(op, fut).await
        }
        _ => fut.await,
    }
}

/// An rmcp server whose requests each run as the operation the client named in the request's
/// `_meta` ([`OPERATION_META`]): a `#[side_effect]` `#[tool]` method with an
/// [`OperationId`](crate::OperationId) parameter gets that operation's id
/// ([`operation_scope`](crate::operation_scope)); rmcp's router never sees the parameter, and
/// the model never names it. A request without one runs as it would (such a tool then answers
/// a tool error, reason `no_operation`).
///
/// ```
/// use idemkit::mcp::Operations;
/// # use rmcp::ServerHandler;
/// # struct Support;
/// # impl ServerHandler for Support {}
/// let server = Operations::new(Support);
/// // Served like the handler itself: `server.serve(transport).await?`. A client calls
/// // `tools/call` with `"_meta": {"idemkit/operation": "ticket-7"}`.
/// # let _ = server;
/// ```
#[derive(Debug)]
pub struct Operations<S> {
    inner: S,
}

impl<S> Operations<S> {
    /// `inner`, each request run as the operation its `_meta` names.
    pub const fn new(inner: S) -> Self {
        Operations { inner }
    }

    /// The wrapped server.
    pub const fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Service<RoleServer>> Service<RoleServer> for Operations<S> {
    async fn handle_request(
        &self,
        request: <RoleServer as ServiceRole>::PeerReq,
        context: RequestContext<RoleServer>,
    ) -> Result<<RoleServer as ServiceRole>::Resp, ErrorData> {
        let named = named_operation(&context.meta);
        as_named_operation(
            named.as_deref(),
            self.inner.handle_request(request, context),
        )
        .await
    }

    async fn handle_notification(
        &self,
        notification: <RoleServer as ServiceRole>::PeerNot,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.handle_notification(notification, context).await
    }

    fn get_info(&self) -> <RoleServer as ServiceRole>::Info {
        self.inner.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }
}

/// Every tool marked `json` ([`JsonTools`](crate::JsonTools)) served as MCP tools (features `rmcp`
/// and `json`): one annotated function is a JSON function-calling tool and an MCP tool, with one
/// name, one description (its doc comment, for the model) and one record, so a call from either
/// surface replays the other's outcome.
///
/// ```
/// use idemkit::mcp::JsonToolsServer;
/// use idemkit::{Classified, Failure, JsonTools, side_effect};
///
/// /// Refunds an order once.
/// ///
/// /// # Errors
/// ///
/// /// When the provider refuses (this section is for Rust readers; the model is not shown it).
/// #[side_effect(key = "order_id", json)]
/// async fn refund(order_id: String, cents: u64) -> anyhow::Result<String> {
///     Ok(format!("refunded {cents} of {order_id}"))
/// }
///
/// let server = JsonToolsServer::new(JsonTools::only(["refund"]).unwrap());
/// // Served like any rmcp handler: `server.serve(transport).await?`.
/// # let _ = server;
/// ```
///
/// Tools come as their [`ToolDefinition`](crate::ToolDefinition)s: `#[read_only]` says
/// `readOnlyHint: true`, `#[side_effect]` says `readOnlyHint: false, idempotentHint: true`, with
/// `destructiveHint` and `openWorldHint` from the attribute's `destructive` and `open_world`.
/// Results and failures read as those of a `#[tool]` method under the attribute (see the module
/// docs). A request whose `_meta` holds [`OPERATION_META`] (`{"idemkit/operation": "plan-42/step-3"}`)
/// runs as that operation, unless the server already runs it under one.
#[cfg(feature = "json")]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
#[derive(Debug, Clone)]
pub struct JsonToolsServer {
    tools: crate::JsonTools,
    idem: Option<idem_runtime::Idem>,
}

#[cfg(feature = "json")]
impl JsonToolsServer {
    /// Serves `tools` (e.g. [`JsonTools::all`](crate::JsonTools::all)).
    pub fn new(tools: crate::JsonTools) -> Self {
        JsonToolsServer { tools, idem: None }
    }

    /// Runs every call under `idem` ([`Idem::scope`](crate::Idem::scope)): rmcp handles each
    /// request on a task of its own, where a runtime scoped around the server is not in force
    /// (default: the installed one, [`Idem::current`](crate::Idem::current)).
    pub fn idem(mut self, idem: idem_runtime::Idem) -> Self {
        self.idem = Some(idem);
        self
    }

    /// The tools served.
    pub fn tools(&self) -> &crate::JsonTools {
        &self.tools
    }

    /// The MCP definitions of the tools, sorted by name.
    pub fn list(&self) -> Vec<rmcp::model::Tool> {
        self.tools
            .definitions()
            .into_iter()
            .map(|d| {
                let schema = match d.parameters {
                    Value::Object(map) => map,
                    _ => Default::default(),
                };
                let description =
                    (!d.description.is_empty()).then_some(Cow::Borrowed(d.description));
                let mut tool = rmcp::model::Tool::new_with_raw(d.name, description, schema);
                let annotations = match d.kind {
                    ToolKind::ReadOnly => rmcp::model::ToolAnnotations::from_raw(
                        None,
                        Some(true),
                        None,
                        None,
                        d.open_world,
                    ),
                    _ => rmcp::model::ToolAnnotations::from_raw(
                        None,
                        Some(false),
                        d.destructive,
                        Some(true),
                        d.open_world,
                    ),
                };
                tool.annotations = Some(annotations);
                tool
            })
            .collect()
    }

    /// Calls the tool `name` as MCP's `tools/call` does, as the operation `operation` (when the
    /// host named one): the result a client gets.
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<rmcp::model::JsonObject>,
        operation: Option<&str>,
    ) -> ToolOutput {
        let arguments = Value::Object(arguments.unwrap_or_default());
        let call = self.tools.call_value(name, arguments);
        let call = as_named_operation(operation, call);
        let ended = match &self.idem {
            Some(idem) => idem.scope(call).await,
            None => call.await,
        };
        match ended {
            Ok(reply) => {
                // A read-only tool's reply has no key (a read has none): its result alone.
                let key = reply.key().map(|k| k.to_string());
                let side_effect = key.as_deref().map(|key| (reply.replayed(), Some(key)));
                Ok(success(reply.value, side_effect))
            }
            Err(crate::JsonCallError::Failed {
                message,
                info,
                explanation,
                ..
            }) => {
                let key = info
                    .as_ref()
                    .and_then(|i| i.key.as_ref())
                    .map(|k| k.to_string());
                Ok(failed(message, &explanation, key))
            }
            // Nothing ran: what to correct, as a tool error the model reads.
            Err(refused) => {
                let reason = match &refused {
                    crate::JsonCallError::UnknownTool { .. } => "unknown_tool",
                    crate::JsonCallError::DuplicateTool { .. } => "duplicate_tool",
                    _ => "invalid_arguments",
                };
                let mut out = CallToolResult::structured_error(json!({
                    "error": refused.to_string(),
                    "reason": reason,
                    "retryable": false,
                }));
                out.content
                    .insert(0, ContentBlock::text(refused.to_string()));
                Ok(out)
            }
        }
    }
}

#[cfg(feature = "json")]
impl rmcp::ServerHandler for JsonToolsServer {
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        let operation = request
            .meta
            .as_ref()
            .and_then(|meta| named_operation(meta))
            .or_else(|| named_operation(&context.meta));
        let out = self
            .call(&request.name, request.arguments, operation.as_deref())
            .await?;
        Ok(rmcp::model::CallToolResponse::Complete(out))
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        Ok(rmcp::model::ListToolsResult {
            result_type: Some(rmcp::model::ResultType::COMPLETE),
            tools: self.list(),
            meta: None,
            next_cursor: None,
            ttl_ms: None,
            cache_scope: None,
        })
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.list().into_iter().find(|t| t.name == name)
    }

    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }
}
