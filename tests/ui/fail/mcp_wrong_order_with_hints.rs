// Issue 33: #[side_effect] below rmcp's #[tool] with MCP-only arguments (`destructive`, `open_world`)
// gives the one error that says to swap the order, not "`destructive` ... remove it" first.
use idemkit::{IdempotencyKey, side_effect};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_router};

#[derive(Debug)]
struct PayError;
impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("payment failed")
    }
}
impl std::error::Error for PayError {}
impl idemkit::Classify for PayError {
    fn classify(&self) -> idemkit::Failure {
        idemkit::Failure::Permanent
    }
}
impl From<idemkit::Error> for PayError {
    fn from(_: idemkit::Error) -> Self {
        PayError
    }
}

#[derive(Clone, serde::Serialize, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct ChargeReq {
    customer_id: String,
    amount_cents: u64,
}

struct Payments;

#[tool_router]
impl Payments {
    /// Charges a customer.
    #[tool]
    #[side_effect(key = "req.customer_id", destructive = true, open_world = false)]
    async fn charge(&self, key: &IdempotencyKey, req: Parameters<ChargeReq>) -> Result<String, PayError> {
        Ok(format!("{key} {}", req.0.amount_cents))
    }
}

fn main() {
    let _ = Payments::tool_router();
}
