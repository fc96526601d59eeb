//! An agent on rig's own agent loop, driven by a scripted model on loopback: the model calls
//! `charge`, the provider loses the response after committing, the model calls `charge` again
//! with the same arguments. Prints the charges the provider made without and with idemkit.
//!
//! ```sh
//! cargo run --example rig_agent --features rig
//! ```

mod rig;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "One intended charge of 42.00; the first response is lost after commit, and the model calls `charge` again:\n"
    );
    println!(
        "{:<40} {:>8}",
        "agent (rig-agent, OpenAI chat client)", "charges"
    );
    let naive = rig::run(false).await?;
    println!("{:<40} {:>8}", "rig tool, no key", naive.charges);
    let with = rig::run(true).await?;
    println!(
        "{:<40} {:>8}",
        "rig tool with #[side_effect(rig)]", with.charges
    );
    println!("\nWhat rig sent back to the model with idemkit:");
    for (id, content) in &with.tool_messages {
        println!("  {id}: {content}");
    }
    println!("The model's answer: {}", with.answer);
    if with.charges != 1 {
        eprintln!(
            "idemkit charged {} times: this is a bug, please report it",
            with.charges
        );
        std::process::exit(1);
    }
    Ok(())
}
