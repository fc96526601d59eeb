//! Tools you call: `tools/call` to a remote MCP server through `mcp::IdempotentClient`, against an
//! upstream rmcp server in this process (over an in-memory pipe) that counts what reaches it and
//! what it does, and that can commit and then drop its answer (the connection closed), hang after
//! committing, or crash before committing. Effects are counted at the upstream.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemkit::mcp::{
    ADVICE_META, CallError, IDEMPOTENCY_KEY_META, IdempotentClient, RemoteTool, RemoteVerify,
    for_model,
};
use idemkit::{Error, Failure, Idem, IdempotencyKey, MemoryStore, SqliteStore, ToolKind};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// What the upstream does with the next request of a side-effect tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Commits, then the connection closes before the answer is written (a proxy's 502, a
    /// restarted server).
    DropAfterCommit,
    /// Commits, then never answers.
    Hang,
    /// The connection closes before anything is committed.
    CrashBeforeCommit,
}

/// What reached the upstream and what it did, across its connections (its restarts).
#[derive(Default)]
struct Upstream {
    /// Every `tools/call`: the tool, the key in `_meta`, the arguments.
    requests: Mutex<Vec<(String, Option<String>, Value)>>,
    /// Every effect committed: the tool and its arguments.
    effects: Mutex<Vec<(String, Value)>>,
    /// `charge_dedup`'s answers by the key in `_meta` (a server that honours it).
    by_key: Mutex<HashMap<String, CallToolResult>>,
    /// The faults of the next side-effect requests, in order.
    faults: Mutex<VecDeque<Fault>>,
    /// `find_charge` answers an error (`isError: true`): it cannot tell.
    verify_fails: Mutex<bool>,
}

impl Upstream {
    fn requests(&self, tool: &str) -> Vec<(Option<String>, Value)> {
        let requests = self.requests.lock().unwrap();
        requests
            .iter()
            .filter(|(t, _, _)| t == tool)
            .map(|(_, k, a)| (k.clone(), a.clone()))
            .collect()
    }

    fn effects(&self, tool: &str) -> usize {
        self.effects
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t == tool)
            .count()
    }

    fn fault(&self, fault: Fault) {
        self.faults.lock().unwrap().push_back(fault);
    }
}

/// One connection of the upstream: its handler can close it (a crash).
#[derive(Clone)]
struct Server {
    upstream: Arc<Upstream>,
    kill: Arc<Mutex<Option<rmcp::service::RunningServiceCancellationToken>>>,
}

fn tool(name: &'static str, hints: Option<ToolAnnotations>) -> Tool {
    let schema = json!({"type": "object"});
    let Value::Object(schema) = schema else {
        unreachable!()
    };
    let mut tool = Tool::new_with_raw(name, None, schema);
    tool.annotations = hints;
    tool
}

impl Server {
    fn crash(&self) {
        if let Some(kill) = self.kill.lock().unwrap().take() {
            kill.cancel();
        }
    }

    async fn side_effect(&self, name: &str, key: Option<String>, args: Value) -> CallToolResult {
        let fault = self.upstream.faults.lock().unwrap().pop_front();
        if fault == Some(Fault::CrashBeforeCommit) {
            self.crash();
            std::future::pending::<()>().await;
        }
        if name == "charge_dedup"
            && let Some(key) = &key
            && let Some(done) = self.upstream.by_key.lock().unwrap().get(key)
        {
            return done.clone();
        }
        if args["cents"] == json!(0) {
            return CallToolResult::error(vec![ContentBlock::text("declined: no amount")]);
        }
        self.upstream
            .effects
            .lock()
            .unwrap()
            .push((name.to_owned(), args.clone()));
        let n = self.upstream.effects(name);
        let answer = CallToolResult::structured(
            json!({"charge": format!("ch_{n}"), "cents": args["cents"]}),
        );
        if let Some(key) = key {
            self.upstream
                .by_key
                .lock()
                .unwrap()
                .insert(key, answer.clone());
        }
        match fault {
            Some(Fault::DropAfterCommit) => {
                self.crash();
                std::future::pending::<()>().await;
            }
            Some(Fault::Hang) => std::future::pending::<()>().await,
            _ => {}
        }
        answer
    }
}

impl ServerHandler for Server {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = request
            .meta
            .as_ref()
            .and_then(|m| m.0.0.get(IDEMPOTENCY_KEY_META))
            .or_else(|| context.meta.0.0.get(IDEMPOTENCY_KEY_META))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let args = Value::Object(request.arguments.unwrap_or_default());
        let name = request.name.to_string();
        self.upstream
            .requests
            .lock()
            .unwrap()
            .push((name.clone(), key.clone(), args.clone()));
        let result = match name.as_str() {
            "balance" => CallToolResult::structured(json!({"cents": 4200})),
            // The verify tool of `charge`: looks the charge up by its customer and invoice.
            "find_charge" if *self.upstream.verify_fails.lock().unwrap() => {
                CallToolResult::error(vec![ContentBlock::text("the charges' index is down")])
            }
            "find_charge" => {
                let effects = self.upstream.effects.lock().unwrap();
                let found = effects.iter().find(|(t, a)| {
                    t == "charge"
                        && a["customer"] == args["customer"]
                        && a["invoice"] == args["invoice"]
                });
                CallToolResult::structured(
                    json!({"found": found.is_some(), "cents": found.map(|(_, a)| a["cents"].clone())}),
                )
            }
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
                None,
                Some(read_only),
                Some(true),
                Some(idempotent),
                None,
            ))
        };
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools: vec![
                tool("balance", hints(true, true)),
                tool("find_charge", hints(true, true)),
                tool("charge", hints(false, false)),
                tool("charge_dedup", hints(false, true)),
                tool("send_email", None),
            ],
            meta: None,
            next_cursor: None,
            ttl_ms: None,
            cache_scope: None,
        })
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// A connection to the upstream: the client's side, and the server's kept running.
struct Connection {
    client: RunningService<RoleClient, ()>,
    _server: Server,
}

async fn connect(upstream: &Arc<Upstream>) -> Connection {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = Server {
        upstream: upstream.clone(),
        kill: Arc::default(),
    };
    let serving = tokio::spawn(server.clone().serve(server_io));
    let client = ().serve(client_io).await.expect("the MCP handshake");
    let running = serving.await.unwrap().expect("the server starts");
    *server.kill.lock().unwrap() = Some(running.cancellation_token());
    // The server runs until its handler crashes it (its token), or the test ends.
    std::mem::forget(running);
    Connection {
        client,
        _server: server,
    }
}

/// How long an attempt waits for its answer: the hang cells wait it out once per attempt, and
/// an answer that is not lost comes within it even on a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(3);

fn client(connection: &Connection, idem: &Idem) -> IdempotentClient {
    IdempotentClient::new(connection.client.peer().clone())
        .idem(idem.clone())
        .timeout(TIMEOUT)
        .tool("charge", RemoteTool::keyed(["customer", "invoice"]))
        .tool(
            "charge_dedup",
            RemoteTool::keyed(["customer", "invoice"]).max_attempts(3),
        )
}

fn call(tool: &'static str, args: Value) -> CallToolRequestParams {
    let Value::Object(args) = args else {
        unreachable!()
    };
    CallToolRequestParams::new(tool).with_arguments(args)
}

fn charge(cents: u64) -> Value {
    json!({"customer": "cus_1", "invoice": "inv_7", "cents": cents})
}

fn expected_key(tool: &str) -> IdempotencyKey {
    IdempotencyKey::derive(tool, &[("customer", &"cus_1"), ("invoice", &"inv_7")])
}

fn ambiguous(ended: Result<idemkit::mcp::RemoteReply, CallError>) -> (IdempotencyKey, u32) {
    match ended {
        Err(CallError::Idem(Error::Ambiguous { key, attempts, .. })) => (key, attempts),
        other => panic!("not Error::Ambiguous: {other:?}"),
    }
}

/// S2 and S8: a repeat is answered from the record, marked replayed, and not sent; the key
/// went to the server in `_meta` under the documented entry, the key of encoding v1.
#[tokio::test]
async fn client_s2_a_repeat_is_replayed_and_the_key_arrives_in_meta() {
    let upstream = Arc::new(Upstream::default());
    let connection = connect(&upstream).await;
    let idem = Idem::new(MemoryStore::new());
    let client = client(&connection, &idem);
    let first = client
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    let again = client
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    assert!(!first.replayed && again.replayed);
    assert_eq!(
        first.result.structured_content,
        again.result.structured_content
    );
    assert_eq!(upstream.effects("charge"), 1);
    let sent = upstream.requests("charge");
    assert_eq!(sent.len(), 1, "the repeat was not sent");
    let key = expected_key("charge");
    assert_eq!(sent[0].0.as_deref(), Some(key.as_str()));
    assert_eq!((first.key, again.key), (Some(key), Some(key)));
    // What a model reads of the repeat: the replay's sentence, then the tool's own answer.
    let told = for_model(&Ok(again), ToolKind::SideEffect, &[]);
    let ContentBlock::Text(note) = &told.content[0] else {
        panic!("a text first")
    };
    assert!(note.text.starts_with("Replayed:") && note.text.contains(key.as_str()));
    // S35: the advice beside the tool's own answer, in the result's `_meta`.
    let advice = &told.meta.as_ref().expect("the result's _meta").0[ADVICE_META];
    assert_eq!(advice["state"], "replayed", "{advice}");
    assert_eq!(advice["sameKeySafe"], true, "{advice}");
    assert_eq!(advice["key"], key.as_str(), "{advice}");
    let first_told = for_model(&Ok(first), ToolKind::SideEffect, &[]);
    let advice = &first_told.meta.as_ref().expect("the result's _meta").0[ADVICE_META];
    assert_eq!(advice["state"], "ran", "{advice}");
}

/// S20: the upstream commits and the connection drops before its answer. The call ends with the
/// outcome unknown, and its repeat — on a new connection, as after a restarted server — is not
/// sent: the upstream acted once.
#[tokio::test]
async fn client_s20_a_repeat_after_the_answer_was_dropped_reaches_the_upstream_once() {
    let upstream = Arc::new(Upstream::default());
    let idem = Idem::new(MemoryStore::new());
    upstream.fault(Fault::DropAfterCommit);
    let first = connect(&upstream).await;
    let (key, attempts) = ambiguous(
        client(&first, &idem)
            .call_tool(call("charge", charge(4200)))
            .await,
    );
    assert_eq!((key, attempts), (expected_key("charge"), 1));
    let second = connect(&upstream).await;
    let repeat = client(&second, &idem)
        .call_tool(call("charge", charge(4200)))
        .await;
    let told = for_model(
        &repeat,
        ToolKind::SideEffect,
        &["customer".into(), "invoice".into()],
    );
    assert_eq!(ambiguous(repeat), (key, 0));
    assert_eq!(
        (
            upstream.effects("charge"),
            upstream.requests("charge").len()
        ),
        (1, 1)
    );
    // The model is told the effect may have happened and how it is settled, never "not run";
    // S35: its advice says the same.
    assert_eq!(told.is_error, Some(true));
    let advice = &told
        .structured_content
        .as_ref()
        .expect("a structured error")["advice"];
    assert_eq!(advice["state"], "unknown", "{advice}");
    assert_eq!(advice["newKeySafe"], false, "{advice}");
    let text = serde_json::to_string(&told.content).unwrap();
    assert!(
        text.contains("may or may not have happened") && text.contains("idemkit resolve"),
        "{text}"
    );
    assert!(!text.contains("Not run"), "{text}");
    assert_eq!(
        told.structured_content.unwrap()["reason"],
        json!("ambiguous")
    );
}

/// S20: the upstream commits and hangs; the attempt times out (sent, its answer lost), and the
/// repeat is not sent.
#[tokio::test]
async fn client_s20_a_repeat_after_a_hang_reaches_the_upstream_once() {
    let upstream = Arc::new(Upstream::default());
    let idem = Idem::new(MemoryStore::new());
    upstream.fault(Fault::Hang);
    let connection = connect(&upstream).await;
    let client = client(&connection, &idem);
    assert_eq!(
        ambiguous(client.call_tool(call("charge", charge(4200))).await).1,
        1
    );
    assert_eq!(
        ambiguous(client.call_tool(call("charge", charge(4200))).await).1,
        0
    );
    assert_eq!(
        (
            upstream.effects("charge"),
            upstream.requests("charge").len()
        ),
        (1, 1)
    );
}

/// S20: the upstream crashes after the request reached it and before it committed. The client
/// cannot tell that from a crash after: the outcome is kept unknown and the repeat is not sent
/// (no effect at all, never two).
#[tokio::test]
async fn client_s20_a_crash_before_commit_is_kept_unknown_and_not_sent_again() {
    let upstream = Arc::new(Upstream::default());
    let idem = Idem::new(MemoryStore::new());
    upstream.fault(Fault::CrashBeforeCommit);
    let first = connect(&upstream).await;
    ambiguous(
        client(&first, &idem)
            .call_tool(call("charge", charge(4200)))
            .await,
    );
    let second = connect(&upstream).await;
    ambiguous(
        client(&second, &idem)
            .call_tool(call("charge", charge(4200)))
            .await,
    );
    assert_eq!(
        (
            upstream.effects("charge"),
            upstream.requests("charge").len()
        ),
        (0, 1)
    );
}

/// S20 with `idempotentHint: true`: the key reaches the server in `_meta`, so an attempt whose
/// answer was lost is sent again under the same key, and the upstream, which honours it, acts
/// once: after a hang within the call, and after a dropped connection on the repeat.
#[tokio::test]
async fn client_s20_an_idempotent_tool_is_sent_again_under_its_key_and_acts_once() {
    let upstream = Arc::new(Upstream::default());
    let idem = Idem::new(MemoryStore::new());
    upstream.fault(Fault::Hang);
    let connection = connect(&upstream).await;
    let reply = client(&connection, &idem)
        .call_tool(call("charge_dedup", charge(4200)))
        .await
        .unwrap();
    assert!(!reply.replayed);
    let sent = upstream.requests("charge_dedup");
    assert_eq!((upstream.effects("charge_dedup"), sent.len()), (1, 2));
    assert_eq!(sent[0].0, sent[1].0, "both attempts carry one key");

    let other = json!({"customer": "cus_2", "invoice": "inv_7", "cents": 10});
    upstream.fault(Fault::DropAfterCommit);
    let first = connect(&upstream).await;
    let dropped = client(&first, &idem)
        .call_tool(call("charge_dedup", other.clone()))
        .await;
    assert!(dropped.is_err(), "the connection is gone: {dropped:?}");
    let second = connect(&upstream).await;
    let repeat = client(&second, &idem)
        .call_tool(call("charge_dedup", other))
        .await
        .unwrap();
    assert_eq!(
        repeat.result.structured_content.unwrap()["charge"],
        json!("ch_2")
    );
    assert_eq!(
        upstream.effects("charge_dedup"),
        2,
        "one effect per operation"
    );
}

/// A request that never left (the connection was gone before it was sent) is `Transient`: the
/// record is released, and the same call on a new connection runs once.
#[tokio::test]
async fn client_a_request_that_never_left_is_transient_and_runs_once_later() {
    let upstream = Arc::new(Upstream::default());
    let idem = Idem::new(MemoryStore::new());
    let gone = connect(&upstream).await;
    let peer = gone.client.peer().clone();
    gone.client.cancel().await.unwrap();
    let client_of_gone = IdempotentClient::new(peer).idem(idem.clone()).tool(
        "charge",
        RemoteTool::keyed(["customer", "invoice"])
            .resend(false)
            .max_attempts(2),
    );
    match client_of_gone.call_tool(call("charge", charge(4200))).await {
        Err(CallError::Upstream { failure, key, .. }) => {
            assert_eq!(
                (failure, key),
                (Failure::Transient, Some(expected_key("charge")))
            );
        }
        other => panic!("not a transient upstream failure: {other:?}"),
    }
    assert!(upstream.requests("charge").is_empty());
    let connection = connect(&upstream).await;
    let reply = client(&connection, &idem)
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    assert!(!reply.replayed);
    assert_eq!(upstream.effects("charge"), 1);
}

/// S3: the same key fields with other arguments are refused, not sent.
#[tokio::test]
async fn client_s3_key_reuse_with_other_arguments_is_refused_and_not_sent() {
    let upstream = Arc::new(Upstream::default());
    let connection = connect(&upstream).await;
    let client = client(&connection, &Idem::new(MemoryStore::new()));
    client
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    let reuse = client.call_tool(call("charge", charge(9900))).await;
    let told = for_model(
        &reuse,
        ToolKind::SideEffect,
        &["customer".into(), "invoice".into()],
    );
    assert!(
        matches!(reuse, Err(CallError::Idem(Error::KeyReuse { .. }))),
        "{reuse:?}"
    );
    assert_eq!(
        told.structured_content.unwrap()["reason"],
        json!("key_reuse")
    );
    assert_eq!(upstream.requests("charge").len(), 1);
}

/// A tool with no configuration and no `readOnlyHint: true` is refused with what to configure;
/// nothing is sent.
#[tokio::test]
async fn client_an_unconfigured_tool_that_is_not_read_only_is_refused_with_what_to_configure() {
    let upstream = Arc::new(Upstream::default());
    let connection = connect(&upstream).await;
    let client = client(&connection, &Idem::new(MemoryStore::new()));
    for tool in ["send_email", "not_listed"] {
        let refused = client.call_tool(call(tool, json!({"to": "a@b.c"}))).await;
        let Err(CallError::Idem(error @ Error::Settings { .. })) = &refused else {
            panic!("not refused: {refused:?}");
        };
        let text = error.to_string();
        assert!(
            text.contains(&format!("tool `{tool}` was not run")),
            "{text}"
        );
        assert!(
            text.contains("RemoteTool::keyed") && text.contains("RemoteTool::read_only()"),
            "{text}"
        );
    }
    // A model calling through the client is told the same, as a tool error.
    let told = client
        .call_tool_for_model(call("send_email", json!({"to": "a@b.c"})))
        .await;
    assert_eq!(told.is_error, Some(true));
    let text = serde_json::to_string(&told).unwrap();
    assert!(
        text.contains("Not run") && text.contains("RemoteTool::keyed"),
        "{text}"
    );
    // A configured tool called without one of its key fields, or with a float for one: refused,
    // nothing claimed or sent, and the model is told which field to send.
    for args in [
        json!({"customer": "cus_1", "cents": 1}),
        json!({"customer": 1.5, "invoice": "i", "cents": 1}),
    ] {
        let refused = client.call_tool(call("charge", args)).await;
        let told = for_model(&refused, ToolKind::SideEffect, &[]);
        assert!(
            matches!(refused, Err(CallError::InvalidArguments { .. })),
            "{refused:?}"
        );
        assert_eq!(
            told.structured_content.unwrap()["reason"],
            json!("invalid_arguments")
        );
    }
    assert!(upstream.requests.lock().unwrap().is_empty());
}

/// A tool the server marks `readOnlyHint: true` is sent as it is, every time, with no key.
#[tokio::test]
async fn client_a_read_only_tool_passes_through_unkeyed() {
    let upstream = Arc::new(Upstream::default());
    let connection = connect(&upstream).await;
    let client = client(&connection, &Idem::new(MemoryStore::new()));
    for _ in 0..2 {
        let reply = client
            .call_tool(call("balance", json!({"customer": "cus_1"})))
            .await
            .unwrap();
        assert_eq!((reply.key, reply.replayed), (None, false));
    }
    let sent = upstream.requests("balance");
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|(key, _)| key.is_none()));
}

/// A tool's error answer (`isError: true`) is its own answer, passed through and not recorded:
/// the same call is sent again, and a corrected one is not refused as key reuse.
#[tokio::test]
async fn client_a_tool_error_answer_is_passed_through_and_not_recorded() {
    let upstream = Arc::new(Upstream::default());
    let connection = connect(&upstream).await;
    let client = client(&connection, &Idem::new(MemoryStore::new()));
    for _ in 0..2 {
        let declined = client.call_tool(call("charge", charge(0))).await.unwrap();
        assert_eq!(
            (declined.result.is_error, declined.replayed),
            (Some(true), false)
        );
    }
    let corrected = client
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    assert_ne!(corrected.result.is_error, Some(true));
    assert_eq!(
        (
            upstream.requests("charge").len(),
            upstream.effects("charge")
        ),
        (3, 1)
    );
}

/// S8: the client restarts (a new runtime on the same SQLite file, a new connection): the
/// repeat is answered from the record, not sent.
#[tokio::test]
async fn client_s8_a_repeat_after_the_client_restarts_is_replayed_from_sqlite() {
    let upstream = Arc::new(Upstream::default());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("client.sqlite");
    let first = {
        let idem = Idem::new(SqliteStore::open(&db).unwrap());
        let connection = connect(&upstream).await;
        client(&connection, &idem)
            .call_tool(call("charge", charge(4200)))
            .await
            .unwrap()
    };
    let idem = Idem::new(SqliteStore::open(&db).unwrap());
    let connection = connect(&upstream).await;
    let again = client(&connection, &idem)
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(
        first.result.structured_content,
        again.result.structured_content
    );
    assert_eq!(upstream.requests("charge").len(), 1);
}

/// S18: equal arguments under two tenants are two operations, each sent under its tenant's key
/// and each replayed only its own answer.
#[tokio::test]
async fn client_s18_equal_arguments_under_two_tenants_are_two_operations() {
    let upstream = Arc::new(Upstream::default());
    let connection = connect(&upstream).await;
    let client = client(&connection, &Idem::new(MemoryStore::new()));
    let mut answers = Vec::new();
    for tenant in ["acme", "globex", "acme", "globex"] {
        let reply = idemkit::as_tenant(tenant, client.call_tool(call("charge", charge(4200))))
            .await
            .unwrap();
        answers.push((reply.replayed, reply.key, reply.result.structured_content));
    }
    let keys = [
        expected_key("charge").for_tenant("acme"),
        expected_key("charge").for_tenant("globex"),
    ];
    assert_eq!(
        (answers[0].0, answers[1].0, answers[2].0, answers[3].0),
        (false, false, true, true)
    );
    assert_eq!((answers[0].1, answers[1].1), (Some(keys[0]), Some(keys[1])));
    assert_eq!(
        (&answers[0].2, &answers[1].2),
        (&answers[2].2, &answers[3].2)
    );
    assert_ne!(answers[0].2, answers[1].2);
    let sent: Vec<Option<String>> = upstream
        .requests("charge")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(sent, keys.map(|k| Some(k.to_string())).to_vec());
    assert_eq!(upstream.effects("charge"), 2);
}

/// A client whose `charge` is verified by `find_charge` (given the customer, the invoice and
/// the key) before anything whose outcome is unknown is sent again.
fn verified_client(connection: &Connection, idem: &Idem) -> IdempotentClient {
    let verify = RemoteVerify::new("find_charge", "/found")
        .arguments(["customer", "invoice"])
        .key_argument("key");
    client(connection, idem).tool(
        "charge",
        RemoteTool::keyed(["customer", "invoice"]).verify(verify),
    )
}

/// S19 through the client: the upstream commits and hangs. The attempt's answer is lost, and
/// before anything is sent again `find_charge` is asked (with the named arguments and the key):
/// it finds the charge, so the call ends with its answer, the upstream acted once, and a repeat
/// is a replay that asks nothing.
#[tokio::test]
async fn client_s19_a_lost_answer_verified_applied_ends_with_an_answer_and_one_effect() {
    let upstream = Arc::new(Upstream::default());
    let idem = Idem::new(MemoryStore::new());
    upstream.fault(Fault::Hang);
    let connection = connect(&upstream).await;
    let client = verified_client(&connection, &idem);
    let reply = client
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    assert_eq!(
        reply.result.structured_content,
        Some(json!({"found": true, "cents": 4200}))
    );
    let asked = upstream.requests("find_charge");
    let key = expected_key("charge");
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0],
        (
            None,
            json!({"customer": "cus_1", "invoice": "inv_7", "key": key.as_str()})
        )
    );
    let again = client
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(
        (
            upstream.effects("charge"),
            upstream.requests("charge").len(),
            upstream.requests("find_charge").len()
        ),
        (1, 1, 1)
    );
}

/// S19 and S20: the upstream commits and drops the connection, so the call's own verification
/// cannot reach it (unknown). The repeat, on a new connection, meets the unknown record, asks
/// `find_charge`, which finds the charge: the caller gets an answer, and the effect is not made
/// a second time.
#[tokio::test]
async fn client_s19_a_repeat_after_a_dropped_answer_is_verified_and_reaches_the_effect_once() {
    let upstream = Arc::new(Upstream::default());
    let idem = Idem::new(MemoryStore::new());
    upstream.fault(Fault::DropAfterCommit);
    let first = connect(&upstream).await;
    let (key, _) = ambiguous(
        verified_client(&first, &idem)
            .call_tool(call("charge", charge(4200)))
            .await,
    );
    let second = connect(&upstream).await;
    let repeat = verified_client(&second, &idem)
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    assert_eq!(repeat.key, Some(key));
    assert_eq!(repeat.result.structured_content.unwrap()["found"], true);
    assert_eq!(
        (
            upstream.effects("charge"),
            upstream.requests("charge").len()
        ),
        (1, 1)
    );
    assert_eq!(upstream.requests("find_charge").len(), 1);
}

/// S19: the upstream crashes before committing. The repeat asks `find_charge`, which finds
/// nothing: the charge is made once, sent again under the same key.
#[tokio::test]
async fn client_s19_verified_not_applied_runs_again_once_under_the_same_key() {
    let upstream = Arc::new(Upstream::default());
    let idem = Idem::new(MemoryStore::new());
    upstream.fault(Fault::CrashBeforeCommit);
    let first = connect(&upstream).await;
    let (key, _) = ambiguous(
        verified_client(&first, &idem)
            .call_tool(call("charge", charge(4200)))
            .await,
    );
    let second = connect(&upstream).await;
    let repeat = verified_client(&second, &idem)
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    assert_eq!(
        repeat.result.structured_content.unwrap()["charge"],
        json!("ch_1")
    );
    let sent = upstream.requests("charge");
    assert_eq!((upstream.effects("charge"), sent.len()), (1, 2));
    assert!(sent.iter().all(|(k, _)| k.as_deref() == Some(key.as_str())));
    assert_eq!(upstream.requests("find_charge").len(), 1);
}

/// S19: the verify tool answers an error (it cannot tell): the outcome stays unknown, the
/// caller is told so, and nothing is sent again; once it answers, the repeat is settled.
#[tokio::test]
async fn client_s19_a_failing_verify_leaves_the_outcome_unknown_and_sends_nothing() {
    let upstream = Arc::new(Upstream::default());
    let idem = Idem::new(MemoryStore::new());
    upstream.fault(Fault::DropAfterCommit);
    *upstream.verify_fails.lock().unwrap() = true;
    let first = connect(&upstream).await;
    ambiguous(
        verified_client(&first, &idem)
            .call_tool(call("charge", charge(4200)))
            .await,
    );
    let second = connect(&upstream).await;
    let client = verified_client(&second, &idem);
    let repeat = client.call_tool(call("charge", charge(4200))).await;
    assert_eq!(ambiguous(repeat).1, 0);
    assert_eq!(
        (
            upstream.effects("charge"),
            upstream.requests("charge").len(),
            upstream.requests("find_charge").len()
        ),
        (1, 1, 1)
    );
    *upstream.verify_fails.lock().unwrap() = false;
    let settled = client
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    assert_eq!(settled.result.structured_content.unwrap()["found"], true);
    assert_eq!(
        (
            upstream.effects("charge"),
            upstream.requests("find_charge").len()
        ),
        (1, 2)
    );
}

/// A verify that cannot work is refused before anything is sent: a tool verified by itself, an
/// `applied_if` that is not a JSON pointer, a read with a verify.
#[tokio::test]
async fn client_s19_a_verify_that_cannot_work_is_refused_and_nothing_is_sent() {
    let upstream = Arc::new(Upstream::default());
    let connection = connect(&upstream).await;
    let idem = Idem::new(MemoryStore::new());
    for config in [
        RemoteTool::keyed(["customer", "invoice"]).verify(RemoteVerify::new("charge", "/found")),
        RemoteTool::keyed(["customer", "invoice"])
            .verify(RemoteVerify::new("find_charge", "found")),
        RemoteTool::read_only().verify(RemoteVerify::new("find_charge", "/found")),
    ] {
        let client = client(&connection, &idem).tool("charge", config);
        let refused = client.call_tool(call("charge", charge(4200))).await;
        assert!(
            matches!(refused, Err(CallError::Idem(Error::Settings { .. }))),
            "{refused:?}"
        );
    }
    assert!(upstream.requests.lock().unwrap().is_empty());
}

/// S28 and S31: a settler beside the client settles an unknown outcome without waiting for the
/// caller: each tool with a verify is registered with `verify_record`, which asks its verify
/// tool with the arguments the call kept with its record. The caller's repeat then replays the
/// settled answer; nothing is sent or asked again.
#[tokio::test]
async fn client_s31_a_settler_asks_the_verify_tool_with_the_arguments_the_call_kept() {
    use idemkit::{Records, Settler};
    let upstream = Arc::new(Upstream::default());
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::builder().shared_store(store.clone()).build().unwrap();
    upstream.fault(Fault::DropAfterCommit);
    let first = connect(&upstream).await;
    let (key, _) = ambiguous(
        verified_client(&first, &idem)
            .call_tool(call("charge", charge(4200)))
            .await,
    );
    let second = connect(&upstream).await;
    let client = verified_client(&second, &idem);
    assert_eq!(client.verified_tools(), ["charge"]);
    let mut settler = Settler::new(store.clone());
    for tool in client.verified_tools() {
        let (client, store) = (client.clone(), store.clone());
        settler = settler.verify(tool, move |key| {
            let (client, store) = (client.clone(), store.clone());
            async move {
                let record = store.get(&key).await.map_err(|e| e.to_string())?;
                client.verify_record(&record.ok_or("gone")?).await
            }
        });
    }
    let report = settler.run_once(&Default::default()).await.unwrap();
    assert_eq!(report.exit_code(), 0, "{report:?}");
    let asked = upstream.requests("find_charge");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].1["key"], key.as_str());
    let repeat = client
        .call_tool(call("charge", charge(4200)))
        .await
        .unwrap();
    assert!(repeat.replayed);
    assert_eq!(repeat.result.structured_content.unwrap()["found"], true);
    assert_eq!(
        (
            upstream.effects("charge"),
            upstream.requests("charge").len(),
            upstream.requests("find_charge").len()
        ),
        (1, 1, 1)
    );
}

#[path = "support/mcp_answers.rs"]
mod mcp_answers;
use mcp_answers::rendered;

/// S35: the client's answers as a model reads them, one per situation: a first call, its
/// replay, key reuse, a tool refused as unconfigured, a call in flight elsewhere, a repeat past
/// the ttl (S33's tombstone), an unknown outcome and its repeat. Contract: each was read when
/// its snapshot was accepted.
#[tokio::test]
async fn s35_the_clients_answers_as_a_model_reads_them() {
    let upstream = Arc::new(Upstream::default());
    let idem = Idem::new(MemoryStore::new());
    let connection = connect(&upstream).await;
    let configured = |connection: &Connection| {
        client(connection, &idem)
            .tool(
                "charge",
                RemoteTool::keyed(["customer", "invoice"]).in_flight_wait(Duration::ZERO),
            )
            .tool(
                "charge_dedup",
                RemoteTool::keyed(["customer", "invoice"])
                    .ttl(Duration::from_secs(1))
                    .lease(Duration::from_millis(500)),
            )
    };
    let client = configured(&connection);
    let args = |invoice: &str, cents: u64| json!({"customer": "cus_1", "invoice": invoice, "cents": cents});
    let mut out = String::new();
    let mut say = |situation: &str, result: &CallToolResult| {
        out.push_str(&format!("=== {situation}\n{}\n", rendered(result)));
    };
    let first = client
        .call_tool_for_model(call("charge", args("inv_1", 4200)))
        .await;
    say("a first call", &first);
    let replay = client
        .call_tool_for_model(call("charge", args("inv_1", 4200)))
        .await;
    say("its replay", &replay);
    let reuse = client
        .call_tool_for_model(call("charge", args("inv_1", 9900)))
        .await;
    say("key reuse (other arguments)", &reuse);
    let refused = client
        .call_tool_for_model(call("send_email", json!({"to": "a@b.c"})))
        .await;
    say("a refused unconfigured tool", &refused);

    upstream.fault(Fault::Hang);
    let holder = client.clone();
    let held = tokio::spawn(async move {
        holder
            .call_tool_for_model(call(
                "charge",
                json!({"customer": "cus_1", "invoice": "inv_3", "cents": 1}),
            ))
            .await
    });
    while upstream.requests("charge").len() < 2 {
        tokio::task::yield_now().await;
    }
    let in_flight = client
        .call_tool_for_model(call("charge", args("inv_3", 1)))
        .await;
    say("in flight elsewhere", &in_flight);
    held.await.unwrap();

    client
        .call_tool_for_model(call("charge_dedup", args("inv_4", 10)))
        .await;
    let expired = loop {
        // Replayed until the record's ttl (1 s) has passed; then the tombstone answers.
        let answer = client
            .call_tool_for_model(call("charge_dedup", args("inv_4", 10)))
            .await;
        if answer.is_error == Some(true) {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    say("a repeat past the ttl (expired)", &expired);

    upstream.fault(Fault::DropAfterCommit);
    let unknown = client
        .call_tool_for_model(call("charge", args("inv_5", 50)))
        .await;
    say("an unknown outcome", &unknown);
    let second = connect(&upstream).await;
    let again = configured(&second)
        .call_tool_for_model(call("charge", args("inv_5", 50)))
        .await;
    say("its repeat", &again);
    insta::assert_snapshot!("s35_client_answers", out);
    assert_eq!(
        (upstream.effects("charge"), upstream.effects("charge_dedup")),
        (3, 1)
    );
}
