//! Issue 33: tools a model calls. A tool with no natural key is keyed on the operation the HOST
//! names (`operation_scope`), so a retried model turn and a restarted agent act once; one
//! annotated function serves JSON function calling and MCP with one name, one description and
//! one record (`JsonToolsServer`); anyhow and boxed errors in MCP and rig tools; descriptions
//! without rustdoc's sections; the JSON tool's description is its own when an MCP method shares
//! its name.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use idemkit::mcp::{JsonToolsServer, OPERATION_META};
use idemkit::rig::{ToolExecutionError, ToolOutput};
use idemkit::{
    Error, Failure, Idem, JsonCallError, JsonTools, MemoryStore, OperationId, SqliteStore,
    ToolKind, classified_tools, operation_scope, read_only, side_effect,
};
use rig_core::tool::PortableTool;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::schemars::JsonSchema;
use rmcp::service::{RoleClient, RunningService};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Mails sent, by address (each test mails its own).
static APOLOGIES: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

fn apologies(to: &str) -> u32 {
    APOLOGIES.lock().unwrap().get(to).copied().unwrap_or(0)
}

/// Sends the customer one apology e-mail for the step of the plan being carried out.
///
/// The text is the model's; the operation is the host's.
///
/// # Errors
///
/// When the mail provider refuses it.
#[side_effect(key = "step", json, destructive = false, open_world = true)]
async fn send_apology(step: OperationId, to: String, text: String) -> anyhow::Result<u32> {
    let _ = (step, text);
    let mut sent = APOLOGIES.lock().unwrap();
    let count = sent.entry(to).or_default();
    *count += 1;
    Ok(*count)
}

fn apology() -> String {
    json!({"to": "ada@example.com", "text": "Sorry about the delay."}).to_string()
}

/// A model turn of the host: the tool call runs as the plan step the host is carrying out.
async fn turn(
    idem: &Idem,
    tools: &JsonTools,
    step: &str,
    args: &str,
) -> Result<Value, JsonCallError> {
    let call = tools.call("send_apology", args);
    let reply = idem.scope(operation_scope(step.to_owned(), call)).await?;
    Ok(
        json!({"value": reply.value, "replayed": reply.replayed(), "key": reply.key().map(|k| k.to_string())}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue33_1_a_retried_model_turn_sends_once_and_after_a_restart_of_the_agent_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let tools = JsonTools::only(["send_apology"]).unwrap();

    // The model is not asked for the operation: the schema has the model's fields only.
    let definition = &tools.definitions()[0];
    assert_eq!(
        definition.parameters["required"],
        json!(["to", "text"]),
        "{}",
        definition.parameters
    );
    assert!(definition.parameters["properties"].get("step").is_none());

    let first = {
        let idem = Idem::new(SqliteStore::open(&path).unwrap());
        // Turn 1: the tool call's reply is lost; the host retries the turn (a new tool_call_id,
        // the same plan step).
        let first = turn(&idem, &tools, "plan-42/step-3", &apology())
            .await
            .unwrap();
        let again = turn(&idem, &tools, "plan-42/step-3", &apology())
            .await
            .unwrap();
        assert_eq!(again["value"], 1, "sent once: {again}");
        assert_eq!(again["replayed"], true);
        assert_eq!(again["key"], first["key"]);
        // The model wording the mail otherwise on the retried turn is refused, not sent.
        let reworded = json!({"to": "ada@example.com", "text": "Apologies!"}).to_string();
        let refused = turn(&idem, &tools, "plan-42/step-3", &reworded)
            .await
            .unwrap_err();
        let JsonCallError::Failed { explanation, .. } = &refused else {
            panic!("{refused:?}")
        };
        assert_eq!(explanation.reason, "key_reuse", "{refused}");
        // The next step is another operation: sent.
        let next = turn(&idem, &tools, "plan-42/step-4", &apology())
            .await
            .unwrap();
        assert_eq!(next["value"], 2);
        first
    };
    assert_eq!(apologies("ada@example.com"), 2);

    // The agent process restarts: the store is opened again, the host resumes step 3.
    let idem = Idem::new(SqliteStore::open(&path).unwrap());
    let resumed = turn(&idem, &tools, "plan-42/step-3", &apology())
        .await
        .unwrap();
    assert_eq!(resumed["replayed"], true, "{resumed}");
    assert_eq!(resumed["key"], first["key"]);
    assert_eq!(
        apologies("ada@example.com"),
        2,
        "not sent again after the restart"
    );

    // The key is the operation's: what `idemkit key --operation plan-42/step-3` prints.
    let step = idem.operation("plan-42/step-3").await.unwrap();
    let key = idemkit::IdempotencyKey::derive("send_apology", &[("step", &step)]);
    assert_eq!(resumed["key"], key.as_str());

    // Without an operation named by the host, nothing is sent, and the model is told why.
    let err = idem
        .scope(tools.call("send_apology", &apology()))
        .await
        .unwrap_err();
    let JsonCallError::Failed {
        message,
        explanation,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(explanation.reason, "no_operation", "{err}");
    assert!(message.contains("operation_scope"), "{message}");
    assert_eq!(apologies("ada@example.com"), 2);
}

/// A client of `server`, in this process (over an in-memory pipe).
async fn client_of<S: rmcp::Service<rmcp::RoleServer>>(
    server: S,
) -> RunningService<RoleClient, ()> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_io)
        .await
        .expect("the MCP handshake with the server")
}

fn mcp_call(
    name: &'static str,
    arguments: Value,
    operation: Option<&str>,
) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    let mut call = CallToolRequestParams::new(name).with_arguments(arguments);
    if let Some(op) = operation {
        let mut meta = RequestMetaObject::default();
        meta.insert(OPERATION_META.to_owned(), json!(op));
        call.meta = Some(meta);
    }
    call
}

fn structured(out: &CallToolResult) -> Value {
    out.structured_content.clone().expect("structured content")
}

static REFUNDS: AtomicU32 = AtomicU32::new(0);

/// Refunds an order at most once, returning the refund's number.
///
/// See [the refund policy](crate::policy) and [`Receipt`].
///
/// # Errors
///
/// When the order does not exist.
#[side_effect(key = "order_id", name = "support.refund", json, destructive = true)]
async fn refund(order_id: String, cents: u64) -> anyhow::Result<u32> {
    if order_id == "ord_missing" {
        anyhow::bail!(Failure::Permanent.to(format!("no order {order_id}")));
    }
    let _ = cents;
    Ok(REFUNDS.fetch_add(1, Ordering::SeqCst) + 1)
}

/// An order's status.
#[read_only(json)]
async fn order_status(
    order_id: String,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    Ok(format!("{order_id}: shipped"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue33_2_one_json_tool_is_an_mcp_tool_with_one_name_one_description_and_one_record() {
    let idem = Idem::new(MemoryStore::new());
    let tools = JsonTools::only(["support.refund", "order_status", "send_apology"]).unwrap();
    let client = client_of(JsonToolsServer::new(tools.clone()).idem(idem.clone())).await;

    let listed = client.list_all_tools().await.unwrap();
    let refund_tool = listed.iter().find(|t| t.name == "support.refund").unwrap();
    let json_def = tools
        .definitions()
        .into_iter()
        .find(|d| d.name == "support.refund")
        .unwrap();
    let description = "Refunds an order at most once, returning the refund's number.\n\nSee the refund policy and Receipt.";
    assert_eq!(refund_tool.description.as_deref(), Some(description));
    assert_eq!(
        json_def.description, description,
        "the same text on both surfaces"
    );
    assert_eq!(
        serde_json::to_value(&refund_tool.input_schema).unwrap(),
        json_def.parameters
    );
    let hints = refund_tool.annotations.as_ref().unwrap();
    assert_eq!(
        (
            hints.read_only_hint,
            hints.idempotent_hint,
            hints.destructive_hint
        ),
        (Some(false), Some(true), Some(true))
    );
    let status = listed.iter().find(|t| t.name == "order_status").unwrap();
    assert_eq!(
        status.annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );

    // One record: called over MCP, then by JSON function calling, it ran once.
    let out = client
        .call_tool(mcp_call(
            "support.refund",
            json!({"order_id": "ord_1", "cents": 500}),
            None,
        ))
        .await
        .unwrap();
    assert_eq!(out.is_error, Some(false), "{out:?}");
    let first = structured(&out);
    assert_eq!(first["result"], 1);
    let reply = idem
        .scope(tools.call("support.refund", r#"{"order_id": "ord_1", "cents": 500}"#))
        .await
        .unwrap();
    assert!(reply.replayed());
    assert_eq!(reply.value, 1);
    assert_eq!(reply.key().unwrap().as_str(), first["idempotencyKey"]);
    assert_eq!(REFUNDS.load(Ordering::SeqCst), 1);

    // anyhow's error, as an MCP tool error.
    let missing = client
        .call_tool(mcp_call(
            "support.refund",
            json!({"order_id": "ord_missing", "cents": 1}),
            None,
        ))
        .await
        .unwrap();
    assert_eq!(missing.is_error, Some(true));
    assert_eq!(structured(&missing)["error"], "no order ord_missing");

    // The operation a host names in the request's `_meta`: a retried request acts once.
    let args = json!({"to": "bob@example.com", "text": "Sorry."});
    let sent = client
        .call_tool(mcp_call("send_apology", args.clone(), Some("ticket-7")))
        .await
        .unwrap();
    let again = client
        .call_tool(mcp_call("send_apology", args.clone(), Some("ticket-7")))
        .await
        .unwrap();
    assert_eq!(structured(&again)["replayed"], true, "{again:?}");
    assert_eq!(structured(&again)["result"], structured(&sent)["result"]);
    assert_eq!(apologies("bob@example.com"), 1);
    let step = idem.operation("ticket-7").await.unwrap();
    let key = idemkit::IdempotencyKey::derive("send_apology", &[("step", &step)]);
    assert_eq!(structured(&sent)["idempotencyKey"], key.as_str());
    // Without one, refused as the model can read it.
    let unnamed = client
        .call_tool(mcp_call("send_apology", args, None))
        .await
        .unwrap();
    assert_eq!(
        structured(&unnamed)["reason"],
        "no_operation",
        "{unnamed:?}"
    );
    // S29: an empty operation is refused saying the bound, not one operation for all such calls.
    let empty = client
        .call_tool(mcp_call(
            "send_apology",
            json!({"to": "bob@example.com", "text": "Sorry."}),
            Some(""),
        ))
        .await
        .unwrap();
    assert_eq!(structured(&empty)["reason"], "settings", "{empty:?}");
    assert!(
        structured(&empty)["error"]
            .as_str()
            .unwrap()
            .contains("1 to 512 bytes"),
        "{empty:?}"
    );
    assert_eq!(apologies("bob@example.com"), 1, "not sent");
    // Issue 39 #7: the client is told what to send, not Rust advice.
    let error = structured(&unnamed)["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains(r#""_meta": {"idemkit/operation": "#) && !error.contains("operation_scope"),
        "{error}"
    );
    client.cancel().await.unwrap();
}

/// An order.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct OrderReq {
    /// The order, e.g. "ord_1".
    order_id: String,
    /// How much, in cents.
    cents: u64,
}

/// MCP tools whose errors are anyhow's and boxed ones.
struct Support {
    idem: Idem,
    runs: AtomicU32,
}

#[classified_tools]
#[tool_router]
impl Support {
    /// Cancels an order once.
    ///
    /// # Errors
    ///
    /// When the order is already shipped.
    #[side_effect(key = "req.order_id", idem = self.idem, destructive = true)]
    #[tool]
    async fn cancel(&self, req: Parameters<OrderReq>) -> anyhow::Result<u32> {
        if req.0.order_id == "ord_shipped" {
            anyhow::bail!(Failure::Permanent.to(format!("order {} has shipped", req.0.order_id)));
        }
        Ok(self.runs.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// The order's status, this time with a boxed error.
    #[read_only]
    #[tool]
    async fn status(
        &self,
        req: Parameters<OrderReq>,
    ) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        if req.0.order_id == "ord_missing" {
            return Err(Failure::Permanent.to("no such order").into());
        }
        Ok("shipped".to_owned())
    }
}

#[tool_handler]
impl ServerHandler for Support {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue33_3_anyhow_and_boxed_errors_are_mcp_tool_errors_that_name_their_reason() {
    let client = client_of(Support {
        idem: Idem::new(MemoryStore::new()),
        runs: AtomicU32::new(0),
    })
    .await;
    let listed = client.list_all_tools().await.unwrap();
    let cancel = listed.iter().find(|t| t.name == "cancel").unwrap();
    assert_eq!(
        cancel.description.as_deref(),
        Some("Cancels an order once.")
    );

    let args = json!({"order_id": "ord_1", "cents": 100});
    let out = client
        .call_tool(mcp_call("cancel", args, None))
        .await
        .unwrap();
    assert_eq!(structured(&out)["result"], 1, "{out:?}");
    // The same key with another amount: idemkit's error inside anyhow's, found in its chain.
    let reused = client
        .call_tool(mcp_call(
            "cancel",
            json!({"order_id": "ord_1", "cents": 900}),
            None,
        ))
        .await
        .unwrap();
    assert_eq!(reused.is_error, Some(true));
    assert_eq!(structured(&reused)["reason"], "key_reuse", "{reused:?}");
    let shipped = client
        .call_tool(mcp_call(
            "cancel",
            json!({"order_id": "ord_shipped", "cents": 1}),
            None,
        ))
        .await
        .unwrap();
    assert_eq!(
        structured(&shipped)["error"],
        "order ord_shipped has shipped"
    );

    let missing = client
        .call_tool(mcp_call(
            "status",
            json!({"order_id": "ord_missing", "cents": 0}),
            None,
        ))
        .await
        .unwrap();
    assert_eq!(missing.is_error, Some(true));
    assert_eq!(structured(&missing)["error"], "no such order");
    client.cancel().await.unwrap();
}

/// A rig tool failing with anyhow.
struct Cancel {
    idem: Idem,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CancelArgs {
    order_id: String,
    cents: u64,
}

impl PortableTool for Cancel {
    const NAME: &'static str = "cancel_order";
    type Args = CancelArgs;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Cancels an order once.".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"order_id": {"type": "string"}, "cents": {"type": "integer"}}})
    }

    #[side_effect(key = "args.order_id", rig, idem = self.idem)]
    async fn call(&self, args: CancelArgs) -> anyhow::Result<String> {
        if args.order_id == "ord_shipped" {
            anyhow::bail!(Failure::Permanent.to(format!("order {} has shipped", args.order_id)));
        }
        Ok(format!("cancelled {}", args.order_id))
    }
}

#[tokio::test]
async fn issue33_3_anyhow_errors_are_rig_tool_errors_that_name_their_reason() {
    let cancel = Cancel {
        idem: Idem::new(MemoryStore::new()),
    };
    let args = |order_id: &str, cents| CancelArgs {
        order_id: order_id.into(),
        cents,
    };
    let ok = cancel.call(args("ord_1", 100)).await.unwrap();
    assert_eq!(ok.as_json().unwrap()["result"], "cancelled ord_1");
    let reused = cancel.call(args("ord_1", 900)).await.unwrap_err();
    assert_eq!(reused.code(), Some("key_reuse"), "{reused:?}");
    let shipped = cancel.call(args("ord_shipped", 1)).await.unwrap_err();
    assert_eq!(shipped.to_string(), "order ord_shipped has shipped");
    assert_ne!(shipped.retryable(), Some(true));
}

/// The JSON tool's own description (issue 33: the MCP method's used to be sent).
#[read_only(json)]
async fn track(order_id: String) -> anyhow::Result<String> {
    Ok(order_id)
}

struct Tracking;

#[tool_router]
impl Tracking {
    /// MCP's own text for its `track`.
    #[read_only]
    #[tool]
    async fn track(&self, req: Parameters<OrderReq>) -> anyhow::Result<String> {
        Ok(req.0.order_id)
    }
}

#[test]
fn issue33_2_a_json_tool_is_described_by_its_own_doc_when_an_mcp_method_shares_its_name() {
    let tools = JsonTools::only(["track"]).unwrap();
    let definition = &tools.definitions()[0];
    assert_eq!(
        definition.description,
        "The JSON tool's own description (issue 33: the MCP method's used to be sent)."
    );
    assert_eq!(definition.kind, ToolKind::ReadOnly);
    assert_eq!(Tracking::tool_router().list_all().len(), 1);
}

/// Issue 33 #4: the README's error pattern is small enough for clippy's `result_large_err`.
#[test]
fn issue33_4_idemkit_error_is_under_result_large_errs_threshold() {
    assert!(
        std::mem::size_of::<Error>() < 128,
        "{}",
        std::mem::size_of::<Error>()
    );
}

/// Issue 33 #8: the manifest `idemkit key --check` reads: each tool's key fields in key order,
/// with their Rust types and the kinds the key encodes them as.
#[test]
fn issue33_8_the_tools_manifest_names_each_key_field_in_order_with_its_type() {
    let manifest: Value = serde_json::from_str(&idemkit::tools_manifest()).unwrap();
    assert_eq!(manifest["version"], 1);
    let tool = |name: &str| -> Value {
        manifest["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {manifest}"))
            .clone()
    };
    assert_eq!(
        tool("send_apology")["key_fields"],
        json!([{"name": "step", "type": "idem_runtime::key::operation::OperationId", "kind": "uuid"}])
    );
    assert_eq!(
        tool("support.refund")["key_fields"],
        json!([{"name": "order_id", "type": "alloc::string::String", "kind": "text"}])
    );
    // A field of an MCP request, read through rmcp's `Parameters`.
    assert_eq!(tool("cancel")["key_fields"][0]["kind"], "text");
    assert_eq!(tool("order_status")["kind"], "read_only");
}

/// An rmcp tool method keyed on the operation the host names.
struct Mailer {
    idem: Idem,
    sent: AtomicU32,
}

/// Where a follow-up goes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct FollowUp {
    /// The customer's address.
    to: String,
}

#[classified_tools]
#[tool_router]
impl Mailer {
    /// Sends the customer one follow-up for the ticket being worked on.
    #[side_effect(key = "ticket", idem = self.idem)]
    #[tool]
    async fn follow_up(
        &self,
        ticket: OperationId,
        req: Parameters<FollowUp>,
    ) -> anyhow::Result<u32> {
        let _ = (ticket, req);
        Ok(self.sent.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

#[tool_handler]
impl ServerHandler for Mailer {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue33_1_an_mcp_tool_method_keyed_on_the_hosts_operation_acts_once_per_operation() {
    let idem = Idem::new(MemoryStore::new());
    let client = client_of(idemkit::mcp::Operations::new(Mailer {
        idem: idem.clone(),
        sent: AtomicU32::new(0),
    }))
    .await;
    let listed = client.list_all_tools().await.unwrap();
    let schema = serde_json::to_value(&listed[0].input_schema).unwrap();
    assert!(schema["properties"].get("ticket").is_none(), "{schema}");
    assert_eq!(schema["required"], json!(["to"]));

    let args = json!({"to": "ada@example.com"});
    let first = client
        .call_tool(mcp_call("follow_up", args.clone(), Some("ticket-7")))
        .await
        .unwrap();
    // The model's turn again (a new request, the same ticket): replayed, not sent again.
    let again = client
        .call_tool(mcp_call("follow_up", args.clone(), Some("ticket-7")))
        .await
        .unwrap();
    assert_eq!(structured(&first)["result"], 1, "{first:?}");
    assert_eq!(structured(&again)["replayed"], true, "{again:?}");
    let ticket = idem.operation("ticket-7").await.unwrap();
    let key = idemkit::IdempotencyKey::derive("follow_up", &[("ticket", &ticket)]);
    assert_eq!(structured(&again)["idempotencyKey"], key.as_str());
    let other = client
        .call_tool(mcp_call("follow_up", args.clone(), Some("ticket-8")))
        .await
        .unwrap();
    assert_eq!(structured(&other)["result"], 2);
    let unnamed = client
        .call_tool(mcp_call("follow_up", args, None))
        .await
        .unwrap();
    assert_eq!(
        structured(&unnamed)["reason"],
        "no_operation",
        "{unnamed:?}"
    );
    let error = structured(&unnamed)["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains(r#""_meta": {"idemkit/operation": "#) && !error.contains("operation_scope"),
        "{error}"
    );
    client.cancel().await.unwrap();
}
