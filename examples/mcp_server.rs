//! An MCP server over stdio with `charge`, `refund`, `send_receipt` (side effects, each keyed
//! and recorded) and a read-only `balance`, backed by a fake payment provider on loopback.
//!
//! ```sh
//! cargo run --example mcp_server --features rmcp
//! ```
//!
//! Point an MCP client (Claude Desktop, the MCP Inspector, rmcp's own client) at that command.

mod mcp;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    mcp::serve_stdio().await
}
