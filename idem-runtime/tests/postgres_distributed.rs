//! The PostgreSQL store as many workers use it: separate pools contending for one key, fencing
//! across workers, and connections that die mid-call. Needs `IDEMKIT_TEST_POSTGRES_URL` with a
//! role that may create roles and schemas (`scripts/test-servers.sh start` runs such a server).

mod servers;

mod needs_postgres {
    use super::*;

    use std::str::FromStr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
    use idem_runtime::{CallOutcome, Idem, PostgresStore, StoreErrorKind};
    use tokio_postgres::NoTls;

    use servers::{TestError, charge, completed, key_of, unique};

    fn server_url() -> String {
        servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL")
    }

    async fn worker_store(url: &str, table: &str) -> PostgresStore {
        PostgresStore::builder(url)
            .schema("idemkit_test")
            .table(table)
            .max_connections(4)
            .connect()
            .await
            .expect("the store connects")
    }

    async fn admin(url: &str) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(url, NoTls)
            .await
            .expect("an admin connection");
        tokio::spawn(conn);
        client
    }

    /// S33: one prune turns every completed record past its ttl into a tombstone (its outcome
    /// dropped), not one batch of them. Failed before: with no tombstone old enough to delete,
    /// the batch loop stopped after its first statement, so 1,000 of 2,500 records lost their
    /// outcome per prune (a store's first 400 days).
    #[tokio::test]
    async fn s33_one_prune_tombstones_every_record_past_its_ttl_not_one_batch() {
        use idem_runtime::store::{ClaimRequest, LeaseToken, Outcome, Written};
        use idem_runtime::{Fingerprint, IdempotencyKey, Records, Store};
        let url = server_url();
        let table = unique("prune");
        let store = worker_store(&url, &table).await;
        let ttl = Duration::from_millis(5);
        for n in 0..2500u32 {
            let key = IdempotencyKey::derive("charge", &[("n", &n)]);
            let token = LeaseToken::new();
            let req = ClaimRequest::new(
                key,
                "charge",
                Fingerprint::of(&n).unwrap(),
                token,
                Duration::from_secs(60),
                ttl,
            );
            store.claim(&req).await.unwrap();
            let written = store
                .complete(key, token, Outcome::from(b"{\"receipt\":1}"), ttl)
                .await
                .unwrap();
            assert_eq!(written, Written::Applied, "each record is completed");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let deleted = Records::prune(&store, usize::MAX).await.unwrap();
        assert_eq!(
            deleted, 0,
            "the tombstones' setting (400 days) has not passed"
        );
        let admin = admin(&url).await;
        let kept: i64 = admin
            .query_one(
                &format!("SELECT count(*) FROM idemkit_test.{table} WHERE length(outcome) > 0"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            kept, 0,
            "records past their ttl still keeping their outcome"
        );
        let all: i64 = admin
            .query_one(&format!("SELECT count(*) FROM idemkit_test.{table}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(all, 2500, "every tombstone kept");
    }

    /// 32 tasks spread over 4 workers (4 stores, 4 pools) call one key at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn contention_32_tasks_over_4_pools_run_the_body_once() {
        let url = server_url();
        let table = unique("contention");
        let mut stores = Vec::new();
        for _ in 0..4 {
            stores.push(worker_store(&url, &table).await);
        }
        servers::contention_32_tasks_over_4_workers(stores).await;
    }

    /// Worker A's lease expires and worker B (another pool) takes over; A's late writes are refused
    /// and B's record stands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fencing_across_workers() {
        let url = server_url();
        let table = unique("fencing");
        let (a, b) = (
            worker_store(&url, &table).await,
            worker_store(&url, &table).await,
        );
        servers::fencing_across_workers(a, b).await;
    }

    /// A role of its own per fault test, so its connections (and only they) can be killed.
    struct Faulty {
        admin: tokio_postgres::Client,
        role: String,
        store: PostgresStore,
    }

    impl Faulty {
        async fn new(url: &str) -> Self {
            let admin = admin(url).await;
            let role = unique("idemkit_fault");
            admin
                .batch_execute(&format!(
                    "CREATE ROLE {role} LOGIN; CREATE SCHEMA {role} AUTHORIZATION {role};"
                ))
                .await
                .expect("the test role may create roles and schemas");
            let mut config = tokio_postgres::Config::from_str(url).unwrap();
            config.user(&role);
            let manager = Manager::from_config(
                config,
                NoTls,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            );
            let pool = Pool::builder(manager).max_size(2).build().unwrap();
            let store = PostgresStore::from_pool(pool, Some(&role), "records")
                .await
                .expect("the store connects as the fault role");
            Faulty { admin, role, store }
        }

        async fn drop_role(self) {
            let Faulty { admin, role, store } = self;
            drop(store);
            kill(&admin, &role).await;
            admin
                .batch_execute(&format!("DROP SCHEMA {role} CASCADE; DROP ROLE {role};"))
                .await
                .unwrap();
        }
    }

    async fn kill(admin: &tokio_postgres::Client, role: &str) -> i64 {
        admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1",
                &[&role],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// The backends of `role` waiting on a row lock.
    async fn lock_waiters(admin: &tokio_postgres::Client, role: &str) -> Vec<i32> {
        admin
            .query(
                "SELECT pid FROM pg_stat_activity WHERE usename = $1 AND wait_event_type = 'Lock'",
                &[&role],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    impl servers::Severable for Faulty {
        type Store = PostgresStore;
        const CONNECTIONS: Option<i64> = None; // A pool: one or two backends.
        fn store(&self) -> &PostgresStore {
            &self.store
        }
        async fn kill(&self) -> i64 {
            kill(&self.admin, &self.role).await
        }
        async fn allow(&self, logins: bool) {
            let login = if logins { "LOGIN" } else { "NOLOGIN" };
            let role = &self.role;
            self.admin
                .batch_execute(&format!("ALTER ROLE {role} {login}"))
                .await
                .unwrap();
        }
    }

    /// The pool's connections are killed between calls: the next claim runs on a fresh connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connection_killed_before_the_claim() {
        let url = server_url();
        let f = Faulty::new(&url).await;
        servers::connection_killed_before_the_claim(&f).await;
        f.drop_role().await;
    }

    /// The connection dies while the body runs: `complete` is sent again on a fresh connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connection_killed_while_the_body_runs() {
        let url = server_url();
        let f = Faulty::new(&url).await;
        servers::connection_killed_while_the_body_runs(&f).await;
        f.drop_role().await;
    }

    /// The backend is killed while the claim statement itself runs (it waits on a row lock another
    /// session holds): the claim is sent again on a new backend, and the body runs once, after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connection_killed_during_the_claim_statement() {
        let url = server_url();
        let f = Faulty::new(&url).await;
        let role = f.role.clone();
        // An expired row for the key, so the claim's upsert has a row to wait for: one an
        // operator resolved as not applied (a running or ambiguous row with no decision never
        // expires by time, S34, and a completed one is a tombstone, S33).
        f.admin
        .execute(
            &format!(
                "INSERT INTO {role}.records (key, tool, fingerprint, state, token, lease_until, expires_at,
                                             resolution, resolved_at, kept_until)
                 VALUES ($1, 'charge', $2, 'ambiguous', $3, now() - interval '1 hour', now() - interval '1 second',
                         'not_applied', now() - interval '1 second', now() - interval '1 second')"
            ),
            &[&key_of(3).as_uuid(), &vec![0u8; 32], &uuid::Uuid::new_v4()],
        )
        .await
        .unwrap();
        let locker = admin(&url).await;
        locker.batch_execute("BEGIN").await.unwrap();
        locker
            .execute(
                &format!("SELECT 1 FROM {role}.records WHERE key = $1 FOR UPDATE"),
                &[&key_of(3).as_uuid()],
            )
            .await
            .unwrap();

        let idem = Idem::new(f.store.clone());
        let runs = Arc::new(AtomicU32::new(0));
        let call = {
            let runs = runs.clone();
            tokio::spawn(async move { charge(&idem, 3, &runs, || async {}).await })
        };
        let first = wait_for_waiter(&f.admin, &role, None).await;
        assert_eq!(kill(&f.admin, &role).await, 1, "only the claim's backend");
        let second = wait_for_waiter(&f.admin, &role, Some(first)).await;
        assert_ne!(first, second, "the claim was sent again on a new backend");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "no run without a claim");
        locker.batch_execute("COMMIT").await.unwrap();

        let (result, outcome) = call.await.unwrap();
        assert_eq!((result.is_ok(), outcome), (true, CallOutcome::Completed));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(completed(&f.store, 3).await);
        f.drop_role().await;
    }

    /// Polls (bounded) until a backend of `role` other than `not` waits on a lock.
    async fn wait_for_waiter(admin: &tokio_postgres::Client, role: &str, not: Option<i32>) -> i32 {
        for _ in 0..500 {
            if let Some(pid) = lock_waiters(admin, role)
                .await
                .into_iter()
                .find(|p| Some(*p) != not)
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no backend of {role} waited on the row lock within 10 s");
    }

    /// The server refuses the store's role outright: the call fails closed with `Error::Store` and
    /// the body does not run; once the role may log in again, the same call runs once.
    /// The server refuses the store's role (`NOLOGIN`): the call fails closed, as unavailable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn server_refusing_the_store_fails_closed() {
        let url = server_url();
        let f = Faulty::new(&url).await;
        let refused = servers::server_refusing_the_store_fails_closed(&f).await;
        assert_eq!(refused, Err(TestError::Store(StoreErrorKind::Unavailable)));
        f.drop_role().await;
    }

    /// Issue 52 finding 6: the claim's answer says what the row was when the claim applied, not
    /// what the statement's snapshot held (a claim that waited on a transaction releasing the row
    /// took a fresh row, and was told it took over an ambiguous one).
    mod claim_reports {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::time::Duration;

        use idem_runtime::settle::{Pass, Settled, Settler};
        use idem_runtime::store::{Claim, ClaimRequest, LeaseToken, Written};
        use idem_runtime::{Fingerprint, IdempotencyKey, PostgresStore, Store, Verified};

        use super::{admin, key_of, unique, worker_store};

        const HOUR: Duration = Duration::from_secs(3600);

        fn url() -> String {
            super::server_url()
        }

        fn claim_of(key: IdempotencyKey, token: LeaseToken) -> ClaimRequest<'static> {
            ClaimRequest::new(
                key,
                "charge",
                Fingerprint::of(&4200u64).unwrap(),
                token,
                HOUR,
                HOUR,
            )
        }

        /// A record of `charge` for `order` kept as ambiguous by a holder that gave up.
        async fn ambiguous(store: &PostgresStore, order: u64) {
            let holder = LeaseToken::new();
            let claimed = store.claim(&claim_of(key_of(order), holder)).await.unwrap();
            assert_eq!(claimed, Claim::Acquired { takeover: None });
            let marked = store
                .mark_ambiguous(key_of(order), holder, "timed out", HOUR)
                .await
                .unwrap();
            assert_eq!(marked, Written::Applied);
        }

        /// A claim of an ambiguous record waits on a transaction that deletes the row (a settler's
        /// or an operator's decision releasing it); the claim then makes a new record, and says so:
        /// `takeover: None`, not a takeover of the ambiguous record its snapshot saw.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn issue52_a_claim_that_waited_on_a_release_reports_a_new_record() {
            let url = url();
            let table = unique("claim_race");
            let store = Arc::new(worker_store(&url, &table).await);
            ambiguous(&store, 1).await;
            let mut releaser = admin(&url).await;
            let release = releaser.transaction().await.unwrap();
            let deleted = release
                .execute(
                    &format!("DELETE FROM idemkit_test.\"{table}\" WHERE key = $1"),
                    &[&key_of(1).as_uuid()],
                )
                .await
                .unwrap();
            assert_eq!(deleted, 1);
            // The claim starts while the row is ambiguous (committed) and locked by the release.
            let claim = tokio::spawn({
                let store = store.clone();
                async move { store.claim(&claim_of(key_of(1), LeaseToken::new())).await }
            });
            let watcher = admin(&url).await;
            let mut waited = false;
            for _ in 0..500 {
                let waiting: i64 = watcher
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity
                      WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO %claim_race%'",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                if waiting > 0 {
                    waited = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(waited, "the claim waits on the release's row lock");
            release.commit().await.unwrap();
            let claimed = claim.await.unwrap().unwrap();
            assert_eq!(
                claimed,
                Claim::Acquired { takeover: None },
                "the row was gone when the claim applied: a new record"
            );
        }

        /// Two settlers over the same ambiguous records: each record is decided once, and verify is
        /// asked once per record.
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn issue52_two_settlers_decide_each_record_once() {
            const N: u64 = 60;
            let url = url();
            let table = unique("two_settlers");
            let store = Arc::new(worker_store(&url, &table).await);
            for order in 0..N {
                ambiguous(&store, order).await;
            }
            let asked = Arc::new(AtomicU32::new(0));
            let settler = |store: Arc<PostgresStore>| {
                let asked = asked.clone();
                Settler::new(store).verify("charge", move |_key| {
                    asked.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<_, String>(Verified::<u64>::NotApplied) }
                })
            };
            // Two workers, each with its own pool, as two settler processes.
            let other = Arc::new(worker_store(&url, &table).await);
            let (a, b) = (settler(store), settler(other));
            let (a, b) = tokio::join!(
                tokio::spawn(async move { a.run_once(&Pass::new()).await }),
                tokio::spawn(async move { b.run_once(&Pass::new()).await }),
            );
            let (a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());
            let decided = a
                .records
                .iter()
                .chain(&b.records)
                .filter(|(_, _, settled)| *settled == Settled::NotApplied)
                .count();
            assert_eq!(decided, N as usize, "{a:?}\n{b:?}");
            assert_eq!(asked.load(Ordering::SeqCst), N as u32);
        }
    }
}
