// Issue 44: a rig tool's error must be a `std::error::Error + Send + Sync`, `anyhow::Error` or
// `Box<dyn Error + Send + Sync>`; anything else is one error at the error type that names all
// three (the pick that serves it has no arm that cannot be reached).
use idemkit::rig::{ToolExecutionError, ToolOutput};
use idemkit::{Classify, Failure, side_effect};
use rig_core::tool::PortableTool;

#[derive(Debug)]
struct PayError;
impl Classify for PayError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}
impl From<idemkit::Error> for PayError {
    fn from(_: idemkit::Error) -> Self {
        PayError
    }
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct ChargeArgs {
    customer_id: String,
}

struct Charge;

impl PortableTool for Charge {
    const NAME: &'static str = "charge";
    type Args = ChargeArgs;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Charges a customer once.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    #[side_effect(key = "args.customer_id", rig)]
    async fn call(&self, args: ChargeArgs) -> Result<u64, PayError> {
        let _ = args;
        Ok(1)
    }
}

fn main() {}
