//! The Redis store as many workers use it: separate connections contending for one key, fencing
//! across workers, and connections killed mid-call (`CLIENT KILL`). Needs `IDEMKIT_TEST_REDIS_URL`
//! with a user that may manage ACL users (`scripts/test-servers.sh start` runs such a server).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_runtime::store::RecordState;
use idem_runtime::{CallOutcome, Idem, Records, RedisStore};

mod servers;
use servers::{TestError, charge, key_of, unique};

fn server_url() -> Option<String> {
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
    let Some(url) = server_url() else { return };
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
    let Some(url) = server_url() else { return };
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

async fn completed(store: &RedisStore, order: u64) -> bool {
    matches!(
        store.get(&key_of(order)).await.unwrap().map(|r| r.state),
        Some(RecordState::Completed { .. })
    )
}

/// The store's connection is killed between calls: the next claim is sent again once it has
/// reconnected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_killed_before_the_claim() {
    let Some(url) = server_url() else { return };
    let f = Faulty::new(&url).await;
    let idem = Idem::new(f.store.clone());
    let runs = AtomicU32::new(0);
    charge(&idem, 1, &runs, || async {}).await.0.unwrap();
    assert_eq!(f.kill().await, 1, "the store's one connection");
    let (second, outcome) = charge(&idem, 2, &runs, || async {}).await;
    assert_eq!((second.is_ok(), outcome), (true, CallOutcome::Completed));
    assert_eq!(runs.load(Ordering::SeqCst), 2, "one run per operation");
    assert!(completed(&f.store, 2).await);
    f.drop_user().await;
}

/// The connection is killed while the body runs: `complete` is sent again after the reconnect,
/// so the outcome is recorded and a repeat replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_killed_while_the_body_runs() {
    let Some(url) = server_url() else { return };
    let f = Faulty::new(&url).await;
    let idem = Idem::new(f.store.clone());
    let runs = AtomicU32::new(0);
    let (result, outcome) = charge(&idem, 1, &runs, || async {
        assert_eq!(f.kill().await, 1, "the claim's connection was live");
    })
    .await;
    assert_eq!((result.is_ok(), outcome), (true, CallOutcome::Completed));
    assert!(completed(&f.store, 1).await);
    let (again, outcome) = charge(&idem, 1, &runs, || async {}).await;
    assert_eq!((again, outcome), (result, CallOutcome::Replayed));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    f.drop_user().await;
}

/// The server refuses the store's user outright: the call fails closed with `Error::Store` and
/// the body does not run; once the user is enabled again, the same call runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_refusing_the_store_fails_closed() {
    let Some(url) = server_url() else { return };
    let f = Faulty::new(&url).await;
    let idem = Idem::new(f.store.clone());
    let runs = AtomicU32::new(0);
    charge(&idem, 1, &runs, || async {}).await.0.unwrap();
    f.set("off").await;
    f.kill().await;
    let (refused, outcome) = charge(&idem, 2, &runs, || async {}).await;
    assert!(
        matches!(refused, Err(TestError::Store(_))),
        "fails closed: {refused:?}"
    );
    assert_eq!(outcome, CallOutcome::Refused);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body did not run");
    f.set("on").await;
    let (ran, outcome) = charge(&idem, 2, &runs, || async {}).await;
    assert_eq!(
        (ran.is_ok(), outcome),
        (true, CallOutcome::Completed),
        "{ran:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    f.drop_user().await;
}
