//! The upstream MCP server: spawned from its command over stdio, and spawned again when it has
//! gone (it crashed, or exited after committing without answering), with an
//! [`IdempotentClient`] over each connection.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::Idem;
use idemkit::mcp::IdempotentClient;
use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use tokio::sync::Mutex;

use super::config::Config;

/// The upstream server's command and the live connection to it.
pub struct Upstream {
    command: Vec<String>,
    config: Arc<Config>,
    idem: Idem,
    live: Mutex<Option<Live>>,
}

struct Live {
    service: RunningService<RoleClient, ()>,
    client: IdempotentClient,
}

impl Upstream {
    pub fn new(command: Vec<String>, config: Arc<Config>, idem: Idem) -> Self {
        Upstream {
            command,
            config,
            idem,
            live: Mutex::new(None),
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

    async fn spawn(&self) -> Result<RunningService<RoleClient, ()>, String> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or("no upstream command: write it after `--`")?;
        let mut command = tokio::process::Command::new(program);
        command.args(args);
        let shown = self.command.join(" ");
        let transport = TokioChildProcess::new(command)
            .map_err(|e| format!("cannot start the upstream MCP server `{shown}`: {e}"))?;
        // A server that starts but never finishes the handshake must not hold every call.
        let handshake = tokio::time::timeout(Duration::from_secs(30), ().serve(transport));
        match handshake.await {
            Ok(Ok(service)) => Ok(service),
            Ok(Err(e)) => Err(format!(
                "the upstream MCP server `{shown}` started but its MCP handshake failed: {e}"
            )),
            Err(_) => Err(format!(
                "the upstream MCP server `{shown}` started but did not finish its MCP handshake within 30s"
            )),
        }
    }
}
