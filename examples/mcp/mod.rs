//! An MCP server of payment tools, written the way the README's "MCP servers (rmcp)" section
//! teaches: each rmcp `#[tool]` is classified by `#[side_effect]` or `#[read_only]` written above
//! it, and `#[classified_tools]` makes an unclassified tool a compile error. Shared by the
//! `mcp_server` example and its test.
#![allow(dead_code)]

use std::time::Duration;

use fake_provider::{Client, FakeProvider};
use idemkit::{Idem, IdempotencyKey, classified_tools, read_only, side_effect, store::MemoryStore};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::schemars::JsonSchema;
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::json;

// The payment types only: the agent's module would bring its tools, of the same names (S21).
#[path = "../agent/pay.rs"]
mod pay;
pub use pay::{PayError, Receipt};

/// The provider's base URL; without it the server starts a fake provider of its own on loopback.
pub const PROVIDER_ENV: &str = "IDEMKIT_MCP_PROVIDER";

/// Charge a customer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ChargeReq {
    /// The customer to charge, e.g. "cus_1".
    pub customer_id: String,
    /// What the charge is for, e.g. "subscription".
    pub purpose: String,
    /// The period it covers, e.g. "2026-11".
    pub period: String,
    /// The amount in cents.
    pub amount_cents: u64,
}

/// Refund a charge.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RefundReq {
    /// The charge to refund, as `charge` returned it.
    pub charge_id: String,
    /// The amount in cents.
    pub amount_cents: u64,
}

/// Email the receipt of a charge.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ReceiptReq {
    /// The charge whose receipt to send.
    pub charge_id: String,
    /// Where to send it.
    pub email: String,
}

/// Read a customer's balance.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct BalanceReq {
    /// The customer.
    pub customer_id: String,
}

/// The payment tools, over one provider and one idemkit runtime.
pub struct Payments {
    client: Client,
    /// Where outcomes are recorded. A memory store lives as long as the server; a real server
    /// would open a `SqliteStore` (one machine) or a PostgreSQL/Redis store (many).
    idem: Idem,
}

#[classified_tools]
#[tool_router]
impl Payments {
    /// A server of the provider at `base`.
    pub fn new(base: String) -> Self {
        Self::with_idem(base, Idem::new(MemoryStore::new()))
    }

    /// A server of the provider at `base` recording in `idem`: the servers of many connections
    /// share one runtime, so one store.
    pub fn with_idem(base: String, idem: Idem) -> Self {
        Payments {
            client: Client::new(base, Duration::from_secs(2)),
            idem,
        }
    }

    /// Charge a customer, once per customer, purpose and period: calling again with the same
    /// arguments returns the first charge instead of charging again.
    #[side_effect(key = "req.customer_id, req.purpose, req.period", idem = self.idem, destructive = false)]
    #[tool]
    async fn charge(
        &self,
        key: &IdempotencyKey,
        req: Parameters<ChargeReq>,
    ) -> Result<Receipt, PayError> {
        let Parameters(req) = req;
        let body = json!({"customer": req.customer_id, "purpose": req.purpose, "period": req.period, "amount_cents": req.amount_cents});
        let answer = self
            .client
            .post("charges", Some(key.as_str()), &body)
            .await?;
        Ok(Receipt {
            charge_id: answer.body["id"].as_str().unwrap_or_default().to_owned(),
            key: key.to_string(),
        })
    }

    /// Refund a charge, at most once per charge.
    #[side_effect(key = "charge_id", idem = self.idem, destructive = true)]
    #[tool]
    async fn refund(
        &self,
        key: &IdempotencyKey,
        Parameters(RefundReq {
            charge_id,
            amount_cents,
        }): Parameters<RefundReq>,
    ) -> Result<String, PayError> {
        let body = json!({"charge": charge_id, "amount_cents": amount_cents});
        let answer = self
            .client
            .post("refunds", Some(key.as_str()), &body)
            .await?;
        Ok(answer.body["id"].as_str().unwrap_or_default().to_owned())
    }

    /// Email the receipt of a charge, once per charge.
    #[side_effect(key = "charge_id", idem = self.idem, destructive = false)]
    #[tool(name = "send_receipt")]
    async fn send_receipt(
        &self,
        key: &IdempotencyKey,
        Parameters(ReceiptReq { charge_id, email }): Parameters<ReceiptReq>,
    ) -> Result<String, PayError> {
        let body = json!({"charge": charge_id, "to": email});
        let answer = self
            .client
            .post("emails", Some(key.as_str()), &body)
            .await?;
        Ok(answer.body["id"].as_str().unwrap_or_default().to_owned())
    }

    /// A customer's charged cents. A read: retried freely, never recorded.
    #[read_only]
    #[tool(annotations(title = "Customer balance"))]
    async fn balance(
        &self,
        Parameters(BalanceReq { customer_id }): Parameters<BalanceReq>,
    ) -> Result<u64, PayError> {
        Ok(self.client.balance(&customer_id).await?)
    }
}

#[tool_handler(
    name = "idemkit-payments",
    instructions = "Payment tools. Calling a write tool again with the same arguments is safe: it returns the first result (marked \"replayed\") and does not act twice."
)]
impl ServerHandler for Payments {}

/// Serves the tools over stdio until the client closes it. The provider is the one at
/// `$IDEMKIT_MCP_PROVIDER`, or a fake one started here on loopback.
pub async fn serve_stdio() -> Result<(), Box<dyn std::error::Error>> {
    let (own_provider, base) = match std::env::var(PROVIDER_ENV) {
        Ok(base) => (None, base),
        Err(_) => {
            let provider = FakeProvider::start().await?;
            let base = provider.base_url();
            (Some(provider), base)
        }
    };
    // stdout carries the protocol; anything for people goes to stderr.
    eprintln!("idemkit MCP server: tools over stdio, provider at {base}");
    let running = Payments::new(base).serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    drop(own_provider);
    Ok(())
}
