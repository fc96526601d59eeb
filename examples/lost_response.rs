//! Replays the lost-response problem against a fake provider on loopback: for each scenario,
//! the number of charges the provider made with a naive retry loop and with `#[side_effect]`.
//!
//! ```sh
//! cargo run --example lost_response
//! ```

mod agent;

#[tokio::main]
async fn main() {
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
    if !all_once {
        std::process::exit(1);
    }
}
