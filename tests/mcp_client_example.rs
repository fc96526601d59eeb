//! The `mcp_client` example, run in this test: an agent calling the `mcp_server` example's tools
//! (served in process over an in-memory pipe) through `mcp::IdempotentClient`.
#![cfg(feature = "rmcp")]

#[path = "../examples/mcp/mod.rs"]
mod mcp;
#[path = "../examples/remote/mod.rs"]
mod remote;

/// The charge reaches the provider once however often the agent repeats it (S2), under the key
/// derived from its fields; the read-only balance is sent unkeyed; the unconfigured refund is
/// refused with what to configure.
#[tokio::test]
async fn client_s2_the_example_agent_charges_once_and_refuses_an_unconfigured_tool() {
    let seen = remote::run().await.expect("the example runs");
    let key = idemkit::IdempotencyKey::derive(
        "payments/charge",
        &[
            ("customer_id", &"cus_1"),
            ("purpose", &"subscription"),
            ("period", &"2026-11"),
        ],
    );
    assert_eq!(seen.charged, 1, "{:#?}", seen.log);
    assert!(seen.repeat_replayed);
    assert_eq!(seen.key, key.to_string());
    assert!(!seen.balance_keyed);
    assert!(
        seen.refund_refused.contains("tool `refund` was not run")
            && seen.refund_refused.contains("RemoteTool::keyed"),
        "{}",
        seen.refund_refused
    );
}
