//! The metrics example's scrape, asserted: one run, one replay and one key reuse appear as one
//! count each in Prometheus' text format, with the store's latency per transition.

#[path = "../examples/metrics.rs"]
mod example;

#[tokio::test]
async fn the_scrape_counts_a_run_a_replay_and_a_key_reuse_once_each() {
    let text = example::three_calls().await.unwrap().render();
    for outcome in ["completed", "replayed", "key_reuse"] {
        let line = format!(
            "idemkit_calls_total{{tool=\"charge\",kind=\"side_effect\",outcome=\"{outcome}\"}} 1"
        );
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l == "idemkit_attempts_total{tool=\"charge\",kind=\"side_effect\"} 1"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "idemkit_store_seconds_count{op=\"claim\"} 3"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "idemkit_store_seconds_count{op=\"complete\"} 1"),
        "{text}"
    );
}
