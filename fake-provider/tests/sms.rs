//! The fake SMS gateway sends a message per request whatever its key, fails as told, and answers
//! "did message X go out?" by the client's message id or by the key passed as a plain field.

use std::time::Duration;

use fake_provider::ProviderError;
use fake_provider::sms::{Lookup, Message, SmsClient, SmsFault, SmsGateway};

async fn setup() -> (SmsGateway, SmsClient) {
    let gateway = SmsGateway::start().await.unwrap();
    // Only `HangAfterSend` waits for the timeout: the other faults answer at once.
    let client = SmsClient::new(gateway.base_url(), Duration::from_millis(300));
    (gateway, client)
}

fn message() -> Message {
    Message::new("+15550100", "ord_7 has shipped")
        .message_id("ord_7-shipped")
        .idempotency_key("k-7")
}

#[tokio::test]
async fn every_request_sends_whatever_its_key() {
    let (gateway, client) = setup().await;
    let first = client.send(&message()).await.unwrap();
    let second = client.send(&message()).await.unwrap();
    assert_eq!(gateway.sent(), 2, "the gateway does not deduplicate");
    assert_ne!(first.sid, second.sid);
    assert_eq!(first.message_id.as_deref(), Some("ord_7-shipped"));
    assert_eq!(first.idempotency_key.as_deref(), Some("k-7"));
    assert_eq!(gateway.messages(), vec![first, second]);
}

#[tokio::test]
async fn drop_after_send_breaks_the_request_but_sends() {
    let (gateway, client) = setup().await;
    gateway.inject([SmsFault::DropAfterSend]);
    let err = client.send(&message()).await.unwrap_err();
    assert_eq!(err, ProviderError::Broken);
    assert_eq!(gateway.sent(), 1);
    // The lookup answers what the lost response would have.
    let found = client
        .lookup(Lookup::MessageId("ord_7-shipped"))
        .await
        .unwrap();
    assert_eq!(found, gateway.messages());
}

#[tokio::test]
async fn fail_before_send_is_503_and_sends_nothing() {
    let (gateway, client) = setup().await;
    gateway.inject([SmsFault::FailBeforeSend]);
    let err = client.send(&message()).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Status { code: 503, .. }),
        "{err:?}"
    );
    assert_eq!(gateway.sent(), 0);
}

#[tokio::test]
async fn drop_before_send_breaks_the_request_and_sends_nothing() {
    let (gateway, client) = setup().await;
    gateway.inject([SmsFault::DropBeforeSend]);
    let err = client.send(&message()).await.unwrap_err();
    assert_eq!(err, ProviderError::Broken);
    assert_eq!(gateway.sent(), 0);
    let found = client.lookup(Lookup::IdempotencyKey("k-7")).await.unwrap();
    assert!(found.is_empty(), "{found:?}");
}

#[tokio::test]
async fn hang_after_send_sends_and_never_answers() {
    let (gateway, client) = setup().await;
    gateway.inject([SmsFault::HangAfterSend]);
    let err = client.send(&message()).await.unwrap_err();
    assert_eq!(err, ProviderError::Timeout);
    assert_eq!(gateway.sent(), 1);
    // The next request is answered.
    client.send(&message()).await.unwrap();
    assert_eq!(gateway.sent(), 2);
}

#[tokio::test]
async fn lookup_by_message_id_or_by_key() {
    let (gateway, client) = setup().await;
    client.send(&message()).await.unwrap();
    client
        .send(&Message::new("+15550101", "other").message_id("other"))
        .await
        .unwrap();
    let by_id = client
        .lookup(Lookup::MessageId("ord_7-shipped"))
        .await
        .unwrap();
    let by_key = client.lookup(Lookup::IdempotencyKey("k-7")).await.unwrap();
    assert_eq!(by_id, by_key);
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].sid, "SM1");
    assert!(
        client
            .lookup(Lookup::MessageId("never-sent"))
            .await
            .unwrap()
            .is_empty()
    );
    // Ids with characters a query must escape are found too.
    client
        .send(&Message::new("+1", "x").message_id("a&b=c d/é"))
        .await
        .unwrap();
    assert_eq!(
        client
            .lookup(Lookup::MessageId("a&b=c d/é"))
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(gateway.sent(), 3);
}

#[tokio::test]
async fn failed_lookups_are_503() {
    let (gateway, client) = setup().await;
    client.send(&message()).await.unwrap();
    gateway.fail_lookups(true);
    let err = client
        .lookup(Lookup::MessageId("ord_7-shipped"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::Status { code: 503, .. }),
        "{err:?}"
    );
    gateway.fail_lookups(false);
    assert_eq!(
        client
            .lookup(Lookup::MessageId("ord_7-shipped"))
            .await
            .unwrap()
            .len(),
        1
    );
}
