//! What the proxy passes through unchanged, unrecorded: the upstream's resources, prompts and
//! completions (they only read), and which of them it offers, from the upstream's capabilities.

use rmcp::ErrorData;
use rmcp::ServiceError;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
};
use rmcp::service::{Peer, RoleClient};

/// The proxy's capabilities: tools (with `listChanged`, which it forwards, where the upstream
/// has it), and the upstream's resources, prompts and completions as it offers them, but for
/// what the proxy does not forward (resource subscriptions, their list changes).
pub fn capabilities(upstream: Option<&ServerCapabilities>) -> ServerCapabilities {
    let mut ours = ServerCapabilities::builder().enable_tools().build();
    let Some(upstream) = upstream else {
        return ours;
    };
    if let (Some(tools), Some(theirs)) = (ours.tools.as_mut(), upstream.tools.as_ref()) {
        tools.list_changed = theirs.list_changed;
    }
    ours.resources = upstream.resources.clone().map(|mut r| {
        r.subscribe = None;
        r.list_changed = None;
        r
    });
    ours.prompts = upstream.prompts.clone().map(|mut p| {
        p.list_changed = None;
        p
    });
    ours.completions = upstream.completions.clone();
    ours
}

/// The upstream's failure as the proxy's client gets it: the upstream's own JSON-RPC error as
/// it is, any other as an internal error that says so.
fn failed(what: &str, e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(data) => data,
        other => ErrorData::internal_error(format!("the upstream's {what} failed: {other}"), None),
    }
}

pub async fn list_resources(
    peer: &Peer<RoleClient>,
    request: Option<PaginatedRequestParams>,
) -> Result<ListResourcesResult, ErrorData> {
    peer.list_resources(request)
        .await
        .map_err(|e| failed("resources/list", e))
}

pub async fn list_resource_templates(
    peer: &Peer<RoleClient>,
    request: Option<PaginatedRequestParams>,
) -> Result<ListResourceTemplatesResult, ErrorData> {
    peer.list_resource_templates(request)
        .await
        .map_err(|e| failed("resources/templates/list", e))
}

pub async fn read_resource(
    peer: &Peer<RoleClient>,
    request: ReadResourceRequestParams,
) -> Result<ReadResourceResponse, ErrorData> {
    peer.read_resource_once(request)
        .await
        .map_err(|e| failed("resources/read", e))
}

pub async fn list_prompts(
    peer: &Peer<RoleClient>,
    request: Option<PaginatedRequestParams>,
) -> Result<ListPromptsResult, ErrorData> {
    peer.list_prompts(request)
        .await
        .map_err(|e| failed("prompts/list", e))
}

pub async fn get_prompt(
    peer: &Peer<RoleClient>,
    request: GetPromptRequestParams,
) -> Result<GetPromptResponse, ErrorData> {
    peer.get_prompt_once(request)
        .await
        .map_err(|e| failed("prompts/get", e))
}

pub async fn complete(
    peer: &Peer<RoleClient>,
    request: CompleteRequestParams,
) -> Result<CompleteResult, ErrorData> {
    peer.complete(request)
        .await
        .map_err(|e| failed("completion/complete", e))
}
