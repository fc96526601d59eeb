//! Tools you call: `tools/call` to a remote MCP server's tools, made safe to repeat
//! ([`IdempotentClient`]).

mod answer;
mod config;
mod failure;
mod verify;

pub use self::answer::{ADVICE_META, RemoteReply, for_model};
pub use self::config::RemoteTool;
pub use self::failure::CallError;
pub use self::verify::RemoteVerify;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{
    Error, Fingerprint, Idem, IdempotencyKey, JsonKeyField, KeyField, Tool, ToolKind, Verified,
    observe,
};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ServerResult,
    ToolAnnotations,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};
use serde_json::{Map, Value};

use self::config::Plan;
use self::failure::{Attempt, classify_sent, classify_unsent};

/// The request `_meta` entry the call's idempotency key is sent in, as its 36 characters
/// (`{"idemkit/idempotency-key": "32e00e40-1a53-8058-93c7-e9d1adc8ecaa"}`): the same key on every
/// attempt and every repeat of one operation, so a server that honours it deduplicates a repeat.
/// MCP's request ids are not deduplication keys (each attempt has its own).
pub const IDEMPOTENCY_KEY_META: &str = "idemkit/idempotency-key";

/// How long one attempt waits for its answer unless set otherwise: then it counts as sent and its
/// answer lost (`Ambiguous`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// An rmcp client's [`Peer`] through which `tools/call` to tools of a remote MCP server (ones
/// you did not write: payments, tickets, e-mail) are keyed, recorded and replayed as this
/// program's own `#[side_effect]` tools are: the same key encoding, stores and executor (claim,
/// record, replay, key reuse refused, an unknown outcome kept and not sent again blindly).
///
/// Each tool is configured by name with a [`RemoteTool`], or taken as the server's annotations
/// say: `readOnlyHint: true` is called as it is. A tool with neither is refused (a
/// [`CallError::Idem`] that says what to configure), never called unprotected.
///
/// ```no_run
/// # async fn run(peer: rmcp::service::Peer<rmcp::service::RoleClient>) -> Result<(), Box<dyn std::error::Error>> {
/// use idemkit::mcp::{IdempotentClient, RemoteTool};
/// use rmcp::model::CallToolRequestParams;
/// use serde_json::json;
///
/// let payments = IdempotentClient::new(peer) // `().serve(transport).await?.peer().clone()`
///     .tool("charge", RemoteTool::keyed(["customer_id", "invoice"]))
///     .tool("send_receipt", RemoteTool::keyed(["invoice"]).resend(false));
/// let args = json!({"customer_id": "cus_1", "invoice": "inv_7", "cents": 4200});
/// let call = CallToolRequestParams::new("charge").with_arguments(args.as_object().unwrap().clone());
/// let reply = payments.call_tool(call).await?; // once, however often it is called
/// println!("{:?} replayed: {}", reply.result.content, reply.replayed);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct IdempotentClient {
    peer: Peer<RoleClient>,
    idem: Option<Idem>,
    tools: BTreeMap<String, RemoteTool>,
    timeout: Duration,
    /// The server's tools' annotations, from `tools/list` (read once, when a call needs them).
    hints: Arc<Mutex<Option<Listing>>>,
}

impl std::fmt::Debug for IdempotentClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotentClient")
            .field("tools", &self.tools)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The server's tools by name, with their annotations (`None`: listed without any).
type Listing = Arc<BTreeMap<String, Option<ToolAnnotations>>>;

impl IdempotentClient {
    /// Calls through `peer` (an rmcp client's: `().serve(transport).await?.peer().clone()`).
    pub fn new(peer: Peer<RoleClient>) -> Self {
        IdempotentClient {
            peer,
            idem: None,
            tools: BTreeMap::new(),
            timeout: DEFAULT_TIMEOUT,
            hints: Arc::default(),
        }
    }

    /// Records in `idem`'s store (default: the runtime in force, [`Idem::current`]).
    pub fn idem(mut self, idem: Idem) -> Self {
        self.idem = Some(idem);
        self
    }

    /// Calls of the tool `name` as `config` says (over its server's annotations).
    pub fn tool(mut self, name: impl Into<String>, config: RemoteTool) -> Self {
        self.tools.insert(name.into(), config);
        self
    }

    /// How long one attempt waits for its answer (default [`DEFAULT_TIMEOUT`]); past it, the
    /// request counts as sent and its answer lost.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The peer calls go through.
    pub fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// Calls the remote tool `params.name` with `params.arguments`: a read as it is; a side
    /// effect keyed on its key fields, its key in `_meta` ([`IDEMPOTENCY_KEY_META`]), recorded,
    /// so that a repeat of the operation gets the recorded answer (`replayed`) and is not sent
    /// again. The other entries of `params.meta` are sent as given.
    pub async fn call_tool(&self, params: CallToolRequestParams) -> Result<RemoteReply, CallError> {
        let name = params.name.to_string();
        let config = self.tools.get(&name);
        let hints = if RemoteTool::needs_hints(config) {
            self.hints_of(&name).await?
        } else {
            None
        };
        let plan = config::plan(&name, config, hints.as_ref())?;
        let (ended, key, replayed) = match plan {
            Plan::Read => {
                let attempt = || self.send(params.clone(), None);
                (
                    self.entry(&name, config).read_only(attempt).await,
                    None,
                    false,
                )
            }
            Plan::Keyed {
                fields,
                key_name,
                resend,
            } => {
                let arguments = params.arguments.clone().unwrap_or_default();
                let (key, fingerprint) =
                    key_of(&name, &key_name, &fields, &arguments).map_err(|e| *e)?;
                let verify = config.and_then(RemoteTool::verification);
                // S28/S31: the arguments the verify tool is asked with, kept with the record so
                // that a settler asks it without the caller (`IdempotentClient::verify_record`).
                let kept = verify.map(|_| serde_json::to_vec(&arguments).unwrap_or_default());
                let tool = self
                    .entry(&key_name, config)
                    .resend(resend)
                    .keep_arguments(kept.as_deref());
                let attempt = |key: IdempotencyKey| self.send(params.clone(), Some(key));
                // S19: an unknown outcome is verified before anything is sent again, by the
                // runtime's verify loop, where the tool names a verify tool.
                let (ended, info) = match verify {
                    Some(verify) => {
                        let arguments = &arguments;
                        let ask = move |key: IdempotencyKey| async move {
                            Ok::<_, Attempt>(self.ask(verify, arguments, key).await)
                        };
                        observe(tool.verify(ask).run_keyed(key, fingerprint, attempt)).await
                    }
                    None => observe(tool.run_keyed(key, fingerprint, attempt)).await,
                };
                let replayed = info.as_ref().is_some_and(|i| i.replayed);
                // The key the call ran under (under the tenant in force, where there is one).
                let key = info.and_then(|i| i.key).unwrap_or(key);
                (ended, Some(key), replayed)
            }
        };
        match ended {
            Ok(result) => Ok(RemoteReply {
                result,
                key,
                replayed,
            }),
            // The tool's own answer, not recorded (see `Attempt::ToolError`).
            Err(Attempt::ToolError(result)) => Ok(RemoteReply {
                result,
                key,
                replayed: false,
            }),
            Err(Attempt::Idem(e)) => Err(CallError::Idem(e)),
            Err(Attempt::Upstream(failure, source)) => Err(CallError::Upstream {
                tool: name,
                key,
                failure,
                source,
            }),
        }
    }

    /// The executor's entry for the tool recorded as `name`, with this client's runtime and the
    /// tool's settings.
    fn entry<'a>(&'a self, name: &'a str, config: Option<&RemoteTool>) -> Tool<'a> {
        let tool = Tool::new(name);
        let tool = match &self.idem {
            Some(idem) => tool.idem(idem),
            None => tool,
        };
        match config {
            Some(c) => c.settings(tool),
            None => tool,
        }
    }

    /// One attempt: the request, its key in `_meta`, its answer within the timeout.
    async fn send(
        &self,
        mut params: CallToolRequestParams,
        key: Option<IdempotencyKey>,
    ) -> Result<CallToolResult, Attempt> {
        if let Some(key) = key {
            let meta = params.meta.get_or_insert_with(Default::default);
            meta.0.0.insert(
                IDEMPOTENCY_KEY_META.to_owned(),
                Value::String(key.to_string()),
            );
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions::with_timeout(self.timeout);
        let handle = match self.peer.send_request_with_option(request, options).await {
            Ok(handle) => handle,
            Err(e) => return Err(Attempt::Upstream(classify_unsent(&e), e)),
        };
        match handle.await_response().await {
            Ok(ServerResult::CallToolResult(result)) if result.is_error == Some(true) => {
                Err(Attempt::ToolError(result))
            }
            Ok(ServerResult::CallToolResult(result)) => Ok(result),
            // An answer this client does not drive (input required, a task): the tool may act.
            Ok(_) => Err(Attempt::Upstream(
                crate::Failure::Ambiguous,
                rmcp::ServiceError::UnexpectedResponse,
            )),
            Err(e) => Err(Attempt::Upstream(classify_sent(&e), e)),
        }
    }

    /// S19: asks the verify tool whether the operation called with `arguments` under `key`
    /// happened. Its failure, or an error answer, cannot tell: `Unknown`.
    async fn ask(
        &self,
        verify: &RemoteVerify,
        arguments: &Map<String, Value>,
        key: IdempotencyKey,
    ) -> Verified<CallToolResult> {
        let answer = match self.send(verify.request(arguments, key), None).await {
            Ok(answer) | Err(Attempt::ToolError(answer)) => Some(answer),
            Err(_) => None,
        };
        verify.verdict(answer)
    }

    /// The names the records of tools with a verify ([`RemoteTool::verify`]) are kept under (a
    /// tool's [`RemoteTool::key_name`], else its name): what a [`Settler`](crate::settle::Settler)
    /// is given a verify for, each asking [`IdempotentClient::verify_record`].
    pub fn verified_tools(&self) -> Vec<String> {
        self.tools
            .iter()
            .filter(|(_, c)| c.verification().is_some())
            .map(|(name, c)| c.recorded_as(name).to_owned())
            .collect()
    }

    /// S28 and S31: whether the operation of `record` (kept as unknown: its answer was lost, or
    /// its caller died mid-call) happened, asked of its tool's verify tool with the arguments
    /// its call kept, without the caller. For a [`Settler`](crate::settle::Settler) running
    /// beside this client:
    ///
    /// ```no_run
    /// # fn run(client: idemkit::mcp::IdempotentClient, store: std::sync::Arc<idemkit::store::SqliteStore>) {
    /// use idemkit::{Records, Settler};
    ///
    /// let mut settler = Settler::new(store.clone());
    /// for tool in client.verified_tools() {
    ///     let (client, store) = (client.clone(), store.clone());
    ///     settler = settler.verify(tool, move |key| {
    ///         let (client, store) = (client.clone(), store.clone());
    ///         async move {
    ///             let record = store.get(&key).await.map_err(|e| e.to_string())?;
    ///             let record = record.ok_or("the record is gone")?;
    ///             client.verify_record(&record).await
    ///         }
    ///     });
    /// }
    /// let task = settler.spawn(std::time::Duration::from_secs(60));
    /// # let _ = task; }
    /// ```
    ///
    /// `Err`: it cannot be asked (no tool of this client keeps its records under `record.tool`
    /// with a verify, or the record kept no arguments); the record stays unknown.
    pub async fn verify_record(
        &self,
        record: &crate::store::Record,
    ) -> Result<Verified<CallToolResult>, String> {
        let verify = self
            .tools
            .iter()
            .find(|(name, c)| c.recorded_as(name) == record.tool)
            .and_then(|(_, c)| c.verification())
            .ok_or_else(|| {
                format!(
                    "no tool of this client with a verify keeps its records as `{}`",
                    record.tool
                )
            })?;
        let kept = record.arguments.as_deref().ok_or_else(|| {
            format!(
                "the record of `{}` kept no arguments to ask its verify tool with",
                record.tool
            )
        })?;
        let arguments: Map<String, Value> = serde_json::from_slice(kept)
            .map_err(|e| format!("the record's arguments are not a JSON object: {e}"))?;
        Ok(self.ask(verify, &arguments, record.key).await)
    }

    /// The annotations of the server's tool `name` (`None`: not listed), from `tools/list`, read
    /// once. A listing that fails fails the call: nothing was sent.
    async fn hints_of(&self, name: &str) -> Result<Option<ToolAnnotations>, CallError> {
        let cached = self.hints.lock().expect("hints lock").clone();
        let listed = match cached {
            Some(listed) => listed,
            None => {
                let tools =
                    self.peer
                        .list_all_tools()
                        .await
                        .map_err(|source| CallError::Upstream {
                            tool: name.to_owned(),
                            key: None,
                            failure: classify_unsent_listing(&source),
                            source,
                        })?;
                let listed: Listing = Arc::new(
                    tools
                        .into_iter()
                        .map(|t| (t.name.to_string(), t.annotations))
                        .collect(),
                );
                *self.hints.lock().expect("hints lock") = Some(listed.clone());
                listed
            }
        };
        // Listed without annotations: MCP's defaults (not read-only, not idempotent).
        Ok(listed
            .get(name)
            .map(|hints| hints.clone().unwrap_or_default()))
    }

    /// Forgets the server's tools' annotations read so far: the next call that needs them reads
    /// `tools/list` again. For a server that says its tools changed
    /// (`notifications/tools/list_changed`); shared by this client's clones.
    pub fn forget_hints(&self) {
        *self.hints.lock().expect("hints lock") = None;
    }

    /// The kind of tool a call of `name` is, as configured or hinted so far (for a model's
    /// answer); a side effect unless known to be a read.
    fn kind_of(&self, name: &str) -> ToolKind {
        let config = self.tools.get(name);
        let hinted_read = self
            .hints
            .lock()
            .expect("hints lock")
            .as_ref()
            .and_then(|l| l.get(name).cloned().flatten())
            .and_then(|h| h.read_only_hint)
            == Some(true);
        match config::plan(name, config, None) {
            Ok(Plan::Read) => ToolKind::ReadOnly,
            Err(_) if hinted_read => ToolKind::ReadOnly,
            _ => ToolKind::SideEffect,
        }
    }

    /// [`IdempotentClient::call_tool`] answered as a model reads it ([`for_model`]).
    pub async fn call_tool_for_model(&self, params: CallToolRequestParams) -> CallToolResult {
        let name = params.name.to_string();
        let fields = match self.tools.get(&name) {
            Some(c) => c.key_fields().to_vec(),
            None => Vec::new(),
        };
        let ended = self.call_tool(params).await;
        for_model(&ended, self.kind_of(&name), &fields)
    }
}

/// A listing that failed: nothing of the call was sent, whatever the listing's own failure.
fn classify_unsent_listing(_: &rmcp::ServiceError) -> crate::Failure {
    crate::Failure::Transient
}

/// The key of a call of `tool` (recorded as `key_name`) from its key `fields` in `arguments`,
/// and the fingerprint of the other arguments (the arguments without the key fields).
fn key_of(
    tool: &str,
    key_name: &str,
    fields: &[String],
    arguments: &Map<String, Value>,
) -> Result<(IdempotencyKey, Fingerprint), Box<CallError>> {
    refuse_local_namesake(key_name).map_err(CallError::Idem)?;
    let invalid = |field: &str, what: &str| CallError::InvalidArguments {
        tool: tool.to_owned(),
        message: format!(
            "its key field `{field}` is {what} in the arguments; call it with `{field}` set to the text, \
             integer or bool that identifies the operation"
        ),
    };
    let mut values = Vec::with_capacity(fields.len());
    let mut others = Value::Object(arguments.clone());
    for field in fields {
        let mut at = arguments.get(field.split('.').next().unwrap_or_default());
        for part in field.split('.').skip(1) {
            at = at.and_then(|v| v.get(part));
        }
        let value = at.ok_or_else(|| invalid(field, "missing"))?;
        let part = JsonKeyField::new(value).map_err(|what| invalid(field, what))?;
        let name = field.rsplit('.').next().unwrap_or(field);
        values.push((name, part));
        remove_path(&mut others, field);
    }
    let fields: Vec<KeyField<'_>> = values
        .iter()
        .map(|(name, part)| (*name, part as &(dyn crate::KeyPart + Sync)))
        .collect();
    let key = IdempotencyKey::derive(key_name, &fields);
    Ok((key, Fingerprint::of_value(&others)))
}

fn remove_path(value: &mut Value, path: &str) {
    let mut parts = path.split('.').peekable();
    let mut at = value;
    while let Some(part) = parts.next() {
        let Value::Object(map) = at else { return };
        if parts.peek().is_none() {
            map.remove(part);
            return;
        }
        match map.get_mut(part) {
            Some(next) => at = next,
            None => return,
        }
    }
}

/// S21: a remote tool keyed under the name of one of this program's own side-effect tools would
/// share its keys and records.
fn refuse_local_namesake(key_name: &str) -> Result<(), Error> {
    match crate::tools().find(|t| t.name == key_name && t.kind == ToolKind::SideEffect) {
        Some(local) => Err(Error::Settings {
            tool: key_name.to_owned(),
            reason: format!(
                "this program's own side-effect tool `{key_name}` ({}:{}) has the same name, and the two would share \
                 keys and records (one's outcome replayed as the other's). Give the remote tool a name of its own: \
                 `RemoteTool::keyed([..]).key_name(\"payments/{key_name}\")`",
                local.file, local.line
            ),
        }),
        None => Ok(()),
    }
}
