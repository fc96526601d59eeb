//! An agent on async-openai's client, driven by a scripted model on loopback: the model calls
//! `charge`, the provider loses the response after committing, the model calls `charge` again
//! with the same arguments. Prints the charges the provider made without and with idemkit.
//!
//! ```sh
//! cargo run --example openai_agent --features json
//! ```

mod openai;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "One intended charge of 42.00; the first response is lost after commit, and the model calls `charge` again:\n"
    );
    println!("{:<40} {:>8}", "agent (async-openai client)", "charges");
    let naive = openai::run(false).await?;
    println!(
        "{:<40} {:>8}",
        "hand-written dispatch, no key", naive.charges
    );
    let with = openai::run(true).await?;
    println!("{:<40} {:>8}", "idemkit JsonTools", with.charges);
    println!("\nWhat idemkit's agent sent back to the model:");
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
