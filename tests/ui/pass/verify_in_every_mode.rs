// `verify = path` and `resend = ...` in every mode of the attribute: a free function (with a
// destructuring parameter and a generic one), a method (`verify = Self::..`, called with `self`),
// a `json` tool, an rmcp `#[tool]` and a rig tool's `call`. Each body answers `Ambiguous` at its
// first run; the verify function says the effect happened, so the call ends `Ok` with its
// outcome and the body is not sent again.
#![deny(warnings)]
use std::sync::atomic::{AtomicU32, Ordering};

use idemkit::rig::{ToolExecutionError, ToolOutput};
use idemkit::{Classify, Failure, Idem, IdempotencyKey, MemoryStore, Verified, side_effect};
use rig_core::tool::PortableTool;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_router};
use serde::{Deserialize, Serialize};

#[derive(Debug)]
struct SendError;
impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no answer")
    }
}
impl std::error::Error for SendError {}
impl Classify for SendError {
    fn classify(&self) -> Failure {
        Failure::Ambiguous
    }
}
impl From<idemkit::Error> for SendError {
    fn from(_: idemkit::Error) -> Self {
        SendError
    }
}

static RUNS: AtomicU32 = AtomicU32::new(0);

/// The body: counts its run and loses the answer.
fn sent_but_lost() -> SendError {
    RUNS.fetch_add(1, Ordering::SeqCst);
    SendError
}

#[derive(Clone, Serialize, Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Sms {
    to: String,
    text: String,
}

// A free function without the key (so not re-sent by default), a destructuring parameter and a
// generic one.
#[side_effect(key = "to, batch", verify = sms_sent)]
async fn send_sms<N: Serialize + Clone + Send>(Sms { to, text }: Sms, batch: u32, note: N) -> Result<String, SendError> {
    let _ = (to, text, batch, note);
    Err(sent_but_lost())
}

async fn sms_sent<N>(sms: Sms, batch: u32, note: N) -> Result<Verified<String>, SendError> {
    let _ = (batch, note);
    Ok(Verified::Applied(format!("sms to {}", sms.to)))
}

// `json`, taking the key, with `resend = false` (the provider cannot pass it on).
#[side_effect(key = "address", json, resend = false, verify = mail_sent)]
async fn send_mail(key: &IdempotencyKey, address: &str, subject: String) -> Result<String, SendError> {
    let _ = (key, address, subject);
    Err(sent_but_lost())
}

async fn mail_sent(key: &IdempotencyKey, address: &str, subject: String) -> Result<Verified<String>, SendError> {
    let _ = (key, subject);
    Ok(Verified::Applied(format!("mail to {address}")))
}

struct Notifier {
    idem: Idem,
    channel: String,
}

impl Notifier {
    // A method: `verify = Self::..`, called with `self`; `resend = true` on a tool without the key.
    #[side_effect(key = "self.channel, user_id", idem = self.idem, resend = true, verify = Self::pushed)]
    async fn push(&self, user_id: u64) -> Result<String, SendError> {
        let _ = user_id;
        Err(sent_but_lost())
    }

    async fn pushed(&self, user_id: u64) -> Result<Verified<String>, SendError> {
        Ok(Verified::Applied(format!("push to {user_id} on {}", self.channel)))
    }
}

#[tool_router]
impl Notifier {
    /// Pages someone once per incident.
    #[side_effect(key = "req.to", verify = Self::paged)]
    #[tool]
    async fn page(&self, req: Parameters<Sms>) -> Result<String, SendError> {
        let _ = req;
        Err(sent_but_lost())
    }

    async fn paged(&self, req: Parameters<Sms>) -> Result<Verified<String>, SendError> {
        Ok(Verified::Applied(format!("paged {}", req.0.to)))
    }
}

#[derive(Clone, Serialize, Deserialize)]
struct WebhookArgs {
    url: String,
}

struct Webhook;

impl PortableTool for Webhook {
    const NAME: &'static str = "webhook";
    type Args = WebhookArgs;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Calls a webhook once.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    #[side_effect(key = "args.url", rig, verify = Self::delivered)]
    async fn call(&self, args: WebhookArgs) -> Result<String, SendError> {
        let _ = args;
        Err(sent_but_lost())
    }
}

impl Webhook {
    async fn delivered(&self, args: WebhookArgs) -> Result<Verified<String>, SendError> {
        Ok(Verified::Applied(format!("delivered to {}", args.url)))
    }
}

fn main() {
    let run = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let idem = Idem::new(MemoryStore::new());
    let sms = Sms { to: "+1555".into(), text: "hi".into() };
    let sent = run.block_on(idem.scope(send_sms(sms.clone(), 1, "n"))).unwrap();
    assert_eq!(sent, "sms to +1555");
    assert_eq!(RUNS.load(Ordering::SeqCst), 1, "verified, not re-sent");

    let mail = run.block_on(idem.scope(send_mail("ada@example.com", "hello".into()))).unwrap();
    assert_eq!(mail, "mail to ada@example.com");
    assert_eq!(RUNS.load(Ordering::SeqCst), 2);

    let notifier = Notifier { idem: Idem::new(MemoryStore::new()), channel: "apns".into() };
    assert_eq!(run.block_on(notifier.push(7)).unwrap(), "push to 7 on apns");
    assert_eq!(RUNS.load(Ordering::SeqCst), 3);

    let paged = run.block_on(idem.scope(notifier.page(Parameters(sms)))).unwrap();
    assert!(!paged.is_error.unwrap_or(false), "{paged:?}");
    assert_eq!(RUNS.load(Ordering::SeqCst), 4);
    assert_eq!(Notifier::tool_router().list_all().len(), 1);

    let out = run
        .block_on(idem.scope(Webhook.call(WebhookArgs { url: "https://example.com/hook".into() })))
        .unwrap();
    assert_eq!(out.as_json().unwrap()["result"], "delivered to https://example.com/hook");
    assert_eq!(RUNS.load(Ordering::SeqCst), 5);
}
