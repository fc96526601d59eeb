//! A scripted language model on loopback that speaks the OpenAI chat-completions wire format
//! (`POST /v1/chat/completions`, non-streaming): each request is answered with the script's next
//! assistant turn, tool calls included, so an agent loop written against a real client runs
//! deterministically with no network.
//!
//! Every request is kept, so a test can check what the agent sent back (the tools it declared,
//! the tool messages with their results). A request past the end of the script gets `500` with
//! an error body saying so.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One call the model asks for in a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call's id (`call_...`): a chat API's name for this one request, fresh every turn.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments, JSON text as a model writes them.
    pub arguments: String,
}

impl ToolCall {
    /// A call of `name` with `arguments` (serialised as the model's JSON text).
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: &Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.to_string(),
        }
    }
}

/// One assistant turn of the script.
#[derive(Debug, Clone, PartialEq)]
pub enum Turn {
    /// The model asks for these tool calls (`finish_reason: "tool_calls"`).
    ToolCalls(Vec<ToolCall>),
    /// The model answers with text and stops (`finish_reason: "stop"`).
    Text(String),
}

#[derive(Default)]
struct Inner {
    script: Vec<Turn>,
    next: usize,
    requests: Vec<Value>,
}

/// A running scripted model. Dropping it stops the server.
pub struct ScriptedModel {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl ScriptedModel {
    /// Starts a model on an ephemeral loopback port that answers with `script`, one turn per
    /// request, in order.
    pub async fn start(script: Vec<Turn>) -> std::io::Result<Self> {
        let inner = Arc::new(Mutex::new(Inner {
            script,
            ..Inner::default()
        }));
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(ScriptedModel {
            addr,
            inner,
            server,
        })
    }

    /// `http://127.0.0.1:PORT/v1`: what an OpenAI client takes as its API base.
    pub fn api_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The requests received so far, as JSON, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.lock().requests.clone()
    }

    /// How many turns of the script were answered.
    pub fn turns_answered(&self) -> usize {
        self.lock().next
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn complete(
    State(inner): State<Arc<Mutex<Inner>>>,
    axum::Json(request): axum::Json<Value>,
) -> Response {
    let (turn, index) = {
        let mut state = inner.lock().unwrap_or_else(|p| p.into_inner());
        state.requests.push(request.clone());
        let index = state.next;
        let turn = state.script.get(index).cloned();
        if turn.is_some() {
            state.next += 1;
        }
        (turn, index)
    };
    let Some(turn) = turn else {
        let body = json!({"error": {
            "message": format!("the script has {index} turns and all were answered"),
            "type": "script_exhausted", "param": null, "code": null,
        }});
        return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response();
    };
    let (message, finish_reason) = match turn {
        Turn::Text(text) => (
            json!({"role": "assistant", "content": text, "refusal": null}),
            "stop",
        ),
        Turn::ToolCalls(calls) => {
            let calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    })
                })
                .collect();
            (
                json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": calls}),
                "tool_calls",
            )
        }
    };
    let model = request["model"].as_str().unwrap_or("scripted").to_owned();
    axum::Json(json!({
        "id": format!("chatcmpl-scripted-{index}"),
        "object": "chat.completion",
        "created": 1_764_460_800u32,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason,
            "logprobs": null,
        }],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }))
    .into_response()
}
