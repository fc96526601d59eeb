use idemkit::rig::ToolExecutionError;
use idemkit::{Classify, Failure, side_effect};
use rig_core::tool::PortableTool;

#[derive(Debug)]
struct PayError;
impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}
impl std::error::Error for PayError {}
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
    period: String,
}

struct Charge;

impl PortableTool for Charge {
    const NAME: &'static str = "charge";
    type Args = ChargeArgs;
    type Output = u64; // not rig's envelope: the wrapper serves `ToolOutput`
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Charges a customer once per period.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    #[side_effect(key(args.customer_id, args.period), rig)]
    async fn call(&self, args: ChargeArgs) -> Result<u64, PayError> {
        let _ = args;
        Ok(1)
    }
}

fn main() {}
