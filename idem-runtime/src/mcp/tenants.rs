//! Requests each run under the tenant the server reads from them (`Tenanted`).

use rmcp::ErrorData;
use rmcp::model::ProtocolVersion;
use rmcp::service::{NotificationContext, RequestContext, RoleServer, Service, ServiceRole};
use std::borrow::Cow;
use std::sync::Arc;

/// An rmcp server (any [`Service<RoleServer>`], so any `ServerHandler`) whose requests each run
/// under the tenant that `tenant` reads from the request's context: every idemkit call the
/// request makes is scoped to it, as if the tool had written
/// [`as_tenant`](crate::as_tenant)`(tenant, …)` around its body. Records of one tenant are never
/// replayed to, refused for, or shown to another (S18); a tool marked `tenant_required = true`
/// fails closed when `tenant` answers `None` (without one, the call is unscoped, or scoped to the
/// runtime's [`IdemBuilder::tenant`](crate::IdemBuilder::tenant)).
///
/// Where the tenant comes from is the server's decision, because only the server knows what it
/// authenticated:
///
/// - **Streamable HTTP** (rmcp's `transport-streamable-http-server`): rmcp puts the request's
///   `http::request::Parts` in `context.extensions`; an authentication layer in front of it (axum
///   middleware, a tower layer) that put the verified principal in the HTTP request's extensions
///   is read back as
///   `cx.extensions.get::<http::request::Parts>()?.extensions.get::<Principal>()`.
/// - **A connection per client** (stdio, a socket the server authenticated when it accepted it):
///   the server knows the client before it serves the connection, so the closure returns what it
///   captured: `move |_| Some(tenant.clone())`.
/// - **The client's name in the `initialize` handshake** (`cx.client_info()`): the client says who
///   it is, and nothing checks it. Use it only where every client is trusted (one operator's own
///   agents), never as the boundary between customers.
///
/// The tenant is a task-local of the request's task: work the tool spawns onto other tasks does
/// not inherit it (spawn it with [`in_current_scope`](crate::in_current_scope), which carries
/// the tenant, the operation and the runtime).
///
/// ```
/// use std::sync::Arc;
/// use idemkit::mcp::Tenanted;
/// use rmcp::ServerHandler;
///
/// # struct Payments;
/// # impl ServerHandler for Payments {}
/// // Each request under the client it comes from (trusted clients: see above).
/// let server = Tenanted::new(Payments, |cx| cx.client_info().map(|client| client.name));
/// # let _ = server;
/// // A connection the server authenticated before serving it.
/// let tenant: Arc<str> = Arc::from("acme");
/// let server = Tenanted::new(Payments, move |_| Some(tenant.clone()));
/// # let _ = server;
/// // Served like the handler itself: `server.serve(transport).await?`.
/// ```
pub struct Tenanted<S, F> {
    inner: S,
    tenant: F,
}

impl<S, F> Tenanted<S, F> {
    /// `inner`, with each request run under the tenant `tenant` reads from its context (`None`:
    /// the request runs without one).
    pub fn new<T>(inner: S, tenant: F) -> Self
    where
        F: Fn(&RequestContext<RoleServer>) -> Option<T>,
        T: Into<Arc<str>>,
    {
        Tenanted { inner, tenant }
    }

    /// The wrapped server.
    pub const fn inner(&self) -> &S {
        &self.inner
    }

    /// The wrapped server, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: std::fmt::Debug, F> std::fmt::Debug for Tenanted<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenanted")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, F, T> Service<RoleServer> for Tenanted<S, F>
where
    S: Service<RoleServer>,
    F: Fn(&RequestContext<RoleServer>) -> Option<T> + Send + Sync + 'static,
    T: Into<Arc<str>> + Send + 'static,
{
    async fn handle_request(
        &self,
        request: <RoleServer as ServiceRole>::PeerReq,
        context: RequestContext<RoleServer>,
    ) -> Result<<RoleServer as ServiceRole>::Resp, ErrorData> {
        match (self.tenant)(&context) {
            Some(tenant) => {
                crate::as_tenant(tenant.into(), self.inner.handle_request(request, context)).await
            }
            None => self.inner.handle_request(request, context).await,
        }
    }

    async fn handle_notification(
        &self,
        notification: <RoleServer as ServiceRole>::PeerNot,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.handle_notification(notification, context).await
    }

    fn get_info(&self) -> <RoleServer as ServiceRole>::Info {
        self.inner.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }
}
