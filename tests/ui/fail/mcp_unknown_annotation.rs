// An MCP annotation that does not exist (a misspelt hint) is reported by idemkit, with the closest
// name, as the only error: the method stays a tool of the router (rmcp alone would drop it and add
// errors and warnings of its own).
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
    #[side_effect(key = "req.customer_id")]
    #[tool(annotations(title = "Charge", read_only_hnt = false))]
    async fn charge(&self, key: &IdempotencyKey, req: Parameters<ChargeReq>) -> Result<String, PayError> {
        Ok(format!("{key} {}", req.0.amount_cents))
    }
}

fn main() {
    let _ = Payments::tool_router();
}
