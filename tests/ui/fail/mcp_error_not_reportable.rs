// Issue 33: an MCP tool's error must be a `std::error::Error`, `anyhow::Error` or
// `Box<dyn Error + Send + Sync>`; anything else is one error at the error type that names all three.
use idemkit::side_effect;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_router};

#[derive(Debug)]
struct PayError;
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
}

struct Payments;

#[tool_router]
impl Payments {
    /// Charges a customer.
    #[side_effect(key = "req.customer_id")]
    #[tool]
    async fn charge(&self, req: Parameters<ChargeReq>) -> Result<String, PayError> {
        Ok(req.0.customer_id)
    }
}

fn main() {
    let _ = Payments::tool_router();
}
