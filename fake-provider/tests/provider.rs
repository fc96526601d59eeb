//! The fake provider honours Idempotency-Key like Stripe, and fails as told.

use std::time::Duration;

use fake_provider::{Client, FakeProvider, Fault, ProviderError};
use serde_json::json;

async fn setup() -> (FakeProvider, Client) {
    let provider = FakeProvider::start().await.unwrap();
    let client = Client::new(provider.base_url(), Duration::from_millis(300));
    (provider, client)
}

#[tokio::test]
async fn same_key_same_body_replays_the_first_response_without_committing() {
    let (provider, client) = setup().await;
    let body = json!({"customer": "cus_1", "amount_cents": 4200});
    let first = client.post("charges", Some("k1"), &body).await.unwrap();
    let again = client.post("charges", Some("k1"), &body).await.unwrap();
    assert_eq!((first.replayed, again.replayed), (false, true));
    assert_eq!(first.body, again.body);
    assert_eq!(provider.count("charges"), 1);
    assert_eq!(client.balance("cus_1").await.unwrap(), 4200);
}

#[tokio::test]
async fn same_key_other_body_is_422_as_the_draft_has_it() {
    let (provider, client) = setup().await;
    client
        .post("charges", Some("k1"), &json!({"amount_cents": 1}))
        .await
        .unwrap();
    let err = client
        .post("charges", Some("k1"), &json!({"amount_cents": 2}))
        .await
        .unwrap_err();
    let ProviderError::Status { code, body, .. } = err else {
        panic!("{err:?}")
    };
    assert_eq!(code, 422);
    assert!(body.contains("Idempotency-Key is already used"), "{body}");
    assert_eq!(provider.count("charges"), 1);
}

#[tokio::test]
async fn without_a_key_every_request_commits() {
    let (provider, client) = setup().await;
    for _ in 0..3 {
        client
            .post("charges", None, &json!({"amount_cents": 1}))
            .await
            .unwrap();
    }
    assert_eq!(provider.count("charges"), 3);
}

#[tokio::test]
async fn drop_after_commit_times_out_the_client_but_commits() {
    let (provider, client) = setup().await;
    provider.inject([Fault::DropAfterCommit]);
    let err = client
        .post("charges", Some("k"), &json!({"amount_cents": 1}))
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::Timeout);
    assert_eq!(provider.count("charges"), 1);
    let retry = client
        .post("charges", Some("k"), &json!({"amount_cents": 1}))
        .await
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(provider.count("charges"), 1);
}

#[tokio::test]
async fn fail_before_commit_and_rate_limit_commit_nothing() {
    let (provider, client) = setup().await;
    provider.inject([Fault::FailBeforeCommit, Fault::RateLimit { secs: 2 }]);
    let first = client
        .post("charges", Some("k"), &json!({}))
        .await
        .unwrap_err();
    assert!(matches!(first, ProviderError::Status { code: 503, .. }));
    let second = client
        .post("charges", Some("k"), &json!({}))
        .await
        .unwrap_err();
    assert!(matches!(
        second,
        ProviderError::Status {
            code: 429,
            retry_after: Some(2),
            ..
        }
    ));
    assert_eq!(provider.count("charges"), 0);
    assert!(
        !client
            .post("charges", Some("k"), &json!({}))
            .await
            .unwrap()
            .replayed
    );
}

#[tokio::test]
async fn same_key_while_the_first_executes_is_409() {
    let (provider, client) = setup().await;
    provider.inject([Fault::Latency(Duration::from_millis(200))]);
    let body = json!({"amount_cents": 1});
    let (first, second) = tokio::join!(client.post("charges", Some("k"), &body), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        client.post("charges", Some("k"), &body).await
    });
    assert!(!first.unwrap().replayed);
    assert!(
        matches!(second, Err(ProviderError::Status { code: 409, .. })),
        "{second:?}"
    );
    assert_eq!(provider.count("charges"), 1);
}
