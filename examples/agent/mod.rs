//! The tools of the example agents, written the way the README teaches, and the scripted
//! scenarios that examples and tests both run.
#![allow(dead_code)]

pub mod sms;

use std::time::Duration;

use fake_provider::{Client, FakeProvider, Fault};
use idemkit::{
    Classify, Failure, Idem, IdempotencyKey, read_only, side_effect, store::MemoryStore,
};
use serde_json::json;

#[path = "pay.rs"]
mod pay;
pub use pay::{PayError, Receipt};

/// The agent's tools over one provider.
pub struct Payments {
    pub client: Client,
}

impl Payments {
    /// A client of the provider at `base` that gives up on a request after `timeout`.
    pub fn new(base: String, timeout: Duration) -> Self {
        Payments {
            client: Client::new(base, timeout),
        }
    }

    /// Charges a customer once per purpose and period.
    #[side_effect(key = "customer_id, purpose, period", lease = "2s")]
    pub async fn charge(
        &self,
        key: &IdempotencyKey,
        customer_id: &str,
        purpose: &str,
        period: &str,
        amount_cents: u64,
    ) -> Result<Receipt, PayError> {
        let body = json!({"customer": customer_id, "purpose": purpose, "period": period, "amount_cents": amount_cents});
        let answer = self
            .client
            .post("charges", Some(key.as_str()), &body)
            .await?;
        Ok(Receipt {
            charge_id: answer.body["id"].as_str().unwrap_or_default().to_owned(),
            key: key.to_string(),
        })
    }

    /// Emails the receipt of an order, once per order.
    #[side_effect(key = "order_id", lease = "2s")]
    pub async fn send_receipt(
        &self,
        key: &IdempotencyKey,
        order_id: &str,
        email: &str,
    ) -> Result<String, PayError> {
        let answer = self
            .client
            .post(
                "emails",
                Some(key.as_str()),
                &json!({"order": order_id, "to": email}),
            )
            .await?;
        Ok(answer.body["id"].as_str().unwrap_or_default().to_owned())
    }

    /// Creates an order, once per order id.
    #[side_effect(key = "order_id", lease = "2s")]
    pub async fn create_order(
        &self,
        key: &IdempotencyKey,
        order_id: &str,
        customer_id: &str,
        amount_cents: u64,
    ) -> Result<String, PayError> {
        let body =
            json!({"order": order_id, "customer": customer_id, "amount_cents": amount_cents});
        let answer = self
            .client
            .post("orders", Some(key.as_str()), &body)
            .await?;
        Ok(answer.body["id"].as_str().unwrap_or_default().to_owned())
    }

    /// The customer's charged cents: a read, retried freely.
    #[read_only]
    pub async fn balance(&self, customer_id: &str) -> Result<u64, PayError> {
        Ok(self.client.balance(customer_id).await?)
    }

    /// How agents usually write it: a retry loop that mints a fresh key for every attempt, so
    /// the provider cannot tell a retry from a new charge.
    pub async fn naive_charge(
        &self,
        customer_id: &str,
        amount_cents: u64,
    ) -> Result<String, PayError> {
        let body = json!({"customer": customer_id, "amount_cents": amount_cents});
        let mut attempt = 0;
        loop {
            attempt += 1;
            let fresh_key = uuid::Uuid::new_v4().to_string();
            match self.client.post("charges", Some(&fresh_key), &body).await {
                Ok(answer) => return Ok(answer.body["id"].as_str().unwrap_or_default().to_owned()),
                Err(e) => {
                    let e = PayError::from(e);
                    if attempt >= 4 || e.classify() == Failure::Permanent {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

/// One row of the lost-response table.
pub struct Scenario {
    /// What happens.
    pub name: &'static str,
    /// The faults the provider injects, in order.
    pub faults: Vec<Fault>,
    /// How many times the agent runs the step.
    pub agent_runs: u32,
}

/// The scenarios of the problem, in the order of its table.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "the response arrives",
            faults: vec![],
            agent_runs: 1,
        },
        Scenario {
            name: "the response is lost after commit",
            faults: vec![Fault::DropAfterCommit],
            agent_runs: 1,
        },
        Scenario {
            name: "5xx before commit",
            faults: vec![Fault::FailBeforeCommit],
            agent_runs: 1,
        },
        Scenario {
            name: "the agent re-runs the same step",
            faults: vec![],
            agent_runs: 2,
        },
        Scenario {
            name: "the key is minted per attempt (3 responses lost)",
            faults: vec![Fault::DropAfterCommit; 3],
            agent_runs: 1,
        },
    ]
}

/// Charges made by the provider in one scenario, with the naive loop and with idemkit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The scenario.
    pub name: &'static str,
    /// Charges with the naive retry loop.
    pub naive: usize,
    /// Charges with `#[side_effect]`.
    pub idemkit: usize,
}

/// Runs every scenario twice against a fresh provider each time and counts the charges.
pub async fn lost_response_table() -> Vec<Row> {
    let mut rows = Vec::new();
    for scenario in scenarios() {
        let naive = {
            let provider = FakeProvider::start().await.expect("a loopback port");
            provider.inject(scenario.faults.clone());
            let agent = Payments::new(provider.base_url(), Duration::from_millis(300));
            for _ in 0..scenario.agent_runs {
                let _ = agent.naive_charge("cus_1", 4200).await;
            }
            provider.count("charges")
        };
        let idemkit = {
            let provider = FakeProvider::start().await.expect("a loopback port");
            provider.inject(scenario.faults.clone());
            let agent = Payments::new(provider.base_url(), Duration::from_millis(300));
            let idem = Idem::new(MemoryStore::new());
            for _ in 0..scenario.agent_runs {
                let _ = idem
                    .scope(agent.charge("cus_1", "subscription", "2026-11", 4200))
                    .await;
            }
            provider.count("charges")
        };
        rows.push(Row {
            name: scenario.name,
            naive,
            idemkit,
        });
    }
    rows
}

/// The table as the example prints it.
pub fn render(rows: &[Row]) -> String {
    let width = rows
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(0)
        .max("scenario".len());
    let mut out = format!(
        "| {:width$} | naive retry loop | #[side_effect] |\n",
        "scenario"
    );
    out += &format!(
        "|{}|------------------|----------------|\n",
        "-".repeat(width + 2)
    );
    for row in rows {
        out += &format!(
            "| {:width$} | {:>16} | {:>14} |\n",
            row.name, row.naive, row.idemkit
        );
    }
    out
}

/// The crash-and-replay agent's plan: each step once, whatever kills the process in between.
pub async fn run_plan(agent: &Payments, plan: &str) -> Result<u64, PayError> {
    let customer = format!("cus_{plan}");
    let order = format!("ord_{plan}");
    agent.charge(&customer, "order", plan, 4200).await?;
    agent.send_receipt(&order, "ada@example.com").await?;
    agent.create_order(&order, &customer, 4200).await?;
    agent.balance(&customer).await
}

/// The crash-and-replay agent: a parent that kills its child agent at random points.
pub mod crash {
    use std::time::Duration;

    use fake_provider::FakeProvider;

    use super::{Payments, run_plan};

    const PLAN: &str = "IDEMKIT_EXAMPLE_PLAN";
    const PROVIDER: &str = "IDEMKIT_EXAMPLE_PROVIDER";

    /// Whether this process is the child agent.
    pub fn is_child() -> bool {
        std::env::var_os(PLAN).is_some()
    }

    /// The child agent: runs the plan against the provider; exit code 0 once it is complete.
    pub async fn child_main() -> i32 {
        let plan = std::env::var(PLAN).expect("the plan's name");
        let provider = std::env::var(PROVIDER).expect("the provider's URL");
        let agent = Payments::new(provider, Duration::from_secs(2));
        match run_plan(&agent, &plan).await {
            Ok(_) => 0,
            Err(e) => {
                eprintln!("plan {plan} failed: {e}");
                1
            }
        }
    }

    /// What one run did.
    #[derive(Debug, Clone)]
    pub struct RunReport {
        /// The plan's name.
        pub plan: String,
        /// Each kill: ms after that start of the child, and the effects made by then.
        pub kills: Vec<(u64, usize)>,
        /// Effects of each kind the provider made.
        pub charges: usize,
        /// Receipts emailed.
        pub emails: usize,
        /// Orders created.
        pub orders: usize,
    }

    impl RunReport {
        /// Every effect happened exactly once.
        pub fn exactly_once(&self) -> bool {
            (self.charges, self.emails, self.orders) == (1, 1, 1)
        }
    }

    /// How the parent kills its child.
    #[derive(Debug, Clone, Copy)]
    pub struct Crashes {
        /// Runs of the whole plan.
        pub runs: u32,
        /// Seeds the kill points.
        pub seed: u64,
        /// Each run kills the child 1 to this many times before letting it finish.
        pub max_kills: u64,
        /// Each kill comes at a point drawn uniformly from this many ms after the child starts.
        pub window_ms: u64,
    }

    /// Runs the plan `runs` times; in each, the child is killed at random points (seeded), then
    /// left to finish. `command` makes a command that starts the child.
    pub async fn crash_runs(
        command: impl Fn() -> tokio::process::Command,
        crashes: Crashes,
    ) -> Vec<RunReport> {
        let Crashes {
            runs,
            seed,
            max_kills,
            window_ms,
        } = crashes;
        let mut rng = fastrand::Rng::with_seed(seed);
        let dir = std::env::temp_dir().join(format!(
            "idemkit-crash-replay-{}-{seed}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut reports = Vec::new();
        for run in 0..runs {
            let provider = FakeProvider::start().await.expect("a loopback port");
            // Each effect takes a while, so that kills land inside bodies too.
            provider.set_latency(Duration::from_millis(40));
            let plan = format!("run{run}");
            let db = dir.join(format!("{plan}.db"));
            let mut kills = Vec::new();
            let planned_kills = rng.u64(1..=max_kills) as usize;
            let mut starts = 0;
            loop {
                starts += 1;
                assert!(starts < 50, "plan {plan} did not complete in 50 starts");
                let mut child = command()
                    .env(PLAN, &plan)
                    .env(PROVIDER, provider.base_url())
                    .env("IDEMKIT_DB", &db)
                    .stdout(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .expect("the child agent starts");
                let kill_after = (kills.len() < planned_kills).then(|| rng.u64(0..window_ms));
                let status = match kill_after {
                    Some(ms) => {
                        match tokio::time::timeout(Duration::from_millis(ms), child.wait()).await {
                            Ok(status) => status.expect("the child's status"),
                            Err(_) => {
                                child.start_kill().expect("SIGKILL"); // Child::start_kill sends SIGKILL on Unix.
                                child.wait().await.expect("the killed child's status");
                                let made = provider.count("charges")
                                    + provider.count("emails")
                                    + provider.count("orders");
                                kills.push((ms, made));
                                continue;
                            }
                        }
                    }
                    None => child.wait().await.expect("the child's status"),
                };
                if status.success() {
                    break;
                }
            }
            reports.push(RunReport {
                plan,
                kills,
                charges: provider.count("charges"),
                emails: provider.count("emails"),
                orders: provider.count("orders"),
            });
        }
        // `IDEMKIT_KEEP_DB=1` keeps the runs' stores, to look at them with the `idemkit` command.
        if std::env::var_os("IDEMKIT_KEEP_DB").is_some() {
            eprintln!("the runs' stores are kept in {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
        reports
    }

    /// The reports as the example prints them.
    pub fn render(reports: &[RunReport]) -> String {
        let mut out = String::from(
            "| run   | killed at ms (effects made by then) | charges | emails | orders |\n",
        );
        out += "|-------|-------------------------------------|---------|--------|--------|\n";
        for r in reports {
            let kills = r
                .kills
                .iter()
                .map(|(ms, made)| format!("{ms} ({made})"))
                .collect::<Vec<_>>()
                .join(", ");
            out += &format!(
                "| {:5} | {:35} | {:7} | {:6} | {:6} |\n",
                r.plan, kills, r.charges, r.emails, r.orders
            );
        }
        let total = |f: fn(&RunReport) -> usize| reports.iter().map(f).sum::<usize>();
        let kills: usize = reports.iter().map(|r| r.kills.len()).sum();
        out += &format!(
            "\n{} runs, {kills} kills: {} charges, {} emails, {} orders (exactly once each: {})\n",
            reports.len(),
            total(|r| r.charges),
            total(|r| r.emails),
            total(|r| r.orders),
            reports.iter().all(RunReport::exactly_once)
        );
        out
    }
}
