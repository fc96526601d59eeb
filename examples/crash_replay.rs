//! An agent killed mid-plan (SIGKILL) and restarted, again and again: each effect happens
//! exactly once. The parent process runs the fake provider and kills its child agent at random
//! points; the child keeps its claims and outcomes in the default SQLite store (`IDEMKIT_DB`
//! points it at a fresh file per run).
//!
//! ```sh
//! cargo run --example crash_replay            # 20 runs
//! cargo run --example crash_replay -- 50      # 50 runs
//! ```

mod agent;

#[tokio::main]
async fn main() {
    if agent::crash::is_child() {
        std::process::exit(agent::crash::child_main().await);
    }
    let runs: u32 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let exe = std::env::current_exe().expect("the path of this example");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    println!(
        "{runs} runs of a 4-step plan (charge, send_receipt, create_order, balance), seed {seed}:\n"
    );
    let crashes = agent::crash::Crashes {
        runs,
        seed,
        max_kills: 3,
        window_ms: 250,
    };
    let reports = agent::crash::crash_runs(|| tokio::process::Command::new(&exe), crashes).await;
    print!("{}", agent::crash::render(&reports));
    if !reports.iter().all(agent::crash::RunReport::exactly_once) {
        println!("\nSOME EFFECT DID NOT HAPPEN EXACTLY ONCE — this is a bug, please report it");
        std::process::exit(1);
    }
}
