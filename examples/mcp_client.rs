//! An agent calling the tools of an MCP server it did not write, through
//! `idemkit::mcp::IdempotentClient`: a charge keyed on the arguments that identify it, sent once
//! however often the agent repeats it; a read-only balance sent as it is; an unconfigured refund
//! refused with what to configure.
//!
//! ```sh
//! cargo run --example mcp_client --features rmcp
//! ```

mod mcp;
mod remote;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seen = remote::run().await?;
    for line in &seen.log {
        println!("{line}");
    }
    println!("the provider charged {} time(s)", seen.charged);
    Ok(())
}
