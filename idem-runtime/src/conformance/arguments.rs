//! S28, one verify per tool: a call of a tool with `verify` keeps its arguments with its record
//! ([`ClaimRequest::arguments`]), so that a settler asks the tool's own verify with them; they
//! stay through a takeover (the settler's claim sends none) and a claim given back, and a new
//! record of the key keeps only its own.

use super::records::HOUR;
use super::{StoreUnderTest, fingerprint_of, key_of};
use crate::store::{
    Claim, ClaimRequest, Decision, LeaseToken, Outcome, RecordState, Takeover, Written,
};

/// The arguments a call of `sms(to, text)` keeps, as the attribute serializes them.
const ARGUMENTS: &[u8] = br#"["+15550100","your code is 4200"]"#;

async fn claim(
    store: &impl StoreUnderTest,
    order: u64,
    arguments: Option<&[u8]>,
) -> (LeaseToken, Claim) {
    let token = LeaseToken::new();
    let req = ClaimRequest::new(
        key_of(order),
        "sms",
        fingerprint_of(4200),
        token,
        HOUR,
        HOUR,
    )
    .with_arguments(arguments);
    (token, store.claim(&req).await.unwrap())
}

async fn kept(store: &impl StoreUnderTest, order: u64) -> Option<Vec<u8>> {
    store
        .get(&key_of(order))
        .await
        .unwrap()
        .expect("the record is there")
        .arguments
}

/// S28: the arguments a claim sends are kept with the record and read back as sent, while it
/// runs and once it is ambiguous; a claim that sends none (a takeover by the settler) keeps them,
/// and so does that claim given back unused (S27); a record of a tool that sends none keeps none;
/// a new record of the key after a release keeps only its own claim's. Failed before: a record
/// kept no arguments.
pub async fn s28_a_verify_tools_arguments_are_kept_with_its_record_through_takeovers<
    S: StoreUnderTest,
>(
    store: S,
) {
    let (holder, claimed) = claim(&store, 1, Some(ARGUMENTS)).await;
    assert_eq!(claimed, Claim::Acquired { takeover: None });
    assert_eq!(
        kept(&store, 1).await.as_deref(),
        Some(ARGUMENTS),
        "while it runs"
    );
    let marked = store
        .mark_ambiguous(key_of(1), holder, "timed out", HOUR)
        .await;
    assert_eq!(marked.unwrap(), Written::Applied);
    assert_eq!(
        kept(&store, 1).await.as_deref(),
        Some(ARGUMENTS),
        "ambiguous"
    );

    // The settler's claim sends none: the record keeps the caller's.
    let (settler, claimed) = claim(&store, 1, None).await;
    assert_eq!(
        claimed,
        Claim::Acquired {
            takeover: Some(Takeover::Ambiguous)
        }
    );
    assert_eq!(
        kept(&store, 1).await.as_deref(),
        Some(ARGUMENTS),
        "taken over"
    );
    let given_back = store.restore(key_of(1), settler, "timed out", HOUR).await;
    assert_eq!(given_back.unwrap(), Written::Applied);
    assert_eq!(
        kept(&store, 1).await.as_deref(),
        Some(ARGUMENTS),
        "given back"
    );

    // Settled as not applied: released; the next call's record keeps its own arguments only.
    let (settler, _) = claim(&store, 1, None).await;
    let settled = store
        .settle(&key_of(1), settler, Decision::NotApplied, None, None, HOUR)
        .await;
    assert_eq!(settled.unwrap(), Written::Applied);
    let (_, claimed) = claim(&store, 1, None).await;
    assert_eq!(claimed, Claim::Acquired { takeover: None });
    assert_eq!(
        kept(&store, 1).await,
        None,
        "a new record keeps none of the last one's"
    );

    // A tool without `verify` sends none: its record keeps none.
    let (_, claimed) = claim(&store, 2, None).await;
    assert_eq!(claimed, Claim::Acquired { takeover: None });
    assert_eq!(kept(&store, 2).await, None);
}

/// S28 and S33: a completed record needs its arguments no more (verify asks only about an
/// outcome that is unknown), and a tombstone, kept for the tombstone setting (400 days past the
/// ttl by default), keeps none: the prune that drops its outcome drops them too. Failed before:
/// the tombstone kept the call's arguments as long as itself.
pub async fn s33_a_tombstone_keeps_no_arguments<S: StoreUnderTest>(store: S) {
    let ttl = std::time::Duration::from_millis(1000);
    let token = LeaseToken::new();
    let req = ClaimRequest::new(key_of(3), "sms", fingerprint_of(4200), token, HOUR, ttl)
        .with_arguments(Some(ARGUMENTS));
    assert_eq!(
        store.claim(&req).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    let completed = store
        .complete(key_of(3), token, Outcome::from(b"{}"), ttl)
        .await;
    assert_eq!(completed.unwrap(), Written::Applied);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    store.prune(100).await.unwrap();
    let record = store
        .get(&key_of(3))
        .await
        .unwrap()
        .expect("a tombstone is shown");
    assert_eq!(record.state, RecordState::Tombstone);
    assert_eq!(record.arguments, None, "a tombstone keeps no arguments");
}
