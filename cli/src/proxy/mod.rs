//! `idemkit proxy --config FILE -- UPSTREAM_CMD ARGS…`: an MCP server on stdio that stands
//! between an MCP client (an agent in any language) and an upstream MCP server it spawns over
//! stdio. `tools/list` is the upstream's, each tool as the upstream lists it but for the hints the
//! proxy makes true (a keyed tool: `idempotentHint: true`); `tools/call` goes through
//! [`IdempotentClient`]: keyed, recorded in the store, replayed, never sent twice blindly (an
//! unknown outcome verified first by a read-only upstream tool where the file names one, by a
//! settler in this process too), and answered as [`for_model`] renders a call's end. Resources,
//! prompts and completions pass through unchanged and unrecorded; the upstream's
//! `tools/list_changed` is forwarded.

pub mod config;
mod http;
mod passthrough;
mod relay;
mod upstream;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use idem_runtime::{Error, Records, Settler, ToolKind};
use idemkit::mcp::{CallError, IdempotentClient, for_model};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};

use self::config::Config;
pub use self::upstream::Source;
use self::upstream::Upstream;
use crate::target::{Names, Opened, Target};

/// `idemkit proxy`'s arguments (the store's are the command's own: `--store`, …).
#[derive(clap::Args)]
pub struct Args {
    /// The proxy's configuration (TOML): `store`, `timeout`, and `[tools.NAME]` tables with
    /// `key = ["field", …]` or `read_only = true`, `resend`, `ttl`, `lease`,
    /// `in_flight_wait`, `max_attempts`, `key_name`, and `[tools.NAME.verify]` (`tool`,
    /// `applied_if`, `arguments`, `key_argument`: a read-only upstream tool asked whether an
    /// unknown outcome happened).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The upstream MCP server's command and its arguments, after `--` (spawned, over stdio).
    #[arg(
        last = true,
        required_unless_present = "upstream_url",
        value_name = "UPSTREAM_CMD"
    )]
    upstream: Vec<String>,
    /// Instead of a command: the upstream MCP server's streamable HTTP endpoint
    /// (http://host:port/mcp; https is not built in).
    #[arg(long, value_name = "URL", conflicts_with = "upstream")]
    upstream_url: Option<String>,
    /// Serves the proxy's clients over streamable HTTP at http://ADDR/mcp (e.g.
    /// 127.0.0.1:8940; port 0: one the system picks, printed on stderr) instead of on stdio.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
}

/// `idemkit proxy`, its store `store` (`--store`, else the file's, else the default SQLite
/// file). Returns the exit status: 0 when its client has gone, 1 when it could not start or
/// serve, 2 for a configuration that cannot be used.
pub fn main(args: &Args, store: Option<&str>, names: &Names) -> u8 {
    let config = match config::read(&args.config) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("idemkit proxy: {why}");
            return 2;
        }
    };
    let target = match Target::choose(store.or(config.store.as_deref())) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("idemkit proxy: {e}");
            return 2;
        }
    };
    let source = match &args.upstream_url {
        Some(url) => Source::Url(url.clone()),
        None => Source::Command(args.upstream.clone()),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let served = runtime.block_on(async {
        let opened = target
            .runtime(names)
            .await
            .map_err(|e| format!("cannot open the store {}: {e}", target.describe()))?;
        run(&args.config, config, source, opened, args.listen).await
    });
    match served {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("idemkit proxy: {why}");
            1
        }
    }
}

/// The proxy's MCP server.
#[derive(Clone)]
struct Proxy {
    config: Arc<Config>,
    upstream: Arc<Upstream>,
    info: ServerConfig,
    /// Tells the proxy's clients of the upstream's tool changes.
    relay: relay::Relay,
}

/// Serves the proxy on stdio until its client goes, or over streamable HTTP at `listen` until the
/// process ends; `Err`: why it could not start or serve.
async fn run(
    config_path: &Path,
    config: Config,
    command: Source,
    opened: Opened,
    listen: Option<SocketAddr>,
) -> Result<(), String> {
    let config = Arc::new(config);
    let relay = relay::Relay::default();
    let upstream = Arc::new(Upstream::new(
        command,
        config.clone(),
        opened.idem,
        relay.clone(),
    ));
    let client = upstream.client().await?;
    warn_unconfigured(config_path, &config, &client).await;
    // Ends with the proxy's runtime.
    let _settling = settle(&config, &client, &upstream, opened.settler, opened.records);
    let capabilities = passthrough::capabilities(upstream.capabilities().await.as_ref());
    let mut info = ServerConfig::new(capabilities).with_server_info(Implementation::new(
        "idemkit-proxy",
        env!("CARGO_PKG_VERSION"),
    ));
    if let Some(instructions) = upstream.instructions().await {
        info = info.with_instructions(instructions);
    }
    let proxy = Proxy {
        config,
        upstream,
        info,
        relay,
    };
    if let Some(addr) = listen {
        return http::serve(proxy, addr).await;
    }
    let served = proxy
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP handshake with the proxy's client failed: {e}"))?;
    served
        .waiting()
        .await
        .map_err(|e| format!("serving the proxy's client failed: {e}"))?;
    Ok(())
}

/// S31: the settler, in this process, of the unknown outcomes of the tools with a verify: one
/// left by a proxy killed mid-call, or whose caller never called again, is verified (by its verify
/// tool, with the arguments its call kept) every `settle_every`, without waiting for a client.
/// Its first pass comes one period after the start (a client's repeat meanwhile verifies at
/// once, as it would anyway), so that what a client is answered right after a restart does not
/// depend on which of the two came first. `None`: no tool has a verify.
fn settle(
    config: &Config,
    client: &IdempotentClient,
    upstream: &Arc<Upstream>,
    mut settler: Settler,
    records: Arc<dyn Records>,
) -> Option<tokio::task::JoinHandle<()>> {
    let tools = client.verified_tools();
    if tools.is_empty() {
        return None;
    }
    for tool in tools {
        let (upstream, records) = (upstream.clone(), records.clone());
        settler = settler.verify(tool, move |key| {
            let (upstream, records) = (upstream.clone(), records.clone());
            async move {
                let record = records.get(&key).await.map_err(|e| e.to_string())?;
                let record = record.ok_or_else(|| format!("the record of {key} is gone"))?;
                upstream.client().await?.verify_record(&record).await
            }
        });
    }
    // The settler holds a record while its verify tool answers (given half of it).
    let lease = (config.timeout * 2).max(std::time::Duration::from_secs(30));
    let (settler, period) = (settler.lease(lease), config.settle_every);
    Some(tokio::spawn(async move {
        tokio::time::sleep(period).await;
        // The settler passes while its handle lives: as long as this task, i.e. the proxy.
        let _handle = settler.spawn(period);
        std::future::pending::<()>().await
    }))
}

/// Says on stderr which upstream tools will be refused (neither configured nor read-only by
/// their hints) and which configured tools the upstream does not list.
async fn warn_unconfigured(path: &Path, config: &Config, client: &IdempotentClient) {
    let tools = match client.peer().list_all_tools().await {
        Ok(tools) => tools,
        Err(e) => {
            eprintln!(
                "idemkit proxy: the upstream's tools/list failed ({e}); its tools are checked at each call"
            );
            return;
        }
    };
    for tool in &tools {
        let read = tool.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true);
        if !read && !config.tools.contains_key(tool.name.as_ref()) {
            eprintln!(
                "idemkit proxy: the upstream's tool `{name}` is not read-only by its hints and has no \
                 `[tools.{name}]` in {path}: its calls are refused. Add `[tools.{name}]` with `key = [\"…\"]` \
                 (the arguments that identify one operation), or `read_only = true`",
                name = tool.name,
                path = path.display()
            );
        }
    }
    for name in config.tools.keys() {
        if !tools.iter().any(|t| t.name == *name) {
            eprintln!(
                "idemkit proxy: `[tools.{name}]` in {} names a tool the upstream does not list",
                path.display()
            );
        }
        let verify = config.tools[name].remote.verification();
        if let Some(verify) = verify
            && !tools.iter().any(|t| t.name == verify.tool())
        {
            eprintln!(
                "idemkit proxy: `[tools.{name}.verify]` in {} names `{}`, a tool the upstream does not list: \
                 an unknown outcome of `{name}` stays unknown until it does",
                path.display(),
                verify.tool()
            );
        }
    }
}

impl Proxy {
    /// The tool as the upstream lists it, with the hints the proxy makes true.
    fn annotate(&self, tool: &mut Tool) {
        let Some(config) = self.config.tools.get(tool.name.as_ref()) else {
            return;
        };
        let hints = tool
            .annotations
            .get_or_insert_with(ToolAnnotations::default);
        if config.read_only {
            hints.read_only_hint = Some(true);
        } else {
            // Through the proxy, a repeat with the same key fields is answered from the record.
            hints.read_only_hint = Some(false);
            hints.idempotent_hint = Some(true);
        }
    }

    /// The call's end as the model reads it.
    async fn call(&self, params: CallToolRequestParams) -> CallToolResult {
        let name = params.name.to_string();
        let configured = self.config.tools.get(&name);
        let fields = configured.map(|c| c.key.clone()).unwrap_or_default();
        let ended = match self.upstream.client().await {
            Ok(client) => client.call_tool(params).await,
            Err(why) => {
                eprintln!("idemkit proxy: {why}");
                // Nothing was sent: calling again (once the upstream starts) is safe.
                Err(CallError::Upstream {
                    tool: name.clone(),
                    key: None,
                    failure: idem_runtime::Failure::Transient,
                    source: rmcp::ServiceError::TransportClosed,
                })
            }
        };
        let ended = match ended {
            // The client's refusal names its Rust API; the proxy's user writes the file.
            Err(CallError::Idem(Error::Settings { tool, reason })) if configured.is_none() => {
                let why = if reason.contains("does not list it") {
                    "the upstream does not list it in `tools/list`"
                } else {
                    "the upstream does not mark it read-only (`readOnlyHint` is not true)"
                };
                Err(CallError::Idem(Error::Settings {
                    reason: format!(
                        "{why}, and the proxy's \
                         configuration has no `[tools.{tool}]`, so a repeat after a lost answer could act twice. \
                         The proxy's operator adds `[tools.{tool}]` with `key = [\"…\"]` (the arguments that \
                         identify one operation), or `read_only = true` if it only reads"
                    ),
                    tool,
                }))
            }
            other => other,
        };
        let kind = match configured {
            Some(c) if !c.read_only => ToolKind::SideEffect,
            // A configured read, or an unconfigured tool that was not refused: read-only by its hints.
            _ => ToolKind::ReadOnly,
        };
        for_model(&ended, kind, &fields)
    }
}

/// The upstream's peer, for what the proxy passes through.
macro_rules! through {
    ($proxy:expr, $what:ident, $request:expr) => {{
        let client = $proxy
            .upstream
            .client()
            .await
            .map_err(|why| ErrorData::internal_error(why, None))?;
        passthrough::$what(client.peer(), $request).await
    }};
}

impl ServerHandler for Proxy {
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.relay.joined(context.peer);
    }
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        through!(self, list_resources, request)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        through!(self, list_resource_templates, request)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        through!(self, read_resource, request)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        through!(self, list_prompts, request)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        through!(self, get_prompt, request)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        through!(self, complete, request)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let client = self
            .upstream
            .client()
            .await
            .map_err(|why| ErrorData::internal_error(why, None))?;
        let mut listed = client.peer().list_tools(request).await.map_err(|e| {
            ErrorData::internal_error(format!("the upstream's tools/list failed: {e}"), None)
        })?;
        for tool in &mut listed.tools {
            self.annotate(tool);
        }
        Ok(listed)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResponse::Complete(self.call(request).await))
    }

    fn get_info(&self) -> ServerConfig {
        self.info.clone()
    }
}
