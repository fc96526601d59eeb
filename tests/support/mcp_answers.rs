//! What a model reads of an MCP tool's result, as the S35 snapshots of the MCP client
//! (`tests/mcp_client.rs`) and of the proxy (`cli/tests/proxy.rs`) write it; included by both
//! with `#[path]` (not a test target of its own).

use rmcp::model::CallToolResult;
use serde_json::Value;

/// What a model reads of a result: `isError`, each text, the structured content, the result's
/// `_meta` (the advice beside a tool's own answer). JSON has its keys sorted: serde_json keeps
/// insertion order where a crate of the build turns on its `preserve_order` (the workspace's
/// full build does, a build of one package alone may not), and a snapshot must not depend on
/// which build ran it. The parts that change from run to run are redacted: an S33 answer's date
/// ("done on DATE") and a wait ("(waited TIME)").
pub fn rendered(result: &CallToolResult) -> String {
    let sorted = |mut value: Value| {
        value.sort_all_objects();
        value
    };
    let mut out = format!("isError: {:?}\n", result.is_error);
    for content in &result.content {
        if let Some(text) = content.as_text() {
            let text = match serde_json::from_str::<Value>(&text.text) {
                Ok(json) => serde_json::to_string(&sorted(json)).unwrap(),
                Err(_) => text.text.clone(),
            };
            out.push_str(&format!("--- text:\n{text}\n"));
        }
    }
    if let Some(structured) = &result.structured_content {
        let pretty = serde_json::to_string_pretty(&sorted(structured.clone())).unwrap();
        out.push_str(&format!("--- structuredContent:\n{pretty}\n"));
    }
    if let Some(meta) = &result.meta {
        let pretty = serde_json::to_string_pretty(&sorted(Value::Object(meta.0.clone()))).unwrap();
        out.push_str(&format!("--- _meta:\n{pretty}\n"));
    }
    let out = redact(&out, "done on 2", "done on ", "Z", "DATE");
    redact(&out, "(waited ", "(waited ", ")", "TIME)")
}

/// Each `start…end` in `text` (`keep` of it kept) replaced by `with`.
fn redact(text: &str, start: &str, keep: &str, end: &str, with: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(start) {
        out.push_str(&rest[..at + keep.len()]);
        let after = &rest[at + keep.len()..];
        let stop = after.find(end).map_or(0, |e| e + end.len());
        out.push_str(with);
        rest = &after[stop..];
    }
    out.push_str(rest);
    out
}
