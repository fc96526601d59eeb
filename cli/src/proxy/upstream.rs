//! The upstream MCP server: spawned from its command over stdio (and spawned again when it has
//! gone: it crashed, or exited after committing without answering), or reached at its streamable
//! HTTP endpoint; an [`IdempotentClient`] over each connection.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::Idem;
use idemkit::mcp::IdempotentClient;
use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::sync::Mutex;

use super::config::Config;
use super::relay::Relay;

/// Where the upstream server is.
#[derive(Debug, Clone)]
pub enum Source {
    /// Its command and arguments: spawned, spoken to over its stdin and stdout.
    Command(Vec<String>),
    /// Its streamable HTTP endpoint.
    Url(String),
}

/// The upstream server and the live connection to it.
pub struct Upstream {
    command: Source,
    config: Arc<Config>,
    idem: Idem,
    live: Mutex<Option<Live>>,
    relay: Relay,
}

struct Live {
    service: RunningService<RoleClient, Relay>,
    client: IdempotentClient,
}

impl Upstream {
    pub fn new(command: Source, config: Arc<Config>, idem: Idem, relay: Relay) -> Self {
        Upstream {
            command,
            config,
            idem,
            live: Mutex::new(None),
            relay,
        }
    }

    /// The client of the live connection, spawning the upstream first if it is not running.
    /// `Err`: it could not be started (nothing was sent).
    pub async fn client(&self) -> Result<IdempotentClient, String> {
        let mut live = self.live.lock().await;
        if let Some(l) = live.as_ref()
            && !l.service.peer().is_transport_closed()
        {
            return Ok(l.client.clone());
        }
        // The old connection's child, if any, is killed as its transport is dropped.
        *live = None;
        let service = self.spawn().await?;
        let mut client = IdempotentClient::new(service.peer().clone())
            .idem(self.idem.clone())
            .timeout(self.config.timeout);
        for (name, tool) in &self.config.tools {
            client = client.tool(name.clone(), tool.remote.clone());
        }
        self.relay.serves(&client);
        *live = Some(Live {
            service,
            client: client.clone(),
        });
        Ok(client)
    }

    /// The instructions the upstream gave when it was last started.
    pub async fn instructions(&self) -> Option<String> {
        let live = self.live.lock().await;
        live.as_ref()
            .and_then(|l| l.service.peer().peer_info())
            .and_then(|info| info.instructions.clone())
    }

    /// The capabilities the upstream gave when it was last started.
    pub async fn capabilities(&self) -> Option<rmcp::model::ServerCapabilities> {
        let live = self.live.lock().await;
        live.as_ref()
            .and_then(|l| l.service.peer().peer_info())
            .map(|info| info.capabilities.clone())
    }

    async fn spawn(&self) -> Result<RunningService<RoleClient, Relay>, String> {
        match &self.command {
            Source::Command(command) => {
                let (program, args) = command
                    .split_first()
                    .ok_or("no upstream command: write it after `--`")?;
                let mut spawned = tokio::process::Command::new(program);
                spawned.args(args);
                let shown = format!("`{}`", command.join(" "));
                let transport = TokioChildProcess::new(spawned)
                    .map_err(|e| format!("cannot start the upstream MCP server {shown}: {e}"))?;
                handshake(&self.relay, &shown, transport).await
            }
            Source::Url(url) => {
                if !url.starts_with("http://") {
                    return Err(format!(
                        "`--upstream-url {url}`: only http:// endpoints are built in (no TLS); put a local TLS \
                         terminator in front of an https:// server, or run its command after `--`"
                    ));
                }
                let transport = StreamableHttpClientTransport::from_uri(url.as_str());
                handshake(&self.relay, &format!("at {url}"), transport).await
            }
        }
    }
}

/// The client's side of the MCP handshake over `transport`, within 30 s: a server that starts but
/// never finishes it must not hold every call.
async fn handshake<T, E, A>(
    relay: &Relay,
    shown: &str,
    transport: T,
) -> Result<RunningService<RoleClient, Relay>, String>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(Duration::from_secs(30), relay.clone().serve(transport)).await {
        Ok(Ok(service)) => Ok(service),
        Ok(Err(e)) => Err(format!(
            "the MCP handshake with the upstream MCP server {shown} failed: {e}"
        )),
        Err(_) => Err(format!(
            "the upstream MCP server {shown} did not finish its MCP handshake within 30s"
        )),
    }
}
