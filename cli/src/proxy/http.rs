//! The proxy served to its clients over streamable HTTP (`idemkit proxy --listen ADDR`), at
//! `http://ADDR/mcp`: one MCP session per client, every session's calls through the one upstream
//! connection and store.

use std::net::SocketAddr;

use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

/// The path the proxy's MCP endpoint is served at.
pub const PATH: &str = "/mcp";

/// Serves `handler` at `http://addr/mcp` until the process ends; says where on stderr (the port
/// the system chose for `:0`). Requests whose `Host` is not loopback are refused (rmcp's
/// DNS-rebinding check), whatever address is bound.
pub async fn serve<S>(handler: S, addr: SocketAddr) -> Result<(), String>
where
    S: ServerHandler + Clone + Send + Sync + 'static,
{
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service(PATH, service);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    eprintln!("idemkit proxy: serving MCP at http://{bound}{PATH}");
    axum::serve(listener, app)
        .await
        .map_err(|e| format!("serving http://{bound}{PATH} failed: {e}"))
}
