//! The conformance suite (S1–S13) on the Redis store, against the server at
//! `IDEMKIT_TEST_REDIS_URL` (`scripts/test-servers.sh start` runs one). Each row gets a key prefix
//! of its own.

mod servers;

mod needs_redis {
    use super::*;

    use idem_runtime::RedisStore;

    async fn fresh_store() -> RedisStore {
        let url = server_url();
        RedisStore::builder(url)
            .prefix(format!("conformance:{}:", uuid::Uuid::new_v4().simple()))
            .connect()
            .await
            .expect("the Redis store connects")
    }

    fn server_url() -> String {
        servers::server_url("IDEMKIT_TEST_REDIS_URL", "Redis")
    }

    idem_runtime::conformance_tests!(fresh_store);
    idem_runtime::records_conformance_tests!(fresh_store);
    idem_runtime::restore_conformance_tests!(fresh_store);

    /// S34: a running or ambiguous record's key has no time-to-live in Redis (it is kept until a
    /// decision; only completion gives the key one); a key written before the upgrade with one
    /// loses it at its next claim.
    #[test]
    fn s34_an_ambiguous_records_key_has_no_ttl() {
        idem_runtime::conformance::block_on(async {
            use idem_runtime::store::{
                Claim, ClaimRequest, LeaseToken, Outcome, Takeover, Written,
            };
            use idem_runtime::{Fingerprint, IdempotencyKey, Store};
            use std::time::Duration;

            let prefix = format!("conformance:{}:", uuid::Uuid::new_v4().simple());
            let store = RedisStore::builder(server_url())
                .prefix(prefix.clone())
                .connect()
                .await
                .expect("the Redis store connects");
            let mut admin = redis::Client::open(server_url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let key = IdempotencyKey::derive("sms", &[("to", &"+1555")]);
            let name = format!("{prefix}rec:{key}");
            let ttl = Duration::from_secs(1);
            let claim =
                |token| ClaimRequest::new(key, "sms", Fingerprint([7; 32]), token, ttl, ttl);
            let pttl = |admin: &mut redis::aio::MultiplexedConnection| {
                let mut admin = admin.clone();
                let name = name.clone();
                async move {
                    redis::cmd("PTTL")
                        .arg(&name)
                        .query_async::<i64>(&mut admin)
                        .await
                        .unwrap()
                }
            };
            let first = LeaseToken::new();
            store.claim(&claim(first)).await.unwrap();
            assert_eq!(pttl(&mut admin).await, -1, "running: no time-to-live");
            let marked = store.mark_ambiguous(key, first, "timed out", ttl).await;
            assert_eq!(marked.unwrap(), Written::Applied);
            assert_eq!(pttl(&mut admin).await, -1, "ambiguous: no time-to-live");
            // As an earlier version left it: a time-to-live on the ambiguous record's key.
            let _: i64 = redis::cmd("PEXPIRE")
                .arg(&name)
                .arg(60_000)
                .query_async(&mut admin)
                .await
                .unwrap();
            // ... and an expiry long past in its hash.
            let _: i64 = redis::cmd("HSET")
                .arg(&name)
                .arg("expires_at")
                .arg("1")
                .query_async(&mut admin)
                .await
                .unwrap();
            let second = LeaseToken::new();
            assert_eq!(
                store.claim(&claim(second)).await.unwrap(),
                Claim::Acquired {
                    takeover: Some(Takeover::Ambiguous)
                },
                "read as never expiring: taken over, not made anew"
            );
            assert_eq!(pttl(&mut admin).await, -1, "its next claim drops it");
            let marked = store.mark_ambiguous(key, second, "timed out", ttl).await;
            assert_eq!(marked.unwrap(), Written::Applied);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let third = LeaseToken::new();
            assert_eq!(
                store.claim(&claim(third)).await.unwrap(),
                Claim::Acquired {
                    takeover: Some(Takeover::Ambiguous)
                },
                "past its ttl, still the ambiguous record"
            );
            let done = store.complete(key, third, Outcome::from(b"{}".as_slice()), ttl);
            assert_eq!(done.await.unwrap(), Written::Applied);
            assert!(pttl(&mut admin).await > 0, "completed: kept for its ttl");
        });
    }
}
