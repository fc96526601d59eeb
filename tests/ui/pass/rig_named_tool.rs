// A rig tool whose `name =` equals its `NAME`: it compiles, keys on that name (the contract's
// golden key), and is listed in `idemkit::tools()` (a rig tool named by `NAME` alone is not).
#![deny(warnings)]
use idemkit::rig::{ToolExecutionError, ToolOutput};
use idemkit::{Classify, Failure, Idem, IdempotencyKey, MemoryStore, ToolKind, read_only, side_effect};
use rig_core::tool::PortableTool;
use serde::{Deserialize, Serialize};

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

#[derive(Clone, Serialize, Deserialize)]
struct ChargeArgs {
    customer_id: String,
    purpose: String,
    period: String,
    cents: u64,
}

struct Charge;

impl PortableTool for Charge {
    const NAME: &'static str = "charge";
    type Args = ChargeArgs;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Charges a customer once per purpose and period.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    /// Charges a customer once per purpose and period.
    #[side_effect(key = "args.customer_id, args.purpose, args.period", name = "charge", rig)]
    async fn call(&self, key: &IdempotencyKey, args: ChargeArgs) -> Result<String, PayError> {
        Ok(format!("charged {} under {key}", args.cents))
    }
}

#[derive(Clone, Serialize, Deserialize)]
struct BalanceArgs {
    customer_id: String,
}

struct Balance;

impl PortableTool for Balance {
    const NAME: &'static str = "balance";
    type Args = BalanceArgs;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "A customer's balance in cents.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    #[read_only(name = "balance", rig)]
    async fn call(&self, args: BalanceArgs) -> Result<u64, PayError> {
        Ok(args.customer_id.len() as u64)
    }
}

// A generic impl: the `name` check still compiles without a warning (`#![deny(warnings)]`).
struct Lookup<C>(C);

impl<C: AsRef<str> + Send + Sync> PortableTool for Lookup<C> {
    const NAME: &'static str = "lookup";
    type Args = BalanceArgs;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Looks a customer up.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    #[read_only(name = "lookup", rig)]
    async fn call(&self, args: BalanceArgs) -> Result<String, PayError> {
        Ok(format!("{}/{}", self.0.as_ref(), args.customer_id))
    }
}

fn main() {
    let args = ChargeArgs {
        customer_id: "cus_1".into(),
        purpose: "subscription".into(),
        period: "2026-11".into(),
        cents: 4200,
    };
    let run = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let out = run.block_on(Idem::new(MemoryStore::new()).scope(Charge.call(args))).unwrap();
    let value = out.as_json().unwrap();
    assert_eq!(value["idempotencyKey"], "32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
    assert_eq!(value["result"], "charged 4200 under 32e00e40-1a53-8058-93c7-e9d1adc8ecaa");

    let charge = idemkit::tools().find(|t| t.name == "charge").expect("`charge` is listed");
    assert_eq!(charge.kind, ToolKind::SideEffect);
    assert_eq!(charge.key_fields, ["customer_id", "purpose", "period"]);
    assert_eq!(charge.description, "Charges a customer once per purpose and period.");
    let balance = idemkit::tools().find(|t| t.name == "balance").expect("`balance` is listed");
    assert_eq!(balance.kind, ToolKind::ReadOnly);

    let read = run.block_on(Balance.call(BalanceArgs { customer_id: "cus_1".into() })).unwrap();
    // S35: a read's success carries the advice a read gets (ran, no key, safe either way).
    assert_eq!(read.as_json().unwrap()["result"], 5);
    assert_eq!(read.as_json().unwrap()["advice"]["state"], "ran");
    let found = run.block_on(Lookup("eu").call(BalanceArgs { customer_id: "cus_1".into() })).unwrap();
    assert_eq!(found.as_json().unwrap()["result"], "eu/cus_1");
    assert!(idemkit::tools().any(|t| t.name == "lookup"));
}
