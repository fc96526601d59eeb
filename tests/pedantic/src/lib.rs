//! A toolset written the way an agent's crate writes it, under `clippy::pedantic`: if an
//! expansion of `#[side_effect]`, `#[read_only]` or `#[classified_tools]` triggers a lint a user
//! may enable, `cargo clippy -p idemkit-pedantic --all-features -- -D warnings` fails (`.ci/run`).
//! Nothing here allows a lint: every one that fires would be about code the attributes generate.
#![deny(warnings, clippy::all, clippy::pedantic)]

use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Context;
use idemkit::{
    Classify, Failure, Idem, IdempotencyKey, OperationId, Verified, classified_tools, read_only,
    side_effect,
};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_router};
use serde::{Deserialize, Serialize};

/// The tools' own error.
#[derive(Debug)]
pub enum PayError {
    /// The card was declined.
    Declined,
    /// No answer in time: the charge may have happened.
    Timeout,
    /// idemkit refused the call.
    Idem(idemkit::Error),
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Declined => f.write_str("declined"),
            PayError::Timeout => f.write_str("timed out"),
            PayError::Idem(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PayError {}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            PayError::Declined | PayError::Idem(_) => Failure::Permanent,
            PayError::Timeout => Failure::Ambiguous,
        }
    }
}

impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError::Idem(e)
    }
}

/// The crate-wide alias agent code often has.
pub type Result<T> = std::result::Result<T, PayError>;

/// What a charge returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The key the provider saw.
    pub key: String,
    /// The amount charged.
    pub cents: u64,
}

/// A tool's JSON arguments.
#[derive(Debug, Clone, Serialize, Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ChargeReq {
    /// The customer.
    pub customer_id: String,
    /// The period charged.
    pub period: String,
    /// The amount.
    pub cents: u64,
}

/// Charges once per customer, purpose and period (several key fields, one argument
/// fingerprinted, the injected key).
///
/// # Errors
///
/// When the provider declines, or idemkit refuses the call.
#[side_effect(key = "customer_id, purpose, period", max_attempts = 3, lease = "30s")]
pub async fn charge(
    key: &IdempotencyKey,
    customer_id: &str,
    purpose: &str,
    period: &str,
    cents: u64,
) -> Result<Receipt> {
    if customer_id.is_empty() || purpose.is_empty() || period.is_empty() {
        return Err(PayError::Declined);
    }
    Ok(Receipt {
        key: key.to_string(),
        cents,
    })
}

/// Charges once per customer and period, keyed on fields of its JSON arguments, with anyhow.
///
/// # Errors
///
/// When there is nothing to charge.
#[side_effect(key = "req.customer_id, req.period", name = "payments.charge_request")]
pub async fn charge_request(key: &IdempotencyKey, req: ChargeReq) -> anyhow::Result<Receipt> {
    anyhow::ensure!(req.cents > 0, "nothing to charge");
    // A lost response may have charged: say so, and the retry keeps the key.
    let cents = provider_charge(key, &req).context(Failure::Ambiguous)?;
    Ok(Receipt {
        key: key.to_string(),
        cents,
    })
}

/// The provider's answer to a charge request.
fn provider_charge(_key: &IdempotencyKey, req: &ChargeReq) -> std::io::Result<u64> {
    if req.cents > 1_000_000 {
        return Err(std::io::Error::other("over the limit"));
    }
    Ok(req.cents)
}

/// Books once per guest name, whichever Unicode form a model wrote it in.
///
/// # Errors
///
/// Never, but a tool's signature says it may.
#[side_effect(key = "nfc_fold(guest), night")]
pub async fn book(guest: &str, night: u32) -> anyhow::Result<String> {
    if guest.is_empty() {
        anyhow::bail!("no guest");
    }
    Ok(format!("booked night {night}"))
}

/// Sends one email per operation (a key with no natural identity).
///
/// # Errors
///
/// `Box<dyn Error>`, as some agent code returns.
#[side_effect(key = "operation")]
pub async fn send_email(
    operation: OperationId,
    to: String,
) -> std::result::Result<usize, Box<dyn std::error::Error + Send + Sync>> {
    Ok(to.len())
}

/// Texts an order's customer once; the gateway does not deduplicate, so it is asked before
/// anything is sent again.
///
/// # Errors
///
/// When the gateway times out.
#[side_effect(key = "order_id", verify = sms_sent)]
pub async fn send_sms(order_id: u64, to: String, text: &str) -> Result<u32> {
    if to.is_empty() || text.is_empty() {
        return Err(PayError::Timeout);
    }
    Ok(u32::try_from(order_id % 1000).unwrap_or(0))
}

/// Whether an order's text went out, from the gateway's log.
///
/// # Errors
///
/// When the log cannot be read.
pub async fn sms_sent(order_id: u64, to: String, text: &str) -> Result<Verified<u32>> {
    let logged = std::future::ready((order_id, to, text.len())).await;
    Ok(match logged {
        (0, ..) => Verified::NotApplied,
        (_, to, len) if to.is_empty() || len == 0 => Verified::Unknown,
        (order_id, ..) => Verified::Applied(u32::try_from(order_id % 1000).unwrap_or(0)),
    })
}

/// Reads a balance, retried freely.
///
/// # Errors
///
/// When the provider times out.
#[read_only(max_attempts = 2)]
#[tracing::instrument]
pub async fn balance(customer_id: &str) -> Result<u64> {
    if customer_id.is_empty() {
        return Err(PayError::Timeout);
    }
    Ok(4200)
}

/// Issue 33: the README's error pattern, `Idem(idemkit::Error)` beside the tool's own cases, as
/// the error of a public tool: clean under clippy's default `result_large_err` (idemkit's error
/// is under its 128 bytes).
#[derive(Debug)]
pub enum SupportError {
    /// No such order.
    NotFound(String),
    /// idemkit refused the call.
    Idem(idemkit::Error),
}

impl std::fmt::Display for SupportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SupportError::NotFound(order) => write!(f, "no order {order}"),
            SupportError::Idem(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SupportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SupportError::NotFound(_) => None,
            SupportError::Idem(e) => Some(e),
        }
    }
}

impl Classify for SupportError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<idemkit::Error> for SupportError {
    fn from(e: idemkit::Error) -> Self {
        SupportError::Idem(e)
    }
}

/// Refunds an order once, for the model (JSON function calling and MCP alike).
///
/// # Errors
///
/// When the order does not exist, or idemkit refuses the call.
#[side_effect(key = "order_id", json, destructive = true)]
pub async fn refund_order(order_id: String, cents: u64) -> std::result::Result<u64, SupportError> {
    if order_id.is_empty() {
        return Err(SupportError::NotFound(order_id));
    }
    Ok(cents)
}

/// Sends the customer one apology for the plan step the host is carrying out (its
/// `OperationId`, which the model neither sees nor sends).
///
/// # Errors
///
/// When idemkit refuses the call.
#[side_effect(key = "step", json)]
pub async fn send_apology(step: OperationId, to: String) -> anyhow::Result<String> {
    Ok(format!("{to}: sorry ({step})"))
}

/// Tools as methods of what holds the client, and as MCP tools.
pub struct Payments {
    idem: Idem,
    runs: AtomicU32,
}

#[classified_tools]
#[tool_router]
impl Payments {
    /// Payments over `idem`.
    #[must_use]
    pub fn new(idem: Idem) -> Self {
        Payments {
            idem,
            runs: AtomicU32::new(0),
        }
    }

    /// Charge a customer, once per customer and period.
    #[side_effect(key = "req.customer_id, req.period", idem = self.idem, destructive = false)]
    #[tool]
    async fn mcp_charge(
        &self,
        key: &IdempotencyKey,
        req: Parameters<ChargeReq>,
    ) -> Result<Receipt> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(Receipt {
            key: key.to_string(),
            cents: req.0.cents,
        })
    }

    /// Cancels a charge once, failing with anyhow's error (issue 33).
    ///
    /// # Errors
    ///
    /// When the charge is unknown.
    #[side_effect(key = "req.customer_id, req.period", idem = self.idem, destructive = true)]
    #[tool]
    async fn mcp_cancel(&self, req: Parameters<ChargeReq>) -> anyhow::Result<u64> {
        if req.0.cents == 0 {
            anyhow::bail!("no charge for {} in {}", req.0.customer_id, req.0.period);
        }
        Ok(req.0.cents)
    }

    /// A customer's balance.
    #[read_only]
    #[tool(annotations(title = "Balance"))]
    async fn mcp_balance(
        &self,
        Parameters(ChargeReq { customer_id, .. }): Parameters<ChargeReq>,
    ) -> Result<u64> {
        Ok(u64::try_from(customer_id.len()).unwrap_or(u64::MAX))
    }

    /// Refunds once per charge (a plain method, not an MCP tool).
    ///
    /// # Errors
    ///
    /// When idemkit refuses the call.
    #[side_effect(key = "charge_key", idem = self.idem, ttl = "7d", in_flight_wait = "2s")]
    pub async fn refund(&self, charge_key: &str, cents: u64) -> Result<u64> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// Voids a charge once, asking the provider first when an attempt's outcome is unknown.
    ///
    /// # Errors
    ///
    /// When idemkit refuses the call.
    #[side_effect(key = "charge_key", idem = self.idem, resend = false, verify = Self::was_voided)]
    pub async fn void(&self, key: &IdempotencyKey, charge_key: &str) -> Result<String> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{charge_key} voided under {key}"))
    }

    /// Whether a charge was voided.
    async fn was_voided(&self, key: &IdempotencyKey, charge_key: &str) -> Result<Verified<String>> {
        let runs = std::future::ready(self.runs()).await;
        Ok(if runs == 0 {
            Verified::NotApplied
        } else {
            Verified::Applied(format!("{charge_key} voided under {key}"))
        })
    }

    /// How many bodies ran.
    #[must_use]
    pub fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemkit::MemoryStore;

    #[tokio::test]
    async fn the_toolset_runs_and_replays() {
        Idem::new(MemoryStore::new())
            .scope(async {
                let first = charge("cus_1", "subscription", "2026-11", 4200)
                    .await
                    .unwrap();
                assert_eq!(first.key, "32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
                let req = ChargeReq {
                    customer_id: "cus_1".into(),
                    period: "2026-11".into(),
                    cents: 4200,
                };
                let a = charge_request(req.clone()).await.unwrap();
                assert_eq!(charge_request(req).await.unwrap(), a);
                let (booked, _) = idemkit::observe(book("José", 1)).await;
                assert_eq!(booked.unwrap(), "booked night 1");
                // The same guest in NFD, another case and with spaces: one key, so a replay.
                let (again, info) = idemkit::observe(book(" JOSE\u{301} ", 1)).await;
                assert_eq!(again.unwrap(), "booked night 1");
                assert!(info.unwrap().replayed);
                let op = idemkit::operation("plan-1/email").await.unwrap();
                assert_eq!(send_email(op, "a@b.c".into()).await.unwrap(), 5);
                assert_eq!(balance("cus_1").await.unwrap(), 4200);
            })
            .await;
        let payments = Payments::new(Idem::new(MemoryStore::new()));
        assert_eq!(payments.refund("ch_1", 500).await.unwrap(), 500);
        assert_eq!(payments.refund("ch_1", 500).await.unwrap(), 500);
        assert_eq!(payments.runs(), 1);
        assert_eq!(Payments::tool_router().list_all().len(), 3);
        let support = Idem::new(MemoryStore::new());
        let sent = support
            .scope(idemkit::operation_scope("plan-1/step-2", async {
                idemkit::JsonTools::only(["send_apology", "refund_order"])
                    .unwrap()
                    .call("send_apology", r#"{"to": "a@b.c"}"#)
                    .await
            }))
            .await
            .unwrap();
        let step = support.operation("plan-1/step-2").await.unwrap();
        assert_eq!(sent.value, format!("a@b.c: sorry ({step})"));
        assert!(matches!(
            support.scope(refund_order(String::new(), 1)).await,
            Err(SupportError::NotFound(_))
        ));
    }
}
