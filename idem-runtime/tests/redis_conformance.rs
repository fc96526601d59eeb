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
}
