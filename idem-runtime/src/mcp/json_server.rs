//! Free functions marked `json` served over MCP (`JsonToolsServer`).

use super::operations::{as_named_operation, named_operation};
use super::{ToolOutput, failed, success};
use crate::ToolKind;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};
use std::borrow::Cow;

/// Every tool marked `json` ([`JsonTools`](crate::json::JsonTools)) served as MCP tools (features `rmcp`
/// and `json`): one annotated function is a JSON function-calling tool and an MCP tool, with one
/// name, one description (its doc comment, for the model) and one record, so a call from either
/// surface replays the other's outcome.
///
/// ```
/// use idemkit::mcp::JsonToolsServer;
/// use idemkit::{Classified, Failure, side_effect, json::JsonTools};
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
/// Tools come as their [`ToolDefinition`](crate::json::ToolDefinition)s: `#[read_only]` says
/// `readOnlyHint: true`, `#[side_effect]` says `readOnlyHint: false, idempotentHint: true`, with
/// `destructiveHint` and `openWorldHint` from the attribute's `destructive` and `open_world`.
/// Results and failures read as those of a `#[tool]` method under the attribute (see the module
/// docs). A request whose `_meta` holds [`OPERATION_META`](super::OPERATION_META) (`{"idemkit/operation": "plan-42/step-3"}`)
/// runs as that operation, unless the server already runs it under one.
#[derive(Debug, Clone)]
pub struct JsonToolsServer {
    tools: crate::json::JsonTools,
    idem: Option<crate::Idem>,
}

impl JsonToolsServer {
    /// Serves `tools` (e.g. [`JsonTools::all`](crate::json::JsonTools::all)).
    pub fn new(tools: crate::json::JsonTools) -> Self {
        JsonToolsServer { tools, idem: None }
    }

    /// Runs every call under `idem` ([`Idem::scope`](crate::Idem::scope)): rmcp handles each
    /// request on a task of its own, where a runtime scoped around the server is not in force
    /// (default: the installed one, [`Idem::current`](crate::Idem::current)).
    pub fn idem(mut self, idem: crate::Idem) -> Self {
        self.idem = Some(idem);
        self
    }

    /// The tools served.
    pub fn tools(&self) -> &crate::json::JsonTools {
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
            Err(crate::json::JsonCallError::Failed {
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
                let mut out = CallToolResult::structured_error(json!({
                    "error": refused.to_string(),
                    "reason": refused.reason(),
                    "retryable": false,
                    "advice": refused.advice(),
                }));
                out.content
                    .insert(0, ContentBlock::text(refused.to_string()));
                Ok(out)
            }
        }
    }
}

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
