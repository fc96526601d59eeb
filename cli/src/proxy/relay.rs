//! `notifications/tools/list_changed` from the upstream: the client's annotation-derived
//! defaults (read-only, idempotent hints) are read again at the next call that needs them, and
//! the notification goes on to every client of the proxy.

use std::sync::{Arc, Mutex};

use idemkit::mcp::IdempotentClient;
use rmcp::ClientHandler;
use rmcp::service::{NotificationContext, Peer, RoleClient, RoleServer};

/// The upstream connections' handler (shared by each, across the upstream's restarts).
#[derive(Clone, Default)]
pub struct Relay {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The client of the live upstream connection, whose hints a change makes stale.
    client: Mutex<Option<IdempotentClient>>,
    /// The proxy's own clients (one on stdio; one per session over HTTP).
    clients: Mutex<Vec<Peer<RoleServer>>>,
}

impl Relay {
    /// The client of a new upstream connection.
    pub fn serves(&self, client: &IdempotentClient) {
        *self.inner.client.lock().expect("relay lock") = Some(client.clone());
    }

    /// A client of the proxy, told of the upstream's changes from now on.
    pub fn joined(&self, peer: Peer<RoleServer>) {
        let mut clients = self.inner.clients.lock().expect("relay lock");
        clients.retain(|p| !p.is_transport_closed());
        clients.push(peer);
    }
}

impl ClientHandler for Relay {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(client) = self.inner.client.lock().expect("relay lock").as_ref() {
            client.forget_hints();
        }
        let clients: Vec<Peer<RoleServer>> = {
            let mut clients = self.inner.clients.lock().expect("relay lock");
            clients.retain(|p| !p.is_transport_closed());
            clients.clone()
        };
        for peer in clients {
            if let Err(e) = peer.notify_tool_list_changed().await {
                eprintln!(
                    "idemkit proxy: could not tell a client the upstream's tools changed: {e}"
                );
            }
        }
    }
}
