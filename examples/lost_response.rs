//! Replays the lost-response problem against fake providers on loopback. For each scenario:
//! the charges a payment provider that deduplicates by `Idempotency-Key` made, with a naive retry
//! loop and with `#[side_effect]`; then the messages an SMS gateway that cannot deduplicate sent,
//! with a naive retry loop, with `#[side_effect]` alone (an unknown outcome is not re-sent: the
//! call ends `Error::Ambiguous`) and with `verify = was_sent` (the gateway is asked whether the
//! message went out before anything is sent again). One scenario kills an agent (SIGKILL) after
//! its message went out and starts another: this program is started again as that agent.
//!
//! ```sh
//! cargo run --example lost_response
//! ```

mod agent;

#[tokio::main]
async fn main() {
    // The agent the SIGKILL scenario starts and kills.
    if agent::sms::is_child() {
        std::process::exit(agent::sms::child_main().await);
    }
    println!("Charges made by the provider for one intended charge of 42.00:\n");
    let rows = agent::lost_response_table().await;
    print!("{}", agent::render(&rows));
    let all_once = rows.iter().all(|r| r.idemkit == 1);
    println!(
        "\nWith idemkit every scenario charged {}.",
        if all_once {
            "exactly once"
        } else {
            "MORE THAN ONCE — this is a bug, please report it"
        }
    );

    println!(
        "\nMessages sent by an SMS gateway that does not deduplicate, for one intended text \
         (what the agent's last run of the step got in brackets):\n"
    );
    let exe = std::env::current_exe().expect("the path of this example");
    let sms = agent::sms::sms_table(|| tokio::process::Command::new(&exe)).await;
    print!("{}", agent::sms::render_sms(&sms));
    let never_twice = sms
        .iter()
        .all(|r| r.no_verify.sent <= 1 && r.verify.sent <= 1);
    if let Some(says) = sms.iter().find_map(|r| r.no_verify_says.as_ref()) {
        println!("\nWhat the agent says when the outcome is unknown (no verify):\n  {says}");
    }
    if never_twice {
        println!("\nWith idemkit no message was sent twice.");
    } else {
        println!("\nWith idemkit A MESSAGE WAS SENT TWICE — this is a bug, please report it");
    }
    if !all_once || !never_twice {
        std::process::exit(1);
    }
}
