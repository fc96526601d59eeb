//! The Redis store as many workers use it: separate connections contending for one key, fencing
//! across workers, and connections killed mid-call (`CLIENT KILL`). Needs `IDEMKIT_TEST_REDIS_URL`
//! with a user that may manage ACL users (`scripts/test-servers.sh start` runs such a server).

mod servers;

mod needs_redis {
    use super::*;

    use std::time::Duration;

    use idem_runtime::RedisStore;

    use servers::unique;

    fn server_url() -> String {
        servers::server_url("IDEMKIT_TEST_REDIS_URL", "Redis")
    }

    async fn worker_store(url: &str, prefix: &str) -> RedisStore {
        RedisStore::builder(url)
            .prefix(prefix)
            .connect()
            .await
            .expect("the store connects")
    }

    async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
        redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("an admin connection")
    }

    /// 32 tasks spread over 4 workers (4 stores, 4 connections) call one key at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn contention_32_tasks_over_4_pools_run_the_body_once() {
        let url = server_url();
        let prefix = format!("{}:", unique("contention"));
        let mut stores = Vec::new();
        for _ in 0..4 {
            stores.push(worker_store(&url, &prefix).await);
        }
        servers::contention_32_tasks_over_4_workers(stores).await;
    }

    /// Worker A's lease expires and worker B (another connection) takes over; A's late writes are refused
    /// and B's record stands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fencing_across_workers() {
        let url = server_url();
        let prefix = format!("{}:", unique("fencing"));
        let (a, b) = (
            worker_store(&url, &prefix).await,
            worker_store(&url, &prefix).await,
        );
        servers::fencing_across_workers(a, b).await;
    }

    /// An ACL user of its own per fault test, so its connections (and only they) can be killed.
    struct Faulty {
        admin: redis::aio::MultiplexedConnection,
        user: String,
        store: RedisStore,
    }

    impl Faulty {
        async fn new(url: &str) -> Self {
            let mut admin = admin(url).await;
            let user = unique("idemkit_fault");
            let prefix = format!("{user}:");
            acl(
                &mut admin,
                &user,
                &["on", ">secret", &format!("~{prefix}*"), "+@all"],
            )
            .await;
            let with_user = url.replacen("redis://", &format!("redis://{user}:secret@"), 1);
            let store = RedisStore::builder(with_user)
                .prefix(prefix)
                .timeout(Duration::from_secs(2))
                .connect()
                .await
                .expect("the store connects as the fault user");
            Faulty { admin, user, store }
        }

        /// Kills every connection of the store's user; returns how many.
        async fn kill(&self) -> i64 {
            redis::cmd("CLIENT")
                .arg("KILL")
                .arg("USER")
                .arg(&self.user)
                .query_async(&mut self.admin.clone())
                .await
                .unwrap()
        }

        async fn set(&self, on: &str) {
            acl(&mut self.admin.clone(), &self.user, &[on]).await;
        }

        async fn drop_user(self) {
            let Faulty {
                mut admin,
                user,
                store,
            } = self;
            drop(store);
            let _: i64 = redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&user)
                .query_async(&mut admin)
                .await
                .unwrap();
        }
    }

    async fn acl(admin: &mut redis::aio::MultiplexedConnection, user: &str, rules: &[&str]) {
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg(rules)
            .query_async(admin)
            .await
            .expect("the test user may manage ACL users");
    }

    impl servers::Severable for Faulty {
        type Store = RedisStore;
        const CONNECTIONS: Option<i64> = Some(1); // One multiplexed connection per store.
        fn store(&self) -> &RedisStore {
            &self.store
        }
        async fn kill(&self) -> i64 {
            Faulty::kill(self).await
        }
        async fn allow(&self, logins: bool) {
            self.set(if logins { "on" } else { "off" }).await;
        }
    }

    /// The store's connection is killed between calls: the next claim is sent again once it has
    /// reconnected.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connection_killed_before_the_claim() {
        let url = server_url();
        let f = Faulty::new(&url).await;
        servers::connection_killed_before_the_claim(&f).await;
        f.drop_user().await;
    }

    /// The connection is killed while the body runs: `complete` is sent again after the reconnect.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connection_killed_while_the_body_runs() {
        let url = server_url();
        let f = Faulty::new(&url).await;
        servers::connection_killed_while_the_body_runs(&f).await;
        f.drop_user().await;
    }

    /// The server refuses the store's user (`ACL SETUSER … off`): the call fails closed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn server_refusing_the_store_fails_closed() {
        let url = server_url();
        let f = Faulty::new(&url).await;
        servers::server_refusing_the_store_fails_closed(&f)
            .await
            .unwrap_err();
        f.drop_user().await;
    }
}
