//! An agent's side of MCP: the payment tools of an MCP server it did not write (here the
//! `mcp_server` example's, served in this process over an in-memory pipe, as if it ran
//! elsewhere), called through `idemkit::mcp::IdempotentClient`. Shared by the `mcp_client`
//! example and its test.
#![allow(dead_code)]

use fake_provider::FakeProvider;
use idemkit::mcp::{IdempotentClient, RemoteTool};
use idemkit::{Idem, store::MemoryStore};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::mcp::Payments;

/// What the agent saw, for people (the example prints it) and for its test.
#[derive(Debug)]
pub struct Seen {
    /// Charges the provider committed.
    pub charged: usize,
    /// Whether the repeat of the charge was answered from the agent's record.
    pub repeat_replayed: bool,
    /// The key the charge went under (sent to the server in `_meta`).
    pub key: String,
    /// `balance`, read-only by the server's word: sent as it is.
    pub balance_keyed: bool,
    /// What the agent is told of `refund`, which it did not configure.
    pub refund_refused: String,
    /// What the run printed.
    pub log: Vec<String>,
}

fn call(tool: &'static str, args: Value) -> CallToolRequestParams {
    let Value::Object(args) = args else {
        unreachable!("arguments are an object")
    };
    CallToolRequestParams::new(tool).with_arguments(args)
}

/// Runs the agent's calls against the server over a provider on loopback.
pub async fn run() -> Result<Seen, Box<dyn std::error::Error>> {
    let provider = FakeProvider::start().await?;
    // The server someone else runs, with its own store.
    let (agent_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = Payments::with_idem(provider.base_url(), Idem::new(MemoryStore::new()));
    let serving = tokio::spawn(server.serve(server_io));
    let connection = ().serve(agent_io).await?;
    let _server = serving.await??;

    // The agent's side: its own store, and what it knows of the tools it calls.
    let payments = IdempotentClient::new(connection.peer().clone())
        .idem(Idem::new(MemoryStore::new()))
        // This program also defines a `charge` (the server's, in process): a name of its own.
        .tool(
            "charge",
            RemoteTool::keyed(["customer_id", "purpose", "period"]).key_name("payments/charge"),
        );
    let mut log = Vec::new();

    let args = json!({"customer_id": "cus_1", "purpose": "subscription", "period": "2026-11", "amount_cents": 4200});
    let first = payments.call_tool(call("charge", args.clone())).await?;
    // The model's turn is retried (its answer was lost on the way to the model): the same call.
    let repeat = payments.call_tool(call("charge", args)).await?;
    let key = first.key.map(|k| k.to_string()).unwrap_or_default();
    log.push(format!(
        "charge: sent under key {key} (in `_meta`), replayed: {}",
        first.replayed
    ));
    log.push(format!(
        "charge again: replayed: {} (not sent)",
        repeat.replayed
    ));

    let balance = payments
        .call_tool(call("balance", json!({"customer_id": "cus_1"})))
        .await?;
    log.push(format!(
        "balance: read-only by the server's annotations, sent as it is (key: {:?})",
        balance.key
    ));

    let refund_refused = match payments
        .call_tool(call("refund", json!({"charge_id": "ch_1"})))
        .await
    {
        Ok(_) => "sent".to_owned(),
        Err(e) => e.to_string(),
    };
    log.push(format!("refund: {refund_refused}"));

    Ok(Seen {
        charged: provider.count("charges"),
        repeat_replayed: repeat.replayed,
        key,
        balance_keyed: balance.key.is_some(),
        refund_refused,
        log,
    })
}
