//! The Redis store's guarantees under failover and restart, measured (issue 32).
//!
//! Each test starts its own `redis-server` processes from the installed binary, each on a free
//! port the OS picks (so two runs on one machine do not meet), and
//! kills them with SIGKILL: a primary with a replica that is promoted (`REPLICAOF NO ONE`), and a
//! single server restarted from its append-only file. Without `redis-server` the tests skip
//! with a message (and fail under CI, which installs it).
//!
//! Every call is `charge(order)` of a provider that cannot deduplicate, with no `verify`
//! (`resend(false)`): a body that runs twice for one key is a double run, and a call told `Ok`
//! whose outcome the next call cannot replay is a lost outcome. Counts print as `FAILOVER …`
//! lines (`-- --nocapture`); the tests assert what must hold and only loose bounds on the rest.

#[path = "failover/common.rs"]
mod common;
#[allow(dead_code)]
#[path = "model/protocol.rs"]
mod protocol;
#[allow(dead_code)]
#[path = "model/traces.rs"]
mod traces;

mod needs_redis {
    use super::*;

    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    use common::{
        E, Effects, Link, Tally, binary, charge, free_port, one_at_a_time, wait_until, workdir,
    };
    use idem_runtime::store::{
        Claim, ClaimRequest, LeaseToken, OperationIds, Outcome, StoreFuture, Written,
    };
    use idem_runtime::{Idem, IdempotencyKey, RedisStore, Store, StoreError, Tool};

    const LEASE: Duration = Duration::from_millis(600);
    /// How long a write waits for its replica with `wait_for_replicas`.
    const WAIT: Duration = Duration::from_millis(300);

    /// One `redis-server` process, killed with SIGKILL when dropped.
    struct Redis {
        child: Child,
        port: u16,
    }

    impl Redis {
        /// Starts a server on `port` (a [`free_port`], or the port of a server it restarts; if
        /// another process took it meanwhile, on another free one, saying so) with data in `dir`
        /// and the extra `args`; waits until it answers.
        fn start(bin: &Path, port: u16, dir: &Path, args: &[&str]) -> Redis {
            let mut port = port;
            for _ in 0..3 {
                match Redis::try_start(bin, port, dir, args) {
                    Ok(redis) => return redis,
                    Err(log) => {
                        eprintln!(
                            "redis-server could not start on {port}, trying another free port:\n{log}"
                        );
                        port = free_port();
                    }
                }
            }
            panic!("redis-server did not start on three ports");
        }

        /// The server, or its log if it exited before answering.
        fn try_start(bin: &Path, port: u16, dir: &Path, args: &[&str]) -> Result<Redis, String> {
            let log_path = dir.join(format!("redis-{port}.log"));
            let log = std::fs::File::create(&log_path).unwrap();
            let child = Command::new(bin)
                .args([
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    &port.to_string(),
                    "--dir",
                    dir.to_str().unwrap(),
                    "--save",
                    "",
                    "--daemonize",
                    "no",
                ])
                .args(args)
                .stdout(log)
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut redis = Redis { child, port };
            let mut exited = false;
            wait_until(
                &format!("redis-server on {port}"),
                Duration::from_secs(30),
                || {
                    exited = redis.child.try_wait().unwrap().is_some();
                    exited || redis.query(&["PING"]).is_ok()
                },
            );
            if exited {
                return Err(std::fs::read_to_string(&log_path).unwrap_or_default());
            }
            Ok(redis)
        }

        fn url(&self) -> String {
            format!("redis://127.0.0.1:{}/", self.port)
        }

        /// One command, on a fresh connection.
        fn query(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
            let client = redis::Client::open(self.url())?;
            let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
            let mut cmd = redis::cmd(args[0]);
            for a in &args[1..] {
                cmd.arg(*a);
            }
            cmd.query(&mut conn)
        }

        fn info_has(&self, needle: &str) -> bool {
            match self.query(&["INFO", "replication"]) {
                Ok(v) => format!("{v:?}").contains(needle),
                Err(_) => false,
            }
        }

        /// SIGKILL, and reaped.
        fn kill(mut self) {
            self.child.kill().unwrap();
            self.child.wait().unwrap();
            std::mem::forget(self);
        }
    }

    impl Drop for Redis {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// The binary, or `None` (skipped).
    fn setup() -> std::path::PathBuf {
        binary("redis-server", "redis-server")
    }

    /// Where the primary is killed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Phase {
        /// In the body, after its effect: the claim was acknowledged, nothing else.
        AfterClaim,
        /// After the call returned: its outcome acknowledged.
        AfterComplete,
    }

    /// A primary and its replica (each on a free port) replicating through a [`Link`], in sync;
    /// the directory they keep their files in.
    fn pair(bin: &Path) -> (tempfile::TempDir, Redis, Link, Redis) {
        let dir = workdir("idemkit-failover-redis");
        // Diskless full sync at once (the default waits 5 s for more replicas).
        let primary = Redis::start(
            bin,
            free_port(),
            dir.path(),
            &["--appendonly", "no", "--repl-diskless-sync-delay", "0"],
        );
        let link = Link::start(primary.port);
        let replica_port = free_port();
        let replica = Redis::start(
            bin,
            replica_port,
            dir.path(),
            &[
                "--appendonly",
                "no",
                "--replicaof",
                "127.0.0.1",
                &link.port().to_string(),
                "--repl-ping-replica-period",
                "1",
            ],
        );
        wait_until("the replica in sync", Duration::from_secs(30), || {
            replica.info_has("master_link_status:up") && primary.info_has("state=online")
        });
        (dir, primary, link, replica)
    }

    /// One repetition: a primary and a replica (through a [`Link`]), caller A's call of `order`,
    /// the replica held back (`lag`) from a point of `phase`, the primary killed at `phase` and the
    /// replica promoted; caller B's call of the same order on the new primary.
    async fn failover_once(bin: &Path, phase: Phase, lag: bool, wait: bool, tally: &mut Tally) {
        let (_dir, primary, link, replica) = pair(bin);
        // Long against a loaded machine: the no-WAIT cases count on every claim going through.
        let mut builder = RedisStore::builder(primary.url()).timeout(Duration::from_secs(5));
        if wait {
            builder = builder.wait_for_replicas(1, WAIT);
        }
        let a = Idem::new(builder.connect().await.unwrap());
        let effects = Effects::default();
        let order = 1;

        let (in_body_tx, in_body) = tokio::sync::oneshot::channel::<()>();
        let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
        if lag && phase == Phase::AfterClaim {
            link.lag();
        }
        let call = {
            let (a, effects) = (a.clone(), effects.clone());
            tokio::spawn(async move {
                charge(&a, order, LEASE, &effects, async move {
                    let _ = in_body_tx.send(());
                    let _ = go_rx.await;
                })
                .await
            })
        };
        // `None`: the call was cut off by the failover, mid-call.
        let before: Option<Result<String, E>> = match phase {
            Phase::AfterClaim => {
                // The body's effect is made (or the claim refused): the primary dies now, and
                // only then is the call dropped (its drop guard's write finds no primary).
                let mut call = call;
                let ended = tokio::select! {
                    ended = &mut call => Some(ended.unwrap()),
                    Ok(()) = in_body => None,
                };
                primary.kill();
                call.abort();
                ended
            }
            Phase::AfterComplete => {
                // `Err`: the body never ran, its claim refused (with `wait_for_replicas`, a replica
                // that did not acknowledge it within `WAIT`: a loaded machine can make that happen
                // without the induced lag). Nothing then is on the replica to wait for.
                let in_body = in_body.await.is_ok();
                if lag && in_body {
                    // The claim is on the replica; from now on nothing more reaches it.
                    wait_until(
                        "the claim on the replica",
                        Duration::from_secs(10),
                        || matches!(replica.query(&["DBSIZE"]), Ok(redis::Value::Int(n)) if n >= 1),
                    );
                    link.lag();
                }
                let _ = go.send(());
                let ended = call.await.unwrap();
                primary.kill();
                Some(ended)
            }
        };
        link.cut();
        replica.query(&["REPLICAOF", "NO", "ONE"]).unwrap();
        drop(a);

        let b = Idem::new(RedisStore::connect(&replica.url()).await.unwrap());
        let after = charge(&b, order, LEASE, &effects, async {}).await;
        tally.add(before.as_ref(), &after, effects.count(order));
    }

    async fn failover_case(phase: Phase, lag: bool, wait: bool, reps: u32) -> Tally {
        let bin = setup();
        let mut tally = Tally::default();
        for _ in 0..reps {
            failover_once(&bin, phase, lag, wait, &mut tally).await;
        }
        let case = format!(
            "redis primary+replica, killed {}{}, {}",
            match phase {
                Phase::AfterClaim => "after the claim",
                Phase::AfterComplete => "after the completion",
            },
            if lag { " with the replica lagging" } else { "" },
            if wait {
                "wait_for_replicas(1, 300ms)"
            } else {
                "no WAIT"
            }
        );
        tally.print(&case);
        tally
    }

    /// Without `WAIT`, a replica that lags loses the acknowledged claim: the key runs again on the
    /// new primary, every time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_failover_lagging_replica_without_wait_loses_the_claim_and_runs_twice() {
        let _one = one_at_a_time().await;
        let t = failover_case(Phase::AfterClaim, true, false, 3).await;
        assert_eq!((t.double_runs, t.cut_off), (3, 3), "{t:?}");
    }

    /// With `wait_for_replicas(1, …)` the same claim is refused (the body never runs on the old
    /// primary): no double run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_failover_lagging_replica_with_wait_refuses_the_claim_no_double_run() {
        let _one = one_at_a_time().await;
        let t = failover_case(Phase::AfterClaim, true, true, 3).await;
        assert_eq!((t.double_runs, t.lost_outcomes), (0, 0), "{t:?}");
        assert_eq!(t.refused_before, 3, "{t:?}");
    }

    /// Without `WAIT`, an acknowledged completion the replica never got is lost: the next caller
    /// finds the claim, waits out the lease and (no dedup, no verify) ends ambiguous. No double
    /// run (S20), but the outcome is gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_failover_lagging_replica_without_wait_loses_the_outcome() {
        let _one = one_at_a_time().await;
        let t = failover_case(Phase::AfterComplete, true, false, 3).await;
        assert_eq!(
            (t.double_runs, t.lost_outcomes, t.ambiguous_after),
            (0, 3, 3),
            "{t:?}"
        );
    }

    /// With `WAIT` the completion is never acknowledged while the replica lags: nothing told `Ok`
    /// is lost, nothing runs twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_failover_lagging_replica_with_wait_acknowledges_nothing_it_loses() {
        let _one = one_at_a_time().await;
        let t = failover_case(Phase::AfterComplete, true, true, 3).await;
        assert_eq!((t.double_runs, t.lost_outcomes), (0, 0), "{t:?}");
        assert_eq!(t.acknowledged, 0, "{t:?}");
    }

    /// No induced lag (loopback replication, usually caught up within the kill's round trip),
    /// killed right after the completion: with `WAIT`, 0 and 0 must hold; without it the counts
    /// are printed (nondeterministic), not asserted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_failover_mid_stream_wait_holds_and_no_wait_is_measured() {
        let _one = one_at_a_time().await;
        for phase in [Phase::AfterClaim, Phase::AfterComplete] {
            let t = failover_case(phase, false, true, 5).await;
            assert_eq!((t.double_runs, t.lost_outcomes), (0, 0), "{t:?}");
            // Without `WAIT` the counts are whatever happened: printed, not asserted.
            failover_case(phase, false, false, 5).await;
        }
    }

    /// A single server, SIGKILLed right after a call returned and restarted from its data
    /// directory: with `appendfsync always` the outcome is there every time; `everysec` (the
    /// write reaches the OS before the reply, the fsync a second later: a process kill keeps it, a
    /// power loss may not) is measured; without persistence every outcome is lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_restart_aof_always_keeps_every_outcome_everysec_is_measured() {
        let _one = one_at_a_time().await;
        let bin = setup();
        const REPS: u32 = 8;
        for (name, args) in [
            (
                "always",
                &["--appendonly", "yes", "--appendfsync", "always"][..],
            ),
            (
                "everysec",
                &["--appendonly", "yes", "--appendfsync", "everysec"][..],
            ),
            ("no persistence", &["--appendonly", "no"][..]),
        ] {
            let dir = workdir("idemkit-restart-redis");
            let mut tally = Tally::default();
            let effects = Effects::default();
            for order in 0..u64::from(REPS) {
                let server = Redis::start(&bin, free_port(), dir.path(), args);
                let a = Idem::new(RedisStore::connect(&server.url()).await.unwrap());
                let before = charge(&a, order, LEASE, &effects, async {}).await;
                let port = server.port;
                server.kill();
                drop(a);
                let server = Redis::start(&bin, port, dir.path(), args);
                let b = Idem::new(RedisStore::connect(&server.url()).await.unwrap());
                let after = charge(&b, order, LEASE, &effects, async {}).await;
                tally.add(Some(&before), &after, effects.count(order));
                server.kill();
            }
            tally.print(&format!("redis kill -9 and restart, {name}"));
            assert_eq!(tally.acknowledged, REPS, "{tally:?}");
            match name {
                "always" => assert_eq!((tally.double_runs, tally.lost_outcomes), (0, 0)),
                "no persistence" => {
                    assert_eq!((tally.double_runs, tally.lost_outcomes), (REPS, REPS))
                }
                // `everysec`: measured and printed (a process kill lost one of 80 once).
                _ => {}
            }
        }
    }

    // ---- The failover's trace, checked against the model --------------------------------------------

    /// A client that follows a failover: the old primary's store until [`switch`](Self::switch),
    /// the new primary's after.
    struct Follows(std::sync::RwLock<std::sync::Arc<RedisStore>>);

    impl Follows {
        fn now(&self) -> std::sync::Arc<RedisStore> {
            self.0.read().unwrap().clone()
        }
        fn switch(&self, to: RedisStore) {
            *self.0.write().unwrap() = std::sync::Arc::new(to);
        }
    }

    impl Store for Follows {
        fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
            StoreFuture::boxed(async move { Store::claim(&*self.now(), req).await })
        }
        fn renew(
            &self,
            key: IdempotencyKey,
            token: LeaseToken,
            lease: Duration,
        ) -> StoreFuture<'_, Written> {
            StoreFuture::boxed(async move { Store::renew(&*self.now(), key, token, lease).await })
        }
        fn complete(
            &self,
            key: IdempotencyKey,
            token: LeaseToken,
            outcome: Outcome,
            ttl: Duration,
        ) -> StoreFuture<'_, Written> {
            StoreFuture::boxed(async move {
                Store::complete(&*self.now(), key, token, outcome, ttl).await
            })
        }
        fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
            StoreFuture::boxed(async move { Store::release(&*self.now(), key, token).await })
        }
        fn mark_ambiguous<'a>(
            &'a self,
            key: IdempotencyKey,
            token: LeaseToken,
            note: &'a str,
            ttl: Duration,
        ) -> StoreFuture<'a, Written> {
            StoreFuture::boxed(async move {
                Store::mark_ambiguous(&*self.now(), key, token, note, ttl).await
            })
        }
    }

    #[async_trait::async_trait]
    impl OperationIds for Follows {
        async fn operation_id(
            &self,
            name: &str,
            fresh: uuid::Uuid,
        ) -> Result<uuid::Uuid, StoreError> {
            self.now().operation_id(name, fresh).await
        }
    }

    /// The store transitions of a failover (the replica lagging, the primary killed after the
    /// claim, the client following to the promoted replica), recorded, and checked against the
    /// model (`model_stores.rs`'s check): the trace and its verdict.
    async fn failover_trace(
        bin: &Path,
        wait: bool,
    ) -> (Vec<traces::Event>, Result<usize, traces::Divergence>) {
        const TICK: Duration = Duration::from_millis(200);
        let (_dir, primary, link, replica) = pair(bin);
        let mut builder = RedisStore::builder(primary.url()).timeout(Duration::from_secs(1));
        if wait {
            builder = builder.wait_for_replicas(1, WAIT);
        }
        let first = builder.connect().await.unwrap();
        let store = std::sync::Arc::new(traces::Recorder::wrap(
            Follows(std::sync::RwLock::new(std::sync::Arc::new(first))),
            TICK,
            None,
        ));
        let idem = Idem::new(store.clone());
        let tool = |lease: u32| {
            Tool::new("send_sms")
                .idem(&idem)
                .lease(TICK * lease)
                .max_attempts(2)
                .resend(false)
                .in_flight_wait(Duration::from_secs(30))
        };
        link.lag();
        let (in_body_tx, in_body) = tokio::sync::oneshot::channel::<()>();
        let mut in_body_tx = Some(in_body_tx);
        let a = {
            let (store, tool) = (store.clone(), tool(3));
            let fields: &[idem_runtime::KeyField<'static>] = &[("order", &1u64)];
            async move {
                tool.side_effect(fields, &(), move |_key| {
                    store.effect(0);
                    if let Some(tx) = in_body_tx.take() {
                        let _ = tx.send(());
                    }
                    std::future::pending::<Result<u32, E>>()
                })
                .await
            }
        };
        tokio::select! {
            _ = a => {}
            Ok(()) = in_body => {}
        }
        // The primary dies with the caller in its body; the caller is gone with it.
        primary.kill();
        link.cut();
        replica.query(&["REPLICAOF", "NO", "ONE"]).unwrap();
        store
            .inner()
            .switch(RedisStore::connect(&replica.url()).await.unwrap());
        // Callers are numbered by their first recorded claim: without the first one's, this is 0.
        let b_number = u8::from(!store.events().is_empty());
        let fields: &[idem_runtime::KeyField<'static>] = &[("order", &1u64)];
        let log = store.clone();
        let _ = tool(6)
            .side_effect(fields, &(), move |_key| {
                log.effect(b_number);
                async { Ok::<u32, E>(1) }
            })
            .await;
        let trace = store.events();
        let model = protocol::Config {
            leases: vec![3, 6],
            offsets: vec![0, 0],
            store: protocol::StoreKind::OneClock,
            dedup: false,
            resend: false,
            verifies: false,
            max_attempts: 2,
            faults: protocol::Faults {
                crash: true,
                drop: true,
                store_errors: true,
                schedule_gives_up: true,
            },
            operator_actions: 0,
            exec: protocol::Exec::CODE,
        };
        let verdict = traces::validate_untimed(&model, &trace);
        (trace, verdict)
    }

    fn show(trace: &[traces::Event]) -> String {
        trace
            .iter()
            .map(|e| format!("  t={} caller {} {:?}\n", e.tick, e.caller, e.seen))
            .collect()
    }

    /// Trace validation catches the failover without `WAIT`: the key claimed and run by the first
    /// caller is found absent and claimed afresh by the second, which no behaviour of the model
    /// allows (a running record is only taken over, after its lease, and kept ambiguous); the
    /// same failover with `wait_for_replicas` is a model behaviour.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_failover_trace_without_wait_is_rejected_by_the_model_with_wait_accepted() {
        let _one = one_at_a_time().await;
        let bin = setup();
        let (trace, verdict) = failover_trace(&bin, false).await;
        print!("without WAIT:\n{}", show(&trace));
        let d = verdict.expect_err("a lost claim is a model behaviour");
        common::log_line(&format!(
            "TRACE redis failover without WAIT: rejected at transition {} ({:?}) after {} model \
         states explained the trace before it",
            d.at, d.event, d.candidates
        ));
        assert_eq!(
            (d.event.caller, d.event.seen),
            (1, traces::Seen::Acquired { takeover: false }),
            "{d:?}\n{}",
            show(&trace)
        );

        let (trace, verdict) = failover_trace(&bin, true).await;
        print!("with WAIT:\n{}", show(&trace));
        let visited = verdict.unwrap_or_else(|d| panic!("{d:?}\n{}", show(&trace)));
        common::log_line(&format!(
            "TRACE redis failover with wait_for_replicas: a model behaviour ({} transitions, \
         {visited} model states searched)",
            trace.len()
        ));
    }

    /// `wait_for_replicas` changes how every script is sent (`EVALSHA` and `WAIT` pipelined, the
    /// script loaded on `NOSCRIPT`): the conformance rows of the transitions and of the operator's
    /// records, on a store with it against a primary and its replica, each row with a prefix of its
    /// own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_wait_for_replicas_passes_the_conformance_rows() {
        use idem_runtime::conformance;
        let _one = one_at_a_time().await;
        let bin = setup();
        let (_dir, primary, _link, _replica) = pair(&bin);
        let url = primary.url();
        let store = || {
            RedisStore::builder(url.clone())
                .prefix(format!("wait:{}:", uuid::Uuid::new_v4().simple()))
                .wait_for_replicas(1, Duration::from_secs(2))
                .connect()
        };
        macro_rules! rows {
        ($($row:ident),*) => {$(
            conformance::$row(store().await.unwrap()).await;
        )*};
    }
        rows!(
            s1_first_call_runs_once_and_is_stored,
            s2_repeat_returns_the_stored_outcome,
            s3_same_key_other_arguments_is_key_reuse,
            s5_permanent_failure_is_not_retried_and_released,
            s6_exhausted_ambiguous_is_kept_and_taken_over,
            s7_concurrent_calls_run_the_body_once,
            s8_a_dead_holders_lease_expires_and_is_taken_over,
            s11_late_writes_of_a_taken_over_lease_are_fenced,
            s12_renew_extends_a_held_lease_past_its_end_and_its_ttl,
            s12_renew_is_refused_to_a_stale_token_and_to_ended_records,
            contention_64_tasks_one_key,
            operation_ids_are_minted_once,
            complete_retried_under_its_token_is_applied,
            mark_ambiguous_retried_under_its_token_is_applied,
            records_forget_makes_the_next_call_run_again,
            s24_resolve_applied_completes_the_record_and_repeats_replay_it,
            s24_resolve_not_applied_releases_the_record_and_keeps_the_decision
        );
    }
}
