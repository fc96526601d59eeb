//! The operation a request names in its `_meta` (`Operations`, `OPERATION_META`).

use rmcp::ErrorData;
use rmcp::model::ProtocolVersion;
use rmcp::service::{NotificationContext, RequestContext, RoleServer, Service, ServiceRole};
use serde_json::{self, Value};
use std::borrow::Cow;

/// The request `_meta` entry a client (the agent's host) names the operation in: a tool that
/// takes an [`OperationId`](crate::OperationId) is called as that operation
/// ([`operation_scope`](crate::operation_scope)), named by the host, never by the model.
pub const OPERATION_META: &str = "idemkit/operation";

/// The operation a request's `_meta` names ([`OPERATION_META`]), if any.
pub(super) fn named_operation(meta: &serde_json::Map<String, Value>) -> Option<String> {
    meta.get(OPERATION_META)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Runs `fut` as the operation `named` (a request's), unless the host set one around it already.
pub(super) async fn as_named_operation<F: std::future::Future>(
    named: Option<&str>,
    fut: F,
) -> F::Output {
    match named {
        Some(op) if crate::operation_name().is_none() => crate::operation_scope(op, fut).await,
        _ => fut.await,
    }
}

/// An rmcp server whose requests each run as the operation the client named in the request's
/// `_meta` ([`OPERATION_META`]): a `#[side_effect]` `#[tool]` method with an
/// [`OperationId`](crate::OperationId) parameter gets that operation's id
/// ([`operation_scope`](crate::operation_scope)); rmcp's router never sees the parameter, and
/// the model never names it. A request without one runs as it would (such a tool then answers
/// a tool error, reason `no_operation`).
///
/// ```
/// use idemkit::mcp::Operations;
/// # use rmcp::ServerHandler;
/// # struct Support;
/// # impl ServerHandler for Support {}
/// let server = Operations::new(Support);
/// // Served like the handler itself: `server.serve(transport).await?`. A client calls
/// // `tools/call` with `"_meta": {"idemkit/operation": "ticket-7"}`.
/// # let _ = server;
/// ```
#[derive(Debug)]
pub struct Operations<S> {
    inner: S,
}

impl<S> Operations<S> {
    /// `inner`, each request run as the operation its `_meta` names.
    pub const fn new(inner: S) -> Self {
        Operations { inner }
    }

    /// The wrapped server.
    pub const fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Service<RoleServer>> Service<RoleServer> for Operations<S> {
    async fn handle_request(
        &self,
        request: <RoleServer as ServiceRole>::PeerReq,
        context: RequestContext<RoleServer>,
    ) -> Result<<RoleServer as ServiceRole>::Resp, ErrorData> {
        let named = named_operation(&context.meta);
        as_named_operation(
            named.as_deref(),
            self.inner.handle_request(request, context),
        )
        .await
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
