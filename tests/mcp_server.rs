//! The MCP example server, driven over stdio by rmcp's own client: the tool list carries the
//! annotations the attributes imply; a repeated `charge` charges once and says it was replayed;
//! the same key fields with another amount get a tool error that explains the reuse.
//!
//! Two clients of one server (one store, one provider) over TCP, each request under the tenant
//! of its client ([`Tenanted`]): equal arguments are charged once per client, and each client is
//! replayed only its own receipt.
//!
//! What the model is told when an attempt may have acted (issue 30 #5, S20) and when an
//! outcome cannot be replayed: through an in-process server of tools that fail so.
//!
//! The server is this test binary itself, started again as a child (`mcp_server_entry`), so it
//! runs the example's code without building the example. `--nocapture` prints the `tools/list`.
#![cfg(feature = "rmcp")]

#[path = "../examples/mcp/mod.rs"]
mod mcp;

use std::sync::atomic::{AtomicU32, Ordering};

use fake_provider::FakeProvider;
use idemkit::mcp::Tenanted;
use idemkit::{
    Classify, Failure, Idem, IdempotencyKey, MemoryStore, classified_tools, side_effect,
};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, Tool,
};
use rmcp::schemars::JsonSchema;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

const SERVE: &str = "IDEMKIT_MCP_SERVE";

/// The server, when the test below starts this binary as one.
#[tokio::test]
async fn mcp_server_entry() {
    if std::env::var_os(SERVE).is_some() {
        let code = match mcp::serve_stdio().await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("mcp server: {e}");
                1
            }
        };
        std::process::exit(code);
    }
}

/// Starts the server as a child of this test, with the provider at `provider`.
async fn start_server(provider: &FakeProvider) -> RunningService<RoleClient, ()> {
    let mut command = tokio::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "mcp_server_entry",
            "--exact",
            // Terse: the harness writes nothing on stdout before the test ends (stdout is the protocol).
            "--quiet",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SERVE, "1")
        .env(mcp::PROVIDER_ENV, provider.base_url());
    let transport = TokioChildProcess::new(command).expect("the server starts");
    ().serve(transport)
        .await
        .expect("the MCP handshake with the server")
}

fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

fn texts(result: &CallToolResult) -> Vec<String> {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

fn annotations(tools: &[Tool], name: &str) -> Value {
    let tool = tools
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tool `{name}`"));
    serde_json::to_value(&tool.annotations).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_carries_derived_annotations_and_a_repeated_charge_is_replayed() {
    let provider = FakeProvider::start().await.unwrap();
    let client = start_server(&provider).await;

    let tools = client.list_all_tools().await.unwrap();
    println!(
        "tools/list:\n{}",
        serde_json::to_string_pretty(&json!({ "tools": tools })).unwrap()
    );
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort();
    assert_eq!(names, ["balance", "charge", "refund", "send_receipt"]);
    assert_eq!(
        annotations(&tools, "balance"),
        json!({"title": "Customer balance", "readOnlyHint": true})
    );
    assert_eq!(
        annotations(&tools, "charge"),
        json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true})
    );
    assert_eq!(
        annotations(&tools, "refund"),
        json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true})
    );
    assert_eq!(
        annotations(&tools, "send_receipt"),
        json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true})
    );

    // The same charge twice: one charge at the provider; the second result is the first one,
    // marked as a replay in the structured content and in the text the model reads first.
    let args = json!({"customer_id": "cus_1", "purpose": "subscription", "period": "2026-11", "amount_cents": 4200});
    let first = client
        .call_tool(call("charge", args.clone()))
        .await
        .unwrap();
    println!(
        "first charge:\n{}",
        serde_json::to_string_pretty(&first).unwrap()
    );
    assert_eq!(first.is_error, Some(false), "{first:?}");
    let first_out = first.structured_content.clone().unwrap();
    assert_eq!(first_out["replayed"], false);
    // The golden key of docs/protocol.md: tool `charge`, cus_1 / subscription / 2026-11.
    assert_eq!(
        first_out["idempotencyKey"],
        "32e00e40-1a53-8058-93c7-e9d1adc8ecaa"
    );
    assert_eq!(
        first_out["result"]["key"],
        "32e00e40-1a53-8058-93c7-e9d1adc8ecaa"
    );
    assert!(!texts(&first)[0].contains("Replayed"));

    let second = client
        .call_tool(call("charge", args.clone()))
        .await
        .unwrap();
    println!(
        "second charge:\n{}",
        serde_json::to_string_pretty(&second).unwrap()
    );
    assert_eq!(second.is_error, Some(false), "{second:?}");
    let second_out = second.structured_content.clone().unwrap();
    assert_eq!(second_out["replayed"], true);
    assert_eq!(second_out["result"], first_out["result"]);
    assert!(
        texts(&second)[0].starts_with("Replayed:"),
        "{:?}",
        texts(&second)
    );
    assert_eq!(provider.count("charges"), 1);

    // The same key fields with another amount: refused as a tool error, not run.
    let other = json!({"customer_id": "cus_1", "purpose": "subscription", "period": "2026-11", "amount_cents": 9900});
    let reused = client.call_tool(call("charge", other)).await.unwrap();
    println!(
        "same key fields, another amount:\n{}",
        serde_json::to_string_pretty(&reused).unwrap()
    );
    assert_eq!(reused.is_error, Some(true), "{reused:?}");
    let reused_out = reused.structured_content.clone().unwrap();
    assert_eq!(reused_out["reason"], "key_reuse");
    let explanation = &texts(&reused)[0];
    assert!(
        explanation.contains("customer_id, purpose, period")
            && explanation.contains("different arguments"),
        "{explanation}"
    );
    assert!(
        reused_out["error"]
            .as_str()
            .unwrap()
            .contains("different arguments")
    );
    assert_eq!(provider.count("charges"), 1);

    // A read goes straight through: the provider's balance is the one charge.
    let balance = client
        .call_tool(call("balance", json!({"customer_id": "cus_1"})))
        .await
        .unwrap();
    // S35: beside the result, the advice a read gets: ran, no key, calling again is safe.
    assert_eq!(
        balance.structured_content,
        Some(
            json!({"result": 4200, "advice": {"state": "ran", "reason": null, "sameKeySafe": true, "newKeySafe": true, "retryable": false, "retryAfterSeconds": null, "key": null}})
        )
    );

    // A destructured request keys and fingerprints the same way: refund once per charge.
    let charge_id = first_out["result"]["charge_id"].as_str().unwrap();
    let refund = json!({"charge_id": charge_id, "amount_cents": 4200});
    for _ in 0..2 {
        let out = client
            .call_tool(call("refund", refund.clone()))
            .await
            .unwrap();
        assert_eq!(out.is_error, Some(false), "{out:?}");
    }
    assert_eq!(provider.count("refunds"), 1);
    let partial = json!({"charge_id": charge_id, "amount_cents": 100});
    let out = client.call_tool(call("refund", partial)).await.unwrap();
    assert_eq!(out.is_error, Some(true));
    assert_eq!(out.structured_content.unwrap()["reason"], "key_reuse");

    client.cancel().await.unwrap();
}

/// Serves the payment tools on a loopback TCP port, one connection per client, every connection
/// recording in the one runtime `idem`; each request runs under the tenant of the client that
/// named itself in the handshake. Answers the port.
async fn serve_tcp(provider: &FakeProvider, idem: Idem) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let base = provider.base_url();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let tools = mcp::Payments::with_idem(base.clone(), idem.clone());
            let server = Tenanted::new(tools, |cx| cx.client_info().map(|client| client.name));
            tokio::spawn(async move {
                if let Ok(running) = server.serve(stream).await {
                    let _ = running.waiting().await;
                }
            });
        }
    });
    addr
}

/// A client named `name` (its identity in the handshake), connected over TCP.
async fn connect(
    addr: std::net::SocketAddr,
    name: &str,
) -> RunningService<RoleClient, ClientConfig> {
    let stream = TcpStream::connect(addr).await.unwrap();
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new(name, "1.0"),
    )
    .serve(stream)
    .await
    .expect("the MCP handshake with the server")
}

async fn charge(client: &RunningService<RoleClient, ClientConfig>, args: &Value) -> Value {
    let out = client
        .call_tool(call("charge", args.clone()))
        .await
        .unwrap();
    assert_eq!(out.is_error, Some(false), "{out:?}");
    out.structured_content.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_with_equal_arguments_are_each_charged_once_and_replayed_their_own_receipt() {
    let provider = FakeProvider::start().await.unwrap();
    let idem = Idem::new(MemoryStore::new());
    let addr = serve_tcp(&provider, idem).await;
    let acme = connect(addr, "acme").await;
    let globex = connect(addr, "globex").await;

    let args = json!({"customer_id": "cus_1", "purpose": "subscription", "period": "2026-11", "amount_cents": 4200});
    let golden = IdempotencyKey::derive(
        "charge",
        &[
            ("customer_id", &"cus_1"),
            ("purpose", &"subscription"),
            ("period", &"2026-11"),
        ],
    );

    // Each client's first charge runs, under its own key: two charges at the provider.
    let acme_first = charge(&acme, &args).await;
    let globex_first = charge(&globex, &args).await;
    assert_eq!(acme_first["replayed"], false);
    assert_eq!(globex_first["replayed"], false);
    // The scoped keys of S18 (acme's is the documented golden vector), which the provider got.
    assert_eq!(
        acme_first["idempotencyKey"],
        "6a1557d2-fe2a-83ea-9696-a86f7991dfbf"
    );
    assert_eq!(
        acme_first["result"]["key"],
        golden.for_tenant("acme").as_str()
    );
    assert_eq!(
        globex_first["result"]["key"],
        golden.for_tenant("globex").as_str()
    );
    assert_ne!(
        acme_first["result"]["charge_id"],
        globex_first["result"]["charge_id"]
    );
    assert_eq!(provider.count("charges"), 2);

    // A repeat by each client replays its own receipt, never the other's, and charges nobody.
    for _ in 0..2 {
        let acme_again = charge(&acme, &args).await;
        assert_eq!(acme_again["replayed"], true);
        assert_eq!(acme_again["result"], acme_first["result"]);
        let globex_again = charge(&globex, &args).await;
        assert_eq!(globex_again["replayed"], true);
        assert_eq!(globex_again["result"], globex_first["result"]);
    }
    assert_eq!(provider.count("charges"), 2);

    // A reconnecting client is the same tenant: replayed, not charged again.
    acme.cancel().await.unwrap();
    let acme = connect(addr, "acme").await;
    let acme_later = charge(&acme, &args).await;
    assert_eq!(acme_later["replayed"], true);
    assert_eq!(acme_later["result"], acme_first["result"]);
    assert_eq!(provider.count("charges"), 2);

    acme.cancel().await.unwrap();
    globex.cancel().await.unwrap();
}

/// What `reimburse` and `quote` fail with.
#[derive(Debug)]
enum FlakyError {
    /// Sent, no answer: it may have happened.
    Timeout,
    /// The provider said no.
    Declined,
    Idem(idemkit::Error),
}

impl std::fmt::Display for FlakyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FlakyError::Timeout => f.write_str("the provider did not answer in time"),
            FlakyError::Declined => f.write_str("declined"),
            FlakyError::Idem(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for FlakyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FlakyError::Idem(e) => Some(e),
            _ => None,
        }
    }
}

impl From<idemkit::Error> for FlakyError {
    fn from(e: idemkit::Error) -> Self {
        FlakyError::Idem(e)
    }
}

impl Classify for FlakyError {
    fn classify(&self) -> Failure {
        match self {
            FlakyError::Timeout => Failure::Ambiguous,
            FlakyError::Declined | FlakyError::Idem(_) => Failure::Permanent,
        }
    }
}

/// An order.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct OrderReq {
    /// The order, e.g. "ord_1".
    order_id: String,
}

/// Tools whose provider misbehaves, served in process.
struct Flaky {
    idem: Idem,
    runs: AtomicU32,
}

#[classified_tools]
#[tool_router]
impl Flaky {
    /// Reimburse an order: the provider times out on the first attempt (it may have
    /// reimbursed), then declines.
    #[side_effect(key = "req.order_id", idem = self.idem, destructive = true, max_attempts = 2)]
    #[tool]
    async fn reimburse(&self, req: Parameters<OrderReq>) -> Result<u64, FlakyError> {
        let _ = req;
        match self.runs.fetch_add(1, Ordering::SeqCst) {
            0 => Err(FlakyError::Timeout),
            _ => Err(FlakyError::Declined),
        }
    }

    /// Quote an order in an amount JSON cannot hold (NaN): done, and not replayable.
    #[side_effect(key = "req.order_id", idem = self.idem, destructive = false)]
    #[tool]
    async fn quote(&self, req: Parameters<OrderReq>) -> Result<f64, FlakyError> {
        let _ = req;
        Ok(f64::NAN)
    }
}

#[tool_handler]
impl ServerHandler for Flaky {}

/// A client of a [`Flaky`] server, in this process (over an in-memory pipe).
async fn flaky() -> RunningService<RoleClient, ()> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = Flaky {
        idem: Idem::new(MemoryStore::new()),
        runs: AtomicU32::new(0),
    };
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_io)
        .await
        .expect("the MCP handshake with the server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue30_5_s20_an_attempt_that_may_have_reimbursed_is_told_to_the_model_as_unknown_not_refused()
 {
    let client = flaky().await;
    let out = client
        .call_tool(call("reimburse", json!({"order_id": "ord_1"})))
        .await
        .unwrap();
    assert_eq!(out.is_error, Some(true), "{out:?}");
    let structured = out.structured_content.clone().unwrap();
    let key = IdempotencyKey::derive("reimburse", &[("order_id", &"ord_1")]);
    assert_eq!(structured["reason"], "ambiguous");
    assert_eq!(structured["retryable"], false);
    assert_eq!(structured["idempotencyKey"], key.as_str());
    let sentence = &texts(&out)[0];
    assert!(!sentence.contains("Not run"), "{sentence}");
    assert!(
        sentence.starts_with("Outcome unknown")
            && sentence.contains("may or may not")
            && sentence.contains("will not do it twice")
            && sentence.contains("`verify`")
            && sentence.contains(&format!("idemkit resolve {key} applied --outcome JSON"))
            && sentence.contains(&format!("idemkit resolve {key} not-applied")),
        "{sentence}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue30_5_an_outcome_that_cannot_be_replayed_is_told_to_the_model_as_done() {
    let client = flaky().await;
    let args = json!({"order_id": "ord_2"});
    let first = client.call_tool(call("quote", args.clone())).await.unwrap();
    assert_eq!(first.is_error, Some(false), "{first:?}");
    let again = client.call_tool(call("quote", args)).await.unwrap();
    assert_eq!(again.is_error, Some(true), "{again:?}");
    let structured = again.structured_content.clone().unwrap();
    assert_eq!(structured["reason"], "unreplayable");
    assert_eq!(structured["retryable"], false);
    let sentence = &texts(&again)[0];
    assert!(
        sentence.starts_with("Already done") && !sentence.contains("Not run"),
        "{sentence}"
    );
    client.cancel().await.unwrap();
}
