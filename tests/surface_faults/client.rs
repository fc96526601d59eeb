//! The MCP client's surface: `mcp::IdempotentClient` calling a tool of an upstream MCP server (an
//! rmcp server in this process, over an in-memory pipe, a connection per call) that sends the
//! effect to the provider with the key its request's `_meta` carries. The provider's faults
//! reach the client as an upstream's would: a lost provider answer makes the upstream drop its
//! own (the connection closes), a hang or a panic after the effect leaves the request
//! unanswered (the client's attempt times out).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemkit::mcp::{
    CallError, IDEMPOTENCY_KEY_META, IdempotentClient, RemoteReply, RemoteTool, for_model,
};
use idemkit::{IdempotencyKey, ToolKind};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer, RunningServiceCancellationToken};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use super::provider::send_keyed;
use super::surfaces::{Answer, BoxFuture, Cx, Kind, LEASE, Surface};

/// How long the client waits for an answer: a hang or a panic upstream is waited out once.
const TIMEOUT: Duration = Duration::from_secs(3);

/// One connection of the upstream, which its handler closes when its answer is to be lost.
#[derive(Clone, Default)]
struct Upstream {
    kill: Arc<Mutex<Option<RunningServiceCancellationToken>>>,
}

impl ServerHandler for Upstream {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = request
            .meta
            .as_ref()
            .and_then(|m| m.0.0.get(IDEMPOTENCY_KEY_META))
            .or_else(|| context.meta.0.0.get(IDEMPOTENCY_KEY_META))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let args = request.arguments.unwrap_or_default();
        let op = args["op"].as_str().unwrap_or_default().to_owned();
        let amount = args["amount"].as_u64().unwrap_or_default();
        match send_keyed(&op, amount, key).await {
            Ok(receipt) => Ok(CallToolResponse::Complete(CallToolResult::structured(
                json!({"id": receipt.id}),
            ))),
            // The provider's answer was lost: so is this server's (its connection closes).
            Err(_) => {
                if let Some(kill) = self.kill.lock().unwrap().take() {
                    kill.cancel();
                }
                std::future::pending().await
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let Value::Object(schema) = json!({"type": "object"}) else {
            unreachable!()
        };
        let mut tool = Tool::new_with_raw("m_client", None, schema);
        // Not idempotent by its own word: the client does not re-send an unknown outcome.
        tool.annotations = Some(ToolAnnotations::from_raw(
            None,
            Some(false),
            Some(true),
            Some(false),
            None,
        ));
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools: vec![tool],
            meta: None,
            next_cursor: None,
            ttl_ms: None,
            cache_scope: None,
        })
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// The client as shipped (`resend` from the tool's `idempotentHint`, here `false`), or told to
/// re-send an unknown outcome to an upstream that does not deduplicate (the broken variant).
pub struct McpClient {
    pub resend: Option<bool>,
}

pub static CLIENT: McpClient = McpClient { resend: None };

impl Surface for McpClient {
    fn name(&self) -> &'static str {
        match self.resend {
            None => "`mcp::IdempotentClient` (remote tool)",
            Some(_) => "`mcp::IdempotentClient`, `resend` set",
        }
    }
    fn id(&self) -> &'static str {
        "mcp-client"
    }
    fn kind(&self) -> Kind {
        Kind::Client
    }
    fn key(&self, op: &str) -> IdempotencyKey {
        IdempotencyKey::derive("m_client", &[("op", &op)])
    }
    fn call(&'static self, cx: Arc<Cx>, op: String, amount: u64) -> BoxFuture<Answer> {
        Box::pin(async move {
            let (client_io, server_io) = tokio::io::duplex(64 * 1024);
            let upstream = Upstream::default();
            let serving = tokio::spawn(upstream.clone().serve(server_io));
            let client = match ().serve(client_io).await {
                Ok(client) => client,
                Err(e) => return format!("no MCP handshake: {e}"),
            };
            let running = match serving.await {
                Ok(Ok(running)) => running,
                _ => return "the upstream did not start".into(),
            };
            *upstream.kill.lock().unwrap() = Some(running.cancellation_token());
            let mut tool = RemoteTool::keyed(["op"])
                .lease(LEASE)
                .in_flight_wait(Duration::ZERO);
            if let Some(resend) = self.resend {
                tool = tool.resend(resend);
            }
            let remote = IdempotentClient::new(client.peer().clone())
                .idem(cx.idem.clone())
                .timeout(TIMEOUT)
                .tool("m_client", tool);
            let Value::Object(args) = json!({"op": op, "amount": amount}) else {
                unreachable!()
            };
            let ended = remote
                .call_tool(CallToolRequestParams::new("m_client").with_arguments(args))
                .await;
            drop(running);
            of_client(ended)
        })
    }
}

/// The caller's word: `ok`, `replay`, or the reason a model is told ([`for_model`]).
fn of_client(ended: Result<RemoteReply, CallError>) -> Answer {
    let told = for_model(&ended, ToolKind::SideEffect, &["op".to_owned()]);
    match ended {
        Ok(reply) if reply.result.is_error == Some(true) => "tool_error".into(),
        Ok(reply) if reply.replayed => "replay".into(),
        Ok(_) => "ok".into(),
        Err(_) => told.structured_content.unwrap_or_default()["reason"]
            .as_str()
            .unwrap_or("?")
            .into(),
    }
}
