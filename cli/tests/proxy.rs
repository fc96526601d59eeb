//! `idemkit proxy` as a child process between an rmcp client (this test) and an upstream MCP
//! server over stdio (this test binary again, as `upstream_entry`) that counts every request and
//! every effect in files, across its own restarts, and can commit and then exit without answering
//! (`drop`), commit and then never answer (`hang`), or exit before committing (`crash`). Effects are
//! counted at the upstream. The proxy is killed with SIGKILL and restarted on its SQLite file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rmcp::model::{
    ArgumentInfo, CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams,
    CompleteResult, CompletionInfo, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    ListPromptsResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams, Prompt,
    PromptMessage, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference,
    Resource, ResourceContents, ResultType, Role, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// The folder the upstream keeps its counts in, when this binary runs as the upstream.
const UPSTREAM: &str = "IDEMKIT_TEST_UPSTREAM_DIR";
const KEY_META: &str = "idemkit/idempotency-key";

// ---- The upstream (this binary, started by the proxy) ----

/// The upstream MCP server, when the proxy starts this binary as one.
#[tokio::test]
async fn upstream_entry() {
    if let Some(dir) = std::env::var_os(UPSTREAM) {
        let server = Upstream {
            dir: PathBuf::from(dir),
        };
        let code = match server.serve(rmcp::transport::stdio()).await {
            Ok(served) => {
                let _ = served.waiting().await;
                0
            }
            Err(e) => {
                eprintln!("test upstream: {e}");
                1
            }
        };
        std::process::exit(code);
    }
}

#[derive(Clone)]
struct Upstream {
    dir: PathBuf,
}

fn append(path: &Path, line: &Value) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(file, "{line}").unwrap();
    file.sync_all().unwrap();
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Ends the upstream's process (a crash, or an exit before its answer is written): only ever
/// called in the upstream, a child process of the proxy.
fn child_ends(code: i32) -> ! {
    std::process::exit(code)
}

fn upstream_tool(name: &'static str, hints: Option<ToolAnnotations>) -> Tool {
    let Value::Object(schema) = json!({"type": "object"}) else {
        unreachable!()
    };
    let mut tool = Tool::new_with_raw(name, Some(format!("the test's {name}").into()), schema);
    tool.annotations = hints;
    tool
}

impl Upstream {
    /// The next fault, taken off the `faults` file.
    fn next_fault(&self) -> Option<String> {
        let path = self.dir.join("faults");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut faults = text.lines();
        let first = faults.next().map(str::to_owned);
        let rest: Vec<&str> = faults.collect();
        std::fs::write(&path, rest.join("\n")).unwrap();
        first.filter(|f| !f.is_empty())
    }

    async fn side_effect(&self, name: &str, key: Option<String>, args: Value) -> CallToolResult {
        let fault = self.next_fault();
        if fault.as_deref() == Some("crash") {
            child_ends(3);
        }
        let effects = self.dir.join("effects");
        // A server that honours the key it is sent in `_meta`: the first answer of that key.
        if name == "charge_dedup"
            && let Some(key) = &key
            && let Some(done) = lines(&effects).into_iter().find(|e| e["key"] == json!(key))
        {
            return CallToolResult::structured(done["answer"].clone());
        }
        let n = lines(&effects).iter().filter(|e| e["tool"] == name).count() + 1;
        let answer = json!({"charge": format!("ch_{n}"), "cents": args["cents"]});
        append(
            &effects,
            &json!({"tool": name, "key": key, "args": args, "answer": answer}),
        );
        match fault.as_deref() {
            // Committed; the process ends before its answer is written.
            Some("drop") => child_ends(0),
            Some("hang") => std::future::pending::<()>().await,
            // Committed; the answer comes 5 s later (a concurrent duplicate arrives meanwhile).
            Some("slow") => tokio::time::sleep(Duration::from_secs(5)).await,
            _ => {}
        }
        CallToolResult::structured(answer)
    }

    /// Counts a request the proxy passes through (in `requests`, as a tool's, by its method).
    fn passed(&self, method: &str) {
        append(
            &self.dir.join("requests"),
            &json!({"tool": method, "key": null, "args": {}}),
        );
    }

    /// docs/proxy.md's payments server's `list_charges` (served while the file `payments`
    /// exists): the charges `create_charge` committed for a customer and invoice.
    fn list_charges(&self, args: &Value) -> CallToolResult {
        let charges: Vec<Value> = lines(&self.dir.join("effects"))
            .into_iter()
            .filter(|e| {
                e["tool"] == "create_charge"
                    && e["args"]["customer_id"] == args["customer_id"]
                    && e["args"]["invoice_id"] == args["invoice_id"]
            })
            .map(|e| e["answer"].clone())
            .collect();
        CallToolResult::structured(json!({ "charges": charges }))
    }

    /// `charge`'s verify tool: looks the charge up by its customer and invoice in the effects
    /// committed; answers an error (it cannot tell) while the file `verify_fails` exists.
    fn find_charge(&self, args: &Value) -> CallToolResult {
        if self.dir.join("verify_fails").exists() {
            return CallToolResult::error(vec![rmcp::model::ContentBlock::text(
                "the charges' index is down",
            )]);
        }
        let found = lines(&self.dir.join("effects")).into_iter().find(|e| {
            e["tool"] == "charge"
                && e["args"]["customer_id"] == args["customer_id"]
                && e["args"]["invoice"] == args["invoice"]
        });
        CallToolResult::structured(json!({
            "found": found.is_some(),
            "charge": found.map(|e| e["answer"]["charge"].clone()),
        }))
    }
}

impl ServerHandler for Upstream {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = request
            .meta
            .as_ref()
            .and_then(|m| m.0.0.get(KEY_META))
            .or_else(|| context.meta.0.0.get(KEY_META))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let args = Value::Object(request.arguments.unwrap_or_default());
        let name = request.name.to_string();
        append(
            &self.dir.join("requests"),
            &json!({"tool": name, "key": key, "args": args}),
        );
        let result = match name.as_str() {
            "balance" | "get_balance" => CallToolResult::structured(json!({"cents": 4200})),
            "list_charges" => self.list_charges(&args),
            "create_charge" | "refund_charge" => self.side_effect(&name, key, args).await,
            "find_charge" => self.find_charge(&args),
            // Changes the listing (`report` appears, read-only) and says so.
            "relist" => {
                std::fs::write(self.dir.join("relisted"), "").unwrap();
                let _ = context.peer.notify_tool_list_changed().await;
                CallToolResult::structured(json!({"relisted": true}))
            }
            "report" => CallToolResult::structured(json!({"report": "ok"})),
            "charge" | "charge_dedup" | "send_email" => self.side_effect(&name, key, args).await,
            _ => return Err(ErrorData::invalid_params("no such tool", None)),
        };
        Ok(CallToolResponse::Complete(result))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let hints = |read_only, idempotent| {
            Some(ToolAnnotations::from_raw(
                Some("upstream's title".into()),
                Some(read_only),
                Some(true),
                Some(idempotent),
                None,
            ))
        };
        // docs/proxy.md's payments server, as the README's line runs it.
        if self.dir.join("payments").exists() {
            return Ok(ListToolsResult::with_all_items(vec![
                upstream_tool("create_charge", hints(false, false)),
                upstream_tool("refund_charge", hints(false, false)),
                upstream_tool("get_balance", hints(true, true)),
                upstream_tool("list_charges", hints(true, true)),
            ]));
        }
        let mut tools = vec![
            upstream_tool("balance", hints(true, true)),
            upstream_tool("charge", hints(false, false)),
            upstream_tool("find_charge", hints(true, true)),
            upstream_tool("relist", hints(true, true)),
            upstream_tool("charge_dedup", hints(false, true)),
            upstream_tool("send_email", None),
        ];
        if self.dir.join("relisted").exists() {
            tools.push(upstream_tool("report", hints(true, true)));
        }
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools,
            meta: None,
            next_cursor: None,
            ttl_ms: None,
            cache_scope: None,
        })
    }

    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_prompts()
            .enable_completions()
            .build();
        ServerConfig::new(capabilities).with_instructions("the test upstream's instructions")
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.passed("resources/list");
        let resource = Resource::new("test://balance", "balance").with_description("the balance");
        Ok(ListResourcesResult::with_all_items(vec![resource]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.passed("resources/read");
        if request.uri != "test://balance" {
            return Err(ErrorData::resource_not_found("no such resource", None));
        }
        let text = ResourceContents::text("4200 cents", request.uri);
        Ok(ReadResourceResponse::Complete(ReadResourceResult::new(
            vec![text],
        )))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.passed("prompts/list");
        let prompt = Prompt::new("greeting", Some("greets someone"), None);
        Ok(ListPromptsResult::with_all_items(vec![prompt]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.passed("prompts/get");
        let name = request
            .arguments
            .and_then(|a| a.get("name").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        let message = PromptMessage::new_text(Role::User, format!("Hello, {name}"));
        Ok(GetPromptResponse::Complete(GetPromptResult::new(vec![
            message,
        ])))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.passed("completion/complete");
        let values = ["Ada", "Alan", "Grace"]
            .into_iter()
            .filter(|v| v.starts_with(request.argument.value.as_str()))
            .map(str::to_owned)
            .collect();
        Ok(CompleteResult::new(CompletionInfo::new(values).unwrap()))
    }
}

// ---- The test's side: a folder, the proxy, its client ----

struct Rig {
    dir: tempfile::TempDir,
}

struct Proxy {
    client: RunningService<RoleClient, ()>,
    pid: u32,
}

impl Rig {
    fn new(config: &str) -> Rig {
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::write(dir.path().join("proxy.toml"), config).unwrap();
        Rig { dir }
    }

    async fn proxy(&self) -> Proxy {
        let (client, pid) = self.proxy_with(()).await;
        Proxy { client, pid }
    }

    /// The proxy, its client's notifications handled by `handler`.
    async fn proxy_with<H: rmcp::ClientHandler>(
        &self,
        handler: H,
    ) -> (RunningService<RoleClient, H>, u32) {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemkit"));
        command
            .arg("proxy")
            .arg("--config")
            .arg(self.dir.path().join("proxy.toml"))
            .arg("--")
            .arg(std::env::current_exe().unwrap())
            // Terse: the harness writes nothing on stdout before the test ends (stdout is the protocol).
            .args([
                "upstream_entry",
                "--exact",
                "--quiet",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(UPSTREAM, self.dir.path())
            .env_remove("IDEMKIT_STORE")
            .env_remove("IDEMKIT_DB");
        let transport = TokioChildProcess::new(command).expect("the proxy starts");
        let pid = transport.id().expect("the proxy's pid");
        let client = handler
            .serve(transport)
            .await
            .expect("the MCP handshake with the proxy");
        (client, pid)
    }

    fn fault(&self, fault: &str) {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("faults"))
            .unwrap();
        writeln!(file, "{fault}").unwrap();
    }

    /// What reached the upstream of `tool`: the key in `_meta` and the arguments.
    fn requests(&self, tool: &str) -> Vec<(Value, Value)> {
        lines(&self.dir.path().join("requests"))
            .into_iter()
            .filter(|r| r["tool"] == tool)
            .map(|r| (r["key"].clone(), r["args"].clone()))
            .collect()
    }

    /// The effects of `tool` committed at the upstream.
    fn effects(&self, tool: &str) -> usize {
        lines(&self.dir.path().join("effects"))
            .iter()
            .filter(|e| e["tool"] == tool)
            .count()
    }

    /// Waits until the upstream has committed `n` effects of `tool`.
    async fn until_effects(&self, tool: &str, n: usize) {
        let start = Instant::now();
        while self.effects(tool) < n {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the upstream never committed {n} `{tool}`"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `idemkit ARGS --store` this rig's store.
    fn idemkit(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_idemkit"))
            .args(args)
            .arg("--store")
            .arg(self.dir.path().join("proxy.db"))
            .output()
            .unwrap()
    }
}

impl Proxy {
    async fn call(&self, name: &'static str, arguments: Value) -> CallToolResult {
        let Value::Object(arguments) = arguments else {
            panic!("arguments are an object")
        };
        let params = CallToolRequestParams::new(name).with_arguments(arguments);
        self.client
            .call_tool(params)
            .await
            .expect("the proxy answers")
    }

    fn sigkill(&self) {
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &self.pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
    }
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn structured(result: &CallToolResult) -> Value {
    result.structured_content.clone().unwrap_or(Value::Null)
}

const CONFIG: &str = r#"
store = "proxy.db"
timeout = "20s"

[tools.charge]
key = ["customer_id", "invoice"]
resend = false
lease = "1s"
in_flight_wait = "30s"

[tools.charge_dedup]
key = ["customer_id", "invoice"]
lease = "1s"
in_flight_wait = "30s"

[tools.balance]
read_only = true
"#;

/// tools/list through the proxy is the upstream's, each tool as listed (name, description,
/// schema, title, other hints) but for the hints the proxy makes true: a keyed tool is
/// idempotent through it. The upstream's instructions reach the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_lists_the_upstreams_tools_with_the_hints_it_makes_true() {
    let rig = Rig::new(CONFIG);
    let proxy = rig.proxy().await;
    let tools = proxy.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "balance",
            "charge",
            "find_charge",
            "relist",
            "charge_dedup",
            "send_email"
        ]
    );
    let hints = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        assert_eq!(
            tool.description.as_deref(),
            Some(format!("the test's {name}").as_str())
        );
        serde_json::to_value(&tool.annotations).unwrap()
    };
    let upstream = |read_only: bool, idempotent: bool| json!({"title": "upstream's title", "readOnlyHint": read_only, "destructiveHint": true, "idempotentHint": idempotent});
    assert_eq!(hints("balance"), upstream(true, true));
    // The upstream says a repeat of `charge` acts again; through the proxy it does not.
    assert_eq!(hints("charge"), upstream(false, true));
    assert_eq!(hints("charge_dedup"), upstream(false, true));
    assert_eq!(hints("send_email"), Value::Null);
    let info = proxy.client.peer_info().unwrap();
    assert_eq!(
        info.instructions.as_deref(),
        Some("the test upstream's instructions")
    );
}

/// The issue's "done": against an upstream that commits and drops its answer (it exits before
/// writing it), a repeated call through the proxy reaches the upstream once, counted there. The
/// first call is told the outcome is unknown and the repeat is refused, not sent. With a tool
/// whose upstream deduplicates by the key in `_meta` (`idempotentHint: true`, so resend), the
/// repeat is sent again with the same key to the restarted upstream, which answers the first
/// charge: one effect, and a third call is a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_a_repeat_after_the_upstream_commits_and_drops_its_answer_reaches_it_once() {
    let rig = Rig::new(CONFIG);
    let proxy = rig.proxy().await;
    let args = json!({"customer_id": "cus_1", "invoice": "inv_1", "cents": 4200});

    rig.fault("drop");
    let first = proxy.call("charge", args.clone()).await;
    println!("first: {}", text(&first));
    assert_eq!(first.is_error, Some(true), "{first:?}");
    assert_eq!(structured(&first)["reason"], "ambiguous", "{first:?}");
    let second = proxy.call("charge", args.clone()).await;
    println!("repeat: {}", text(&second));
    assert_eq!(second.is_error, Some(true), "{second:?}");
    assert_eq!(structured(&second)["reason"], "ambiguous", "{second:?}");
    assert_eq!(rig.requests("charge").len(), 1);
    assert_eq!(rig.effects("charge"), 1);
    let key = rig.requests("charge")[0].0.clone();
    assert!(key.is_string(), "the key in _meta: {key}");
    assert_eq!(structured(&second)["idempotencyKey"], key);
    // The key `idemkit key` derives offline from the tool's name and key fields.
    let derived = rig.idemkit(&["key", "charge", "customer_id=cus_1", "invoice=inv_1"]);
    assert_eq!(String::from_utf8(derived.stdout).unwrap().trim(), key);

    rig.fault("drop");
    let first = proxy.call("charge_dedup", args.clone()).await;
    println!("dedup first: {}", text(&first));
    let again = proxy.call("charge_dedup", args.clone()).await;
    println!("dedup repeat: {}", text(&again));
    assert_ne!(again.is_error, Some(true), "{again:?}");
    assert_eq!(structured(&again)["charge"], "ch_1");
    let sent = rig.requests("charge_dedup");
    assert!(sent.len() >= 2, "sent again: {sent:?}");
    assert!(
        sent.iter().all(|(k, _)| *k == sent[0].0),
        "one key: {sent:?}"
    );
    assert_eq!(rig.effects("charge_dedup"), 1);
    let replay = proxy.call("charge_dedup", args).await;
    assert!(text(&replay).starts_with("Replayed:"), "{}", text(&replay));
    assert_eq!(structured(&replay)["charge"], "ch_1");
    assert_eq!(rig.requests("charge_dedup").len(), sent.len());
}

/// `charge` verified by the upstream's read-only `find_charge` (S19), otherwise as `CONFIG`.
const VERIFIED: &str = r#"
store = "proxy.db"
timeout = "20s"

[tools.charge]
key = ["customer_id", "invoice"]
resend = false
lease = "1s"
in_flight_wait = "30s"

[tools.charge.verify]
tool = "find_charge"
arguments = ["customer_id", "invoice"]
key_argument = "idempotency_key"
applied_if = "/found"
"#;

/// S19 through the proxy, against an upstream that commits and exits before answering, with
/// `[tools.charge.verify]` naming its read-only `find_charge`. The repeat asks it before
/// anything is sent again: found, so the client gets an answer and the upstream charged once;
/// for a charge the upstream crashed before committing, not found, so it is charged once, sent
/// again under the same key; while `find_charge` answers an error, the outcome stays unknown and
/// nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_s19_an_unknown_outcome_is_verified_by_a_read_only_upstream_tool() {
    let rig = Rig::new(VERIFIED);
    let proxy = rig.proxy().await;
    let args = |invoice: &str| json!({"customer_id": "cus_1", "invoice": invoice, "cents": 4200});
    let finds = || rig.requests("find_charge");

    rig.fault("drop");
    let first = proxy.call("charge", args("inv_1")).await;
    assert_eq!(structured(&first)["reason"], "ambiguous", "{first:?}");
    let repeat = proxy.call("charge", args("inv_1")).await;
    assert_ne!(repeat.is_error, Some(true), "{repeat:?}");
    assert_eq!(
        structured(&repeat),
        json!({"found": true, "charge": "ch_1"})
    );
    let key = rig.requests("charge")[0].0.clone();
    assert_eq!(
        finds().last().unwrap().1,
        json!({"customer_id": "cus_1", "invoice": "inv_1", "idempotency_key": key})
    );
    let replay = proxy.call("charge", args("inv_1")).await;
    assert!(text(&replay).starts_with("Replayed:"), "{}", text(&replay));
    assert_eq!(
        (rig.effects("charge"), rig.requests("charge").len()),
        (1, 1)
    );

    rig.fault("crash");
    let crashed = proxy.call("charge", args("inv_2")).await;
    assert_eq!(structured(&crashed)["reason"], "ambiguous", "{crashed:?}");
    let asked = finds().len();
    let charged = proxy.call("charge", args("inv_2")).await;
    assert_eq!(structured(&charged)["charge"], "ch_2", "{charged:?}");
    assert_eq!(finds().len(), asked + 1);
    let sent: Vec<Value> = rig.requests("charge").into_iter().map(|r| r.0).collect();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[1], sent[2], "sent again under its key");
    assert_eq!(rig.effects("charge"), 2);

    std::fs::write(rig.dir.path().join("verify_fails"), "").unwrap();
    rig.fault("drop");
    let dropped = proxy.call("charge", args("inv_3")).await;
    assert_eq!(structured(&dropped)["reason"], "ambiguous", "{dropped:?}");
    let asked = finds().len();
    let unknown = proxy.call("charge", args("inv_3")).await;
    assert_eq!(structured(&unknown)["reason"], "ambiguous", "{unknown:?}");
    assert_eq!(finds().len(), asked + 1, "asked, and it could not tell");
    assert_eq!(
        (rig.effects("charge"), rig.requests("charge").len()),
        (3, 4)
    );
}

/// S31 through the proxy: SIGKILLed while the upstream holds a committed charge (a tool with a
/// verify), then started again on its SQLite file. Its settler (`settle_every`) finds the dead
/// proxy's call once its lease lapsed and asks `find_charge` with the arguments the call kept,
/// before any client calls again; the client's repeat is then a replay: one charge, nothing
/// sent or asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_s31_restarted_its_settler_verifies_a_killed_call_without_waiting_for_the_client() {
    let rig = Rig::new(&format!("settle_every = \"100ms\"\n{VERIFIED}"));
    let before = rig.proxy().await;
    let args = json!({"customer_id": "cus_1", "invoice": "inv_1", "cents": 4200});
    rig.fault("hang");
    let peer = before.client.peer().clone();
    let Value::Object(first) = args.clone() else {
        unreachable!()
    };
    let pending = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("charge").with_arguments(first))
            .await
    });
    rig.until_effects("charge", 1).await;
    before.sigkill();
    assert!(pending.await.unwrap().is_err(), "the killed proxy answered");

    let after = rig.proxy().await;
    let start = Instant::now();
    while rig.requests("find_charge").is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the restarted proxy's settler never asked find_charge"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let key = rig.requests("charge")[0].0.clone();
    assert_eq!(
        rig.requests("find_charge")[0].1,
        json!({"customer_id": "cus_1", "invoice": "inv_1", "idempotency_key": key})
    );
    // The settler holds the record while it asks; the repeat waits for it, then replays.
    let repeat = after.call("charge", args).await;
    assert!(text(&repeat).starts_with("Replayed:"), "{}", text(&repeat));
    assert_eq!(
        structured(&repeat),
        json!({"found": true, "charge": "ch_1"})
    );
    assert_eq!(
        (
            rig.effects("charge"),
            rig.requests("charge").len(),
            rig.requests("find_charge").len()
        ),
        (1, 1, 1)
    );
}

/// Resources, prompts and completions are the upstream's, passed through unchanged and not
/// recorded: the proxy offers them as the upstream does (not its subscriptions), and each request
/// reaches the upstream and comes back as it answered, an error included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_passes_resources_prompts_and_completions_through_unrecorded() {
    let rig = Rig::new(CONFIG);
    let proxy = rig.proxy().await;
    let offered = proxy.client.peer_info().unwrap().capabilities.clone();
    assert!(
        offered.resources.is_some() && offered.prompts.is_some() && offered.completions.is_some()
    );
    let peer = proxy.client.peer();

    let resources = peer.list_resources(None).await.unwrap();
    assert_eq!(resources.resources.len(), 1);
    assert_eq!(resources.resources[0].uri, "test://balance");
    assert_eq!(
        resources.resources[0].description.as_deref(),
        Some("the balance")
    );
    let read = peer
        .read_resource(ReadResourceRequestParams::new("test://balance"))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&read.contents).unwrap(),
        json!([{"uri": "test://balance", "mimeType": "text/plain", "text": "4200 cents"}])
    );
    let missing = peer
        .read_resource(ReadResourceRequestParams::new("test://nothing"))
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("no such resource"),
        "{missing}"
    );

    let prompts = peer.list_prompts(None).await.unwrap();
    assert_eq!(prompts.prompts[0].name, "greeting");
    let Value::Object(arguments) = json!({"name": "Ada"}) else {
        unreachable!()
    };
    let prompt = peer
        .get_prompt(GetPromptRequestParams::new("greeting").with_arguments(arguments))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&prompt.messages).unwrap()[0]["content"]["text"],
        "Hello, Ada"
    );
    let completed = peer
        .complete(CompleteRequestParams::new(
            Reference::for_prompt("greeting"),
            ArgumentInfo::new("name", "A"),
        ))
        .await
        .unwrap();
    assert_eq!(completed.completion.values, ["Ada", "Alan"]);

    for method in [
        "resources/list",
        "resources/read",
        "prompts/list",
        "prompts/get",
        "completion/complete",
    ] {
        assert!(
            !rig.requests(method).is_empty(),
            "{method} reached the upstream"
        );
    }
    // Nothing of them is recorded: the store holds no record.
    let listed = rig.idemkit(&["list", "--json"]);
    assert!(listed.status.success(), "{listed:?}");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.trim(), "[]", "no record");
}

/// Counts the `notifications/tools/list_changed` a client of the proxy receives.
#[derive(Clone, Default)]
struct Changes(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl rmcp::ClientHandler for Changes {
    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `notifications/tools/list_changed` from the upstream: the proxy reads the tools' hints again
/// (a tool it refused as unlisted is now listed read-only, and passes through) and forwards the
/// notification to its client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_forwards_tools_list_changed_and_reads_the_hints_again() {
    let rig = Rig::new(CONFIG);
    let changes = Changes::default();
    let (client, _pid) = rig.proxy_with(changes.clone()).await;
    let call = |name: &'static str| {
        let peer = client.peer().clone();
        async move {
            peer.call_tool(CallToolRequestParams::new(name))
                .await
                .expect("the proxy answers")
        }
    };
    let offered = client.peer_info().unwrap().capabilities.clone();
    assert_eq!(offered.tools.and_then(|t| t.list_changed), Some(true));

    let refused = call("report").await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(
        text(&refused).contains("[tools.report]") && text(&refused).contains("does not list it"),
        "{}",
        text(&refused)
    );
    assert!(rig.requests("report").is_empty());

    call("relist").await;
    let start = Instant::now();
    while changes.0.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the proxy never forwarded the upstream's tools/list_changed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let tools = client.list_all_tools().await.unwrap();
    let report = tools
        .iter()
        .find(|t| t.name == "report")
        .expect("listed now");
    assert_eq!(
        report.annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );
    let read = call("report").await;
    assert_ne!(read.is_error, Some(true), "{read:?}");
    assert_eq!(structured(&read), json!({"report": "ok"}));
    assert_eq!(rig.requests("report").len(), 1);
}

/// The proxy SIGKILLed while the upstream holds a committed call, and restarted on its SQLite
/// file: nothing runs twice. A call that completed before the kill is replayed after it; the
/// interrupted one, once its dead holder's lease lapses, is kept as unknown (resend = false:
/// refused, listed by `idemkit list --state ambiguous`) or sent again under its key to an
/// upstream that deduplicates (one effect).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_killed_mid_call_and_restarted_on_its_sqlite_file_runs_nothing_twice() {
    let rig = Rig::new(CONFIG);
    let before = rig.proxy().await;
    let done = json!({"customer_id": "cus_1", "invoice": "inv_0", "cents": 100});
    let answered = before.call("charge", done.clone()).await;
    assert_eq!(structured(&answered)["charge"], "ch_1");

    let args = json!({"customer_id": "cus_1", "invoice": "inv_1", "cents": 4200});
    rig.fault("hang");
    let client = before.client.peer().clone();
    let a = args.clone();
    let pending = tokio::spawn(async move {
        let Value::Object(a) = a else { unreachable!() };
        client
            .call_tool(CallToolRequestParams::new("charge").with_arguments(a))
            .await
    });
    rig.until_effects("charge", 2).await;
    // `charge` hangs; kill the proxy with the charge committed and unanswered.
    before.sigkill();
    let charge = pending.await.unwrap();
    assert!(charge.is_err(), "the killed proxy answered: {charge:?}");

    let after = rig.proxy().await;
    let replayed = after.call("charge", done).await;
    assert!(
        text(&replayed).starts_with("Replayed:"),
        "{}",
        text(&replayed)
    );
    assert_eq!(structured(&replayed)["charge"], "ch_1");
    let repeat = after.call("charge", args.clone()).await;
    println!("after restart: {}", text(&repeat));
    assert_eq!(repeat.is_error, Some(true), "{repeat:?}");
    assert_eq!(structured(&repeat)["reason"], "ambiguous", "{repeat:?}");
    assert_eq!(rig.requests("charge").len(), 2);
    assert_eq!(rig.effects("charge"), 2);
    let listed = rig.idemkit(&["list", "--state", "ambiguous", "--json"]);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(listed.contains("\"charge\""), "{listed}");

    // The same for a tool whose upstream deduplicates: committed, the proxy killed, restarted.
    let dedup = rig.proxy().await;
    rig.fault("hang");
    let client = dedup.client.peer().clone();
    let b = args.clone();
    let pending = tokio::spawn(async move {
        let Value::Object(b) = b else { unreachable!() };
        client
            .call_tool(CallToolRequestParams::new("charge_dedup").with_arguments(b))
            .await
    });
    rig.until_effects("charge_dedup", 1).await;
    dedup.sigkill();
    assert!(pending.await.unwrap().is_err());
    let last = rig.proxy().await;
    let repeat = last.call("charge_dedup", args).await;
    println!("dedup after restart: {}", text(&repeat));
    assert_ne!(repeat.is_error, Some(true), "{repeat:?}");
    assert_eq!(structured(&repeat)["charge"], "ch_1");
    assert_eq!(rig.effects("charge_dedup"), 1);
    let sent = rig.requests("charge_dedup");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0].0, sent[1].0, "the same key: {sent:?}");
    drop((after, last));
}

/// A read passes through unkeyed; a tool neither configured nor read-only is refused with what to
/// write in the proxy's file, never sent; an upstream that crashed is started again for the next
/// call, and a call it crashed on before committing is unknown to the proxy (kept), not re-sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_reads_unkeyed_refuses_unconfigured_tools_and_restarts_a_crashed_upstream() {
    let rig = Rig::new(CONFIG);
    let proxy = rig.proxy().await;
    let balance = proxy.call("balance", json!({"customer_id": "cus_1"})).await;
    assert_eq!(structured(&balance), json!({"cents": 4200}));
    assert_eq!(rig.requests("balance")[0].0, Value::Null);

    let refused = proxy.call("send_email", json!({"to": "a@b.c"})).await;
    assert_eq!(refused.is_error, Some(true));
    let said = text(&refused);
    assert!(
        said.contains("[tools.send_email]") && said.contains("read_only = true"),
        "{said}"
    );
    assert!(rig.requests("send_email").is_empty());

    rig.fault("crash");
    let args = json!({"customer_id": "cus_2", "invoice": "inv_9", "cents": 10});
    let crashed = proxy.call("charge", args.clone()).await;
    assert_eq!(crashed.is_error, Some(true), "{crashed:?}");
    assert_eq!(rig.effects("charge"), 0);
    let balance = proxy.call("balance", json!({"customer_id": "cus_1"})).await;
    assert_eq!(
        structured(&balance),
        json!({"cents": 4200}),
        "a new upstream answers"
    );
    let other = json!({"customer_id": "cus_2", "invoice": "inv_10", "cents": 10});
    let charged = proxy.call("charge", other).await;
    assert_eq!(structured(&charged)["charge"], "ch_1");
    assert_eq!(rig.effects("charge"), 1);
}

/// The configurations shown in docs/proxy.md are accepted by the proxy as written: each block
/// under a heading is written to a file and `idemkit proxy --config` is run with it against the
/// test upstream, whose tools/list the proxy then serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_page_configurations_run_as_written() {
    let page = include_str!("../../docs/proxy.md");
    let blocks: Vec<&str> = page
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert!(
        blocks.len() >= 2,
        "the page shows the payments and ticketing configurations"
    );
    for block in blocks {
        let rig = Rig::new(block);
        let proxy = rig.proxy().await;
        let tools = proxy.client.list_all_tools().await.unwrap();
        assert_eq!(tools.len(), 6, "{block}");
        drop(proxy);
    }
}

/// The README's line for the proxy, run as written: `idemkit proxy --config payments.toml --
/// payments-mcp-server`, in a folder holding docs/proxy.md's `payments.toml` as the page shows
/// it, with a `payments-mcp-server` on the PATH (this file's upstream, serving that page's
/// payments tools). A charge the server commits and whose answer it drops is charged once: the
/// repeat is looked up with `list_charges` (the page's verify) and answered with the listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_runs_from_the_readmes_line_as_written() {
    let readme = include_str!("../../README.md");
    let line = readme
        .split('`')
        .find(|s| s.starts_with("idemkit proxy --config payments.toml"))
        .expect("the README shows the proxy's command line");
    let page = include_str!("../../docs/proxy.md");
    let config = page
        .split("```toml\n")
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.starts_with("# payments.toml"))
        .expect("docs/proxy.md shows payments.toml");
    let rig = Rig::new("");
    let dir = rig.dir.path();
    std::fs::write(dir.join("payments.toml"), config).unwrap();
    std::fs::write(dir.join("payments"), "").unwrap();
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[0], "idemkit");
    let server = bin.join(words.last().unwrap());
    std::fs::write(
        &server,
        format!(
            "#!/bin/sh\nexec '{}' upstream_entry --exact --quiet --nocapture --test-threads=1\n",
            std::env::current_exe().unwrap().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&server, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemkit"));
    command
        .args(&words[1..])
        .current_dir(dir)
        .env("PATH", path)
        .env(UPSTREAM, dir)
        .env_remove("IDEMKIT_STORE")
        .env_remove("IDEMKIT_DB");
    let transport = TokioChildProcess::new(command).expect("the proxy starts");
    let pid = transport.id().expect("the proxy's pid");
    let client = ().serve(transport).await.expect("the MCP handshake");
    let proxy = Proxy { client, pid };
    assert_eq!(proxy.client.list_all_tools().await.unwrap().len(), 4);

    let charge = json!({"customer_id": "cus_1", "invoice_id": "inv_1", "cents": 4200});
    rig.fault("drop");
    let first = proxy.call("create_charge", charge.clone()).await;
    let repeat = proxy.call("create_charge", charge.clone()).await;
    assert_ne!(
        repeat.is_error,
        Some(true),
        "first: {first:?}; repeat: {repeat:?}"
    );
    assert_eq!(
        structured(&repeat),
        json!({"charges": [{"charge": "ch_1", "cents": 4200}]}),
        "the listing answers the lost charge"
    );
    assert_eq!(rig.effects("create_charge"), 1);
    assert_eq!(rig.requests("create_charge").len(), 1, "never sent again");
    assert!(
        dir.join("payments.db").exists(),
        "records in the file the configuration names, next to it"
    );
}

/// The official Python MCP SDK as the proxy's client (cli/tests/proxy_client.py). Left out by
/// scripts/test.sh where the SDK is not installed (and a failure under CI, which installs it).
mod needs_python_mcp {
    use super::*;

    /// The SDK's Python: `IDEMKIT_TEST_PYTHON`, else `python3`; this test fails, saying how to
    /// install it, where it cannot import `mcp`.
    fn python() -> String {
        let python = std::env::var("IDEMKIT_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let found = std::process::Command::new(&python)
            .args(["-c", "import mcp"])
            .output();
        assert!(
            found.as_ref().is_ok_and(|o| o.status.success()),
            "the official Python MCP SDK cannot be imported by `{python}`: install it with \
             `python3 -m venv /tmp/idemkit-py && /tmp/idemkit-py/bin/pip install mcp=={PINNED}` and run with \
             IDEMKIT_TEST_PYTHON=/tmp/idemkit-py/bin/python (scripts/test.sh leaves this test out where the SDK \
             is missing, except under CI; `-- --skip needs_python_mcp` leaves it out of a cargo run): {found:?}"
        );
        python
    }

    /// The version .ci/run installs.
    const PINNED: &str = "2.3.0";

    /// Through the Python SDK's client: the upstream's tools with the proxy's hints, a read
    /// passed through, a charge whose answer the upstream dropped after committing reported
    /// unknown and its repeat refused (one request, one effect, counted at the upstream), a
    /// charge that completed replayed on its repeat.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn proxy_python_sdk_client_repeats_reach_the_upstream_once() {
        let python = python();
        let rig = Rig::new(CONFIG);
        rig.fault("drop");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxy_client.py");
        let out = tokio::process::Command::new(python)
            .arg(script)
            .arg(env!("CARGO_BIN_EXE_idemkit"))
            .arg(rig.dir.path().join("proxy.toml"))
            .arg(std::env::current_exe().unwrap())
            .args([
                "upstream_entry",
                "--exact",
                "--quiet",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(UPSTREAM, rig.dir.path())
            .env_remove("IDEMKIT_STORE")
            .env_remove("IDEMKIT_DB")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the Python client failed: {stderr}");
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        let charge = got["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "charge")
            .unwrap();
        assert_eq!(charge["annotations"]["idempotentHint"], true);
        assert_eq!(got["balance"]["structuredContent"], json!({"cents": 4200}));
        for lost in got["lost"].as_array().unwrap() {
            assert_eq!(lost["isError"], true, "{lost}");
            assert_eq!(lost["structuredContent"]["reason"], "ambiguous", "{lost}");
        }
        let sent = rig.requests("charge");
        let lost: Vec<_> = sent
            .iter()
            .filter(|(_, a)| a["invoice"] == "inv_lost")
            .collect();
        assert_eq!(lost.len(), 1, "{sent:?}");
        let [first, again] = got["ok"].as_array().unwrap().as_slice() else {
            panic!("two results: {}", got["ok"])
        };
        assert_eq!(first["structuredContent"]["charge"], "ch_2");
        assert_eq!(again["structuredContent"]["charge"], "ch_2");
        let said = again["content"][0]["text"].as_str().unwrap();
        assert!(said.starts_with("Replayed:"), "{said}");
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(rig.effects("charge"), 2);
    }
}

// ---- The proxy's rows of the surface × fault matrix (docs/reliability.md) ----

/// A fault of the proxy's matrix: what the upstream or the proxy does to the first call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The upstream commits, then exits before its answer is written.
    Drop,
    /// The upstream commits, then never answers (the attempt times out, 1 s).
    Hang,
    /// The upstream exits before committing.
    Crash,
    /// The proxy is SIGKILLed while the upstream holds the committed call; the repeat goes
    /// through a proxy started again on the same SQLite file, once the dead one's lease lapsed.
    Killed,
    /// A second call while the first is answered 5 s after its effect, then a repeat.
    Duplicate,
    /// The same key fields with another amount.
    OtherArgs,
}

const FAULTS: [Fault; 6] = [
    Fault::Drop,
    Fault::Hang,
    Fault::Crash,
    Fault::Killed,
    Fault::Duplicate,
    Fault::OtherArgs,
];

impl Fault {
    fn heading(self) -> &'static str {
        match self {
            Fault::Drop => "upstream exits after the effect (answer lost)",
            Fault::Hang => "upstream hangs after the effect (attempt times out)",
            Fault::Crash => "upstream exits before the effect",
            Fault::Killed => "proxy SIGKILLed after the effect, repeat through a restarted proxy",
            Fault::Duplicate => "concurrent duplicate",
            Fault::OtherArgs => "repeat with other arguments",
        }
    }

    /// Effects at the upstream and what the client is told, in order, for the upstream tool
    /// `tool` (`charge`: `resend = false`; `charge_dedup`: the upstream deduplicates by the key
    /// in `_meta` and says `idempotentHint: true`, so the proxy re-sends), `verified` when
    /// `charge` is verified by `find_charge` before anything unknown is sent again (S19).
    fn expected(self, tool: &str, verified: bool) -> &'static str {
        let dedup = tool == "charge_dedup";
        match self {
            // The call's own verification cannot reach the exited upstream (unknown); the
            // repeat's, through a new one, finds the charge: its answer, not a second charge.
            Fault::Drop if verified => "1 · ambiguous → ok",
            // Verified on the same connection once the attempt timed out: found.
            Fault::Hang if verified => "1 · ok → replay",
            // The repeat's verification finds nothing: charged once, under the same key.
            Fault::Crash if verified => "1 · ambiguous → ok",
            // The restarted proxy takes the dead one's call over and verifies it: found.
            Fault::Killed if verified => "1 · killed → ok",
            Fault::Drop if dedup => "1 · ambiguous → ok",
            Fault::Drop => "1 · ambiguous → ambiguous",
            // Re-sent on the same connection, the upstream answers the first charge.
            Fault::Hang if dedup => "1 · ok → replay",
            Fault::Hang => "1 · ambiguous → ambiguous",
            Fault::Crash if dedup => "1 · ambiguous → ok",
            // Nothing ran, but the proxy cannot know: kept for an operator, not re-sent.
            Fault::Crash => "0 · ambiguous → ambiguous",
            Fault::Killed if dedup => "1 · killed → ok",
            Fault::Killed => "1 · killed → ambiguous",
            Fault::Duplicate => "1 · ok → in_flight → replay",
            Fault::OtherArgs => "1 · ok → key_reuse",
        }
    }
}

/// What the client read of a result: idemkit's reason, `replay` or `ok`.
fn answer(result: &CallToolResult) -> String {
    if result.is_error == Some(true) {
        let reason = &structured(result)["reason"];
        return reason.as_str().unwrap_or("tool error").to_owned();
    }
    if text(result).starts_with("Replayed:") {
        "replay".to_owned()
    } else {
        "ok".to_owned()
    }
}

fn matrix_config(fault: Fault, verified: bool) -> String {
    let timeout = if fault == Fault::Hang { "1s" } else { "60s" };
    let verify = if verified {
        "\n[tools.charge.verify]\ntool = \"find_charge\"\napplied_if = \"/found\"\n"
    } else {
        ""
    };
    format!(
        r#"
store = "proxy.db"
timeout = "{timeout}"

[tools.charge]
key = ["customer_id", "invoice"]
resend = false
lease = "1s"
in_flight_wait = "0ms"

[tools.charge_dedup]
key = ["customer_id", "invoice"]
lease = "1s"
in_flight_wait = "0ms"
{verify}"#
    )
}

/// One cell: its procedure, then "effects · answers".
async fn cell(tool: &'static str, fault: Fault, verified: bool) -> String {
    let rig = Rig::new(&matrix_config(fault, verified));
    let proxy = rig.proxy().await;
    let args = json!({"customer_id": "cus_1", "invoice": "inv_1", "cents": 4200});
    let mut answers = Vec::new();
    match fault {
        Fault::Drop | Fault::Hang | Fault::Crash => {
            rig.fault(match fault {
                Fault::Drop => "drop",
                Fault::Hang => "hang",
                _ => "crash",
            });
            answers.push(answer(&proxy.call(tool, args.clone()).await));
            answers.push(answer(&proxy.call(tool, args).await));
        }
        Fault::Killed => {
            rig.fault("hang");
            let peer = proxy.client.peer().clone();
            let Value::Object(first) = args.clone() else {
                unreachable!()
            };
            let pending = tokio::spawn(async move {
                peer.call_tool(CallToolRequestParams::new(tool).with_arguments(first))
                    .await
            });
            rig.until_effects(tool, 1).await;
            proxy.sigkill();
            assert!(pending.await.unwrap().is_err(), "the killed proxy answered");
            answers.push("killed".to_owned());
            // The dead proxy's lease (1 s) lapses; its renewals stopped with it.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let again = rig.proxy().await;
            answers.push(answer(&again.call(tool, args).await));
        }
        Fault::Duplicate => {
            rig.fault("slow");
            let peer = proxy.client.peer().clone();
            let Value::Object(first) = args.clone() else {
                unreachable!()
            };
            let pending = tokio::spawn(async move {
                peer.call_tool(CallToolRequestParams::new(tool).with_arguments(first))
                    .await
            });
            rig.until_effects(tool, 1).await;
            let duplicate = answer(&proxy.call(tool, args.clone()).await);
            answers.push(answer(&pending.await.unwrap().unwrap()));
            answers.push(duplicate);
            answers.push(answer(&proxy.call(tool, args).await));
        }
        Fault::OtherArgs => {
            answers.push(answer(&proxy.call(tool, args).await));
            let other = json!({"customer_id": "cus_1", "invoice": "inv_1", "cents": 1});
            answers.push(answer(&proxy.call(tool, other).await));
        }
    }
    format!("{} · {}", rig.effects(tool), answers.join(" → "))
}

/// The rows: the upstream tool, the row's name, whether `charge` is verified by `find_charge`.
const ROWS: [(&str, &str, bool); 3] = [
    ("charge", "`idemkit proxy`, `resend = false`", false),
    (
        "charge",
        "`idemkit proxy`, `resend = false`, verified by a read-only upstream tool",
        true,
    ),
    (
        "charge_dedup",
        "`idemkit proxy`, upstream deduplicates by the key (re-sent)",
        false,
    ),
];

const BEGIN: &str =
    "<!-- proxy-faults:begin (generated by cli/tests/proxy.rs; IDEMKIT_BLESS=1 rewrites it) -->";
const END: &str = "<!-- proxy-faults:end -->";

/// The proxy through each of its faults, effects counted at the upstream: at most one effect per
/// operation, and the answers the docs give; docs/reliability.md's proxy table is this run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_through_every_fault_makes_one_effect_and_answers_as_documented() {
    use std::fmt::Write as _;
    let mut table = String::from("| surface |");
    for fault in FAULTS {
        write!(table, " {} |", fault.heading()).unwrap();
    }
    table.push_str("\n|---|");
    table.push_str(&"---|".repeat(FAULTS.len()));
    table.push('\n');
    let mut failures = Vec::new();
    for (tool, row, verified) in ROWS {
        write!(table, "| {row} |").unwrap();
        for fault in FAULTS {
            let got = cell(tool, fault, verified).await;
            let expected = fault.expected(tool, verified);
            if got != expected {
                failures.push(format!(
                    "({row}, {}): got `{got}`, the docs say `{expected}`",
                    fault.heading(),
                ));
            }
            write!(table, " {got} |").unwrap();
        }
        table.push('\n');
    }
    println!("{table}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let docs_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reliability.md");
    let docs = std::fs::read_to_string(&docs_path).unwrap();
    let (Some(begin), Some(end)) = (docs.find(BEGIN), docs.find(END)) else {
        panic!("docs/reliability.md has no `{BEGIN}` … `{END}` section");
    };
    let want = format!("\n{table}");
    if docs[begin + BEGIN.len()..end] != want {
        if std::env::var_os("IDEMKIT_BLESS").is_some() {
            let updated = format!("{}{want}{}", &docs[..begin + BEGIN.len()], &docs[end..]);
            std::fs::write(&docs_path, updated).unwrap();
        } else {
            panic!(
                "docs/reliability.md's proxy table differs from this run's; run with IDEMKIT_BLESS=1 to update it:\n{table}"
            );
        }
    }
}

// ---- An upstream over streamable HTTP (`--upstream-url`) ----

/// Set when this binary runs as the upstream over streamable HTTP: the file its port goes to.
const UPSTREAM_HTTP: &str = "IDEMKIT_TEST_UPSTREAM_HTTP";

/// The upstream MCP server over streamable HTTP on a free loopback port, when the test below
/// starts this binary as one.
#[tokio::test]
async fn upstream_http_entry() {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let (Some(port_file), Some(dir)) =
        (std::env::var_os(UPSTREAM_HTTP), std::env::var_os(UPSTREAM))
    else {
        return;
    };
    let dir = PathBuf::from(dir);
    let service = StreamableHttpService::new(
        move || Ok(Upstream { dir: dir.clone() }),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    std::fs::write(&port_file, port.to_string()).unwrap();
    let _ = axum::serve(listener, app).await;
    std::process::exit(0);
}

/// Over streamable HTTP (`idemkit proxy --upstream-url http://…/mcp`): a charge whose answer the
/// upstream drops after committing (its process exits) is unknown once the attempt's timeout
/// passes, and its repeat is refused, not sent: one request and one effect, counted at the upstream. Before that, a charge that was
/// answered is replayed on its repeat, sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_over_streamable_http_a_repeat_after_a_dropped_answer_reaches_the_upstream_once() {
    // rmcp's HTTP client does not fail a request whose connection broke: the attempt ends at
    // the proxy's timeout.
    let rig = Rig::new(&CONFIG.replace(r#"timeout = "20s""#, r#"timeout = "3s""#));
    let port_file = rig.dir.path().join("port");
    let mut upstream = tokio::process::Command::new(std::env::current_exe().unwrap());
    upstream
        .args([
            "upstream_http_entry",
            "--exact",
            "--quiet",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(UPSTREAM_HTTP, &port_file)
        .env(UPSTREAM, rig.dir.path())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut upstream = upstream.spawn().unwrap();
    let start = Instant::now();
    let port = loop {
        if let Ok(port) = std::fs::read_to_string(&port_file)
            && !port.is_empty()
        {
            break port;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the HTTP upstream never listened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemkit"));
    command
        .arg("proxy")
        .arg("--config")
        .arg(rig.dir.path().join("proxy.toml"))
        .arg("--upstream-url")
        .arg(format!("http://127.0.0.1:{port}/mcp"))
        .env_remove("IDEMKIT_STORE")
        .env_remove("IDEMKIT_DB");
    let transport = TokioChildProcess::new(command).expect("the proxy starts");
    let client = ().serve(transport).await.expect("the MCP handshake with the proxy");
    let call = |args: Value| {
        let Value::Object(args) = args else {
            unreachable!()
        };
        client.call_tool(CallToolRequestParams::new("charge").with_arguments(args))
    };
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 6);

    let ok = json!({"customer_id": "cus_1", "invoice": "inv_0", "cents": 100});
    let first = call(ok.clone()).await.unwrap();
    assert_eq!(structured(&first)["charge"], "ch_1");
    let again = call(ok).await.unwrap();
    assert!(text(&again).starts_with("Replayed:"), "{}", text(&again));

    rig.fault("drop");
    let lost = json!({"customer_id": "cus_1", "invoice": "inv_1", "cents": 4200});
    let first = call(lost.clone()).await.unwrap();
    println!("over HTTP, first ({:?}): {}", start.elapsed(), text(&first));
    assert_eq!(structured(&first)["reason"], "ambiguous", "{first:?}");
    let repeat = call(lost).await.unwrap();
    assert_eq!(structured(&repeat)["reason"], "ambiguous", "{repeat:?}");
    assert_eq!(
        rig.requests("charge").len(),
        2,
        "{:?}",
        rig.requests("charge")
    );
    assert_eq!(rig.effects("charge"), 2);
    println!("over HTTP, repeat at {:?}", start.elapsed());
    assert!(upstream.wait().await.is_ok());
}

/// The proxy served over streamable HTTP (`--listen 127.0.0.1:0`), its upstream a command: two
/// clients (two MCP sessions, as two agents) share its records. A charge whose answer the
/// upstream dropped after committing is unknown to the first; the second's repeat is refused,
/// not sent: one request, one effect at the upstream. A completed charge is replayed to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_served_over_streamable_http_two_clients_repeat_and_the_upstream_acts_once() {
    use rmcp::transport::StreamableHttpClientTransport;
    use tokio::io::AsyncBufReadExt;

    let rig = Rig::new(CONFIG);
    let mut proxy = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemkit"));
    proxy
        .arg("proxy")
        .arg("--config")
        .arg(rig.dir.path().join("proxy.toml"))
        .args(["--listen", "127.0.0.1:0", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "upstream_entry",
            "--exact",
            "--quiet",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(UPSTREAM, rig.dir.path())
        .env_remove("IDEMKIT_STORE")
        .env_remove("IDEMKIT_DB")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut proxy = proxy.spawn().unwrap();
    let mut said = tokio::io::BufReader::new(proxy.stderr.take().unwrap()).lines();
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), said.next_line())
            .await
            .expect("the proxy says where it serves")
            .unwrap()
            .expect("the proxy says where it serves before its stderr ends");
        if let Some(url) = line.strip_prefix("idemkit proxy: serving MCP at ") {
            break url.to_owned();
        }
    };
    // Its later lines are not read: drained, so that the proxy never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = said.next_line().await {} });
    let connect = || async {
        ().serve(StreamableHttpClientTransport::from_uri(url.as_str()))
            .await
            .expect("the MCP handshake with the proxy over HTTP")
    };
    let (one, two) = (connect().await, connect().await);
    async fn call(client: &RunningService<RoleClient, ()>, args: Value) -> CallToolResult {
        let Value::Object(args) = args else {
            unreachable!()
        };
        let params = CallToolRequestParams::new("charge").with_arguments(args);
        client.call_tool(params).await.expect("the proxy answers")
    }
    assert_eq!(one.list_all_tools().await.unwrap().len(), 6);

    rig.fault("drop");
    let lost = json!({"customer_id": "cus_1", "invoice": "inv_1", "cents": 4200});
    let first = call(&one, lost.clone()).await;
    assert_eq!(structured(&first)["reason"], "ambiguous", "{first:?}");
    let repeat = call(&two, lost).await;
    assert_eq!(structured(&repeat)["reason"], "ambiguous", "{repeat:?}");
    assert_eq!(rig.requests("charge").len(), 1);
    assert_eq!(rig.effects("charge"), 1);

    let ok = json!({"customer_id": "cus_1", "invoice": "inv_2", "cents": 100});
    let charged = call(&two, ok.clone()).await;
    assert_eq!(structured(&charged)["charge"], "ch_2");
    let replayed = call(&one, ok).await;
    assert!(
        text(&replayed).starts_with("Replayed:"),
        "{}",
        text(&replayed)
    );
    assert_eq!(rig.requests("charge").len(), 2);
    assert_eq!(rig.effects("charge"), 2);
    proxy.kill().await.unwrap();
}

// ---- S35: the proxy's answers as a model reads them (snapshots, reviewed as contract) ----

#[path = "../../tests/support/mcp_answers.rs"]
mod mcp_answers;
use mcp_answers::rendered;

/// S35 through the proxy: its answers as the model reads them, one per situation: a first call,
/// its replay, key reuse, a tool refused as unconfigured (in the proxy's words: what to add to
/// its file), a call in flight elsewhere, a repeat past the ttl (S33's tombstone), an unknown
/// outcome and its repeat. Contract: each was read when its snapshot was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s35_the_proxys_answers_as_a_model_reads_them() {
    let rig = Rig::new(
        r#"
store = "proxy.db"
timeout = "20s"

[tools.charge]
key = ["customer_id", "invoice"]
resend = false
in_flight_wait = "0ms"

[tools.charge_dedup]
key = ["customer_id", "invoice"]
ttl = "1s"
lease = "500ms"
"#,
    );
    let proxy = rig.proxy().await;
    let args = |invoice: &str, cents: u64| json!({"customer_id": "cus_1", "invoice": invoice, "cents": cents});
    let mut out = String::new();
    let mut say = |situation: &str, result: &CallToolResult| {
        out.push_str(&format!("=== {situation}\n{}\n", rendered(result)));
    };
    say(
        "a first call",
        &proxy.call("charge", args("inv_1", 4200)).await,
    );
    say(
        "its replay",
        &proxy.call("charge", args("inv_1", 4200)).await,
    );
    say(
        "key reuse (other arguments)",
        &proxy.call("charge", args("inv_1", 9900)).await,
    );
    say(
        "a refused unconfigured tool",
        &proxy.call("send_email", json!({"to": "a@b.c"})).await,
    );

    rig.fault("slow");
    let peer = proxy.client.peer().clone();
    let Value::Object(first) = args("inv_3", 1) else {
        unreachable!()
    };
    let held = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("charge").with_arguments(first))
            .await
    });
    rig.until_effects("charge", 2).await;
    say(
        "in flight elsewhere",
        &proxy.call("charge", args("inv_3", 1)).await,
    );
    held.await.unwrap().unwrap();

    proxy.call("charge_dedup", args("inv_4", 10)).await;
    let expired = loop {
        // Replayed until the record's ttl (1 s) has passed; then the tombstone answers.
        let answer = proxy.call("charge_dedup", args("inv_4", 10)).await;
        if answer.is_error == Some(true) {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    say("a repeat past the ttl (expired)", &expired);

    rig.fault("drop");
    say(
        "an unknown outcome",
        &proxy.call("charge", args("inv_5", 50)).await,
    );
    say("its repeat", &proxy.call("charge", args("inv_5", 50)).await);
    insta::assert_snapshot!("s35_proxy_answers", out);
    assert_eq!((rig.effects("charge"), rig.effects("charge_dedup")), (3, 1));
}
