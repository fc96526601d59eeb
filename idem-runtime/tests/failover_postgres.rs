//! The PostgreSQL store's guarantees under failover, measured (issue 32).
//!
//! Each repetition makes its own primary (a copy, `cp -a`, of one `initdb` made once per run of
//! this binary) and a streaming replica of it (`pg_basebackup -R`, its WAL stream through a
//! [`Link`] that can lag), each on a free port the OS picks (so two runs on one machine do not
//! meet), runs a call,
//! stops the primary as a crash does (`pg_ctl stop -m immediate`: no shutdown checkpoint, no
//! last WAL sent) and promotes the replica (`pg_ctl promote`); then calls the same key on it.
//! Asynchronous replication (the default) is compared with `synchronous_commit = remote_apply`
//! and `synchronous_standby_names = '*'`. As root the servers run as `postgres`. Without the
//! PostgreSQL server binaries the tests skip with a message (and fail under CI).
//!
//! Every call is `charge(order)` of a provider that cannot deduplicate, with no `verify`; counts
//! print as `FAILOVER …` lines (`-- --nocapture`).

#[path = "failover/common.rs"]
mod common;

mod needs_postgres {
    use super::*;

    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::OnceLock;
    use std::time::Duration;

    use common::{
        E, Effects, Link, Tally, binary, charge, free_port, is_root, one_at_a_time, run,
        wait_until, workdir,
    };
    use idem_runtime::{Idem, PostgresStore};

    const LEASE: Duration = Duration::from_secs(1);

    /// The server binaries' directory.
    fn bindir() -> PathBuf {
        let pg_ctl = binary("pg_ctl", "postgresql");
        pg_ctl
            .parent()
            .expect("pg_ctl is in a directory")
            .to_owned()
    }

    /// `bin/name args…`, as `postgres` when we are root.
    fn pg(bin: &Path, name: &str) -> Command {
        let exe = bin.join(name);
        if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    /// What a test needs: the binaries, and the cluster each primary starts as a copy of.
    struct Setup {
        bin: PathBuf,
        template: &'static Path,
    }

    /// The setup.
    fn setup() -> Setup {
        let bin = bindir();
        let template = template(&bin);
        Setup { bin, template }
    }

    /// The directory holding one fresh cluster (`data`), made by `initdb` once per run of this
    /// binary; each primary is a copy of it (`cp -a` of a fresh cluster is faster than another
    /// `initdb`). Deleted when the process exits.
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();

    fn template(bin: &Path) -> &'static Path {
        TEMPLATE.get_or_init(|| {
            let dir = workdir("idemkit-failover-pg-template").keep();
            chown(&dir);
            run(pg(bin, "initdb").arg("-D").arg(dir.join("data")).args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ]));
            extern "C" fn remove_template() {
                if let Some(dir) = TEMPLATE.get() {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            // SAFETY: registers a function that takes no arguments and does not unwind (it
            // ignores the removal's error), to run at the process's normal exit.
            unsafe { libc::atexit(remove_template) };
            dir
        })
    }

    fn chown(dir: &Path) {
        if is_root() {
            run(Command::new("chown").arg("-R").arg("postgres:").arg(dir));
        }
    }

    /// A server's data directory and port.
    struct Server {
        bin: PathBuf,
        data: PathBuf,
        port: u16,
    }

    impl Server {
        /// Starts a server on a [`free_port`] (if another process took it by the time the server
        /// binds, on another, saying so).
        fn start(bin: &Path, data: PathBuf, settings: &str) -> Server {
            for _ in 0..3 {
                let port = free_port();
                let sock = data.parent().unwrap().to_owned();
                let log = data.parent().unwrap().join(format!("server-{port}.log"));
                let out = pg(bin, "pg_ctl")
                    .arg("-D")
                    .arg(&data)
                    .arg("-l")
                    .arg(&log)
                    .args(["-w", "-t", "60", "start", "-o"])
                    .arg(format!(
                        "-c listen_addresses=127.0.0.1 -p {port} -k {} -c fsync=off \
                     -c full_page_writes=off -c max_wal_senders=4 -c wal_level=replica \
                     -c max_connections=50 {settings}",
                        sock.display()
                    ))
                    .output()
                    .unwrap();
                if out.status.success() {
                    return Server {
                        bin: bin.to_owned(),
                        data,
                        port,
                    };
                }
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                assert!(
                    said.contains("could not bind") || said.contains("already in use"),
                    "PostgreSQL did not start on {port}:\n{said}"
                );
                eprintln!("PostgreSQL could not bind {port}, trying another free port:\n{said}");
            }
            panic!("PostgreSQL did not start on three ports");
        }

        fn url(&self) -> String {
            format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
        }

        /// One query's result, by psql (`-At`).
        fn sql(&self, query: &str) -> Option<String> {
            let out = Command::new(self.bin.join("psql"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(["-U", "postgres", "-d", "postgres", "-Atc", query])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        }

        /// As a crash: no checkpoint, no last WAL to the replica.
        fn crash(&self) {
            run(pg(&self.bin, "pg_ctl").arg("-D").arg(&self.data).args([
                "-m",
                "immediate",
                "-w",
                "stop",
            ]));
        }

        fn promote(&self) {
            run(pg(&self.bin, "pg_ctl")
                .arg("-D")
                .arg(&self.data)
                .args(["-w", "-t", "60", "promote"]));
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = pg(&self.bin, "pg_ctl")
                .arg("-D")
                .arg(&self.data)
                .args(["-m", "immediate", "-w", "stop"])
                .output();
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Phase {
        AfterClaim,
        AfterComplete,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Commit {
        Async,
        RemoteApply,
    }

    /// One repetition; see the module docs.
    async fn failover_once(
        setup: &Setup,
        phase: Phase,
        lag: bool,
        commit: Commit,
        tally: &mut Tally,
    ) {
        let bin = setup.bin.as_path();
        let dir = workdir("idemkit-failover-pg");
        run(Command::new("cp")
            .arg("-a")
            .arg(setup.template.join("data"))
            .arg(dir.path().join("primary")));
        chown(dir.path());
        let sync = match commit {
            Commit::Async => "",
            Commit::RemoteApply => {
                "-c synchronous_standby_names='*' -c synchronous_commit=remote_apply"
            }
        };
        let primary = Server::start(bin, dir.path().join("primary"), sync);
        let link = Link::start(primary.port);
        let replica_data = dir.path().join("replica");
        run(pg(bin, "pg_basebackup")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
            ])
            .arg(&replica_data)
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"]));
        // The WAL stream through the link (the later line wins over the one `-R` wrote).
        let conf = replica_data.join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str(&format!(
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name=replica'\n",
            link.port()
        ));
        std::fs::write(&conf, text).unwrap();
        chown(dir.path());
        let replica = Server::start(bin, replica_data, "-c hot_standby=on");
        wait_until("the replica streaming", Duration::from_secs(30), || {
            primary
                .sql("select count(*) from pg_stat_replication where state = 'streaming'")
                .as_deref()
                == Some("1")
        });
        let connect = |url: String| async move {
            PostgresStore::builder(url)
                .connect_timeout(Duration::from_secs(2))
                .connect()
                .await
                .unwrap()
        };
        let a = Idem::new(connect(primary.url()).await);
        let effects = Effects::default();
        let order = 1;
        // Caught up: the replica has applied all the primary wrote so far.
        let caught_up = || {
            primary
                .sql("select bool_and(replay_lsn >= pg_current_wal_lsn()) from pg_stat_replication")
                .as_deref()
                == Some("t")
        };
        wait_until("the replica caught up", Duration::from_secs(30), caught_up);

        let (in_body_tx, in_body) = tokio::sync::oneshot::channel::<()>();
        let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
        if lag && phase == Phase::AfterClaim {
            link.lag();
        }
        let mut call = {
            let (a, effects) = (a.clone(), effects.clone());
            tokio::spawn(async move {
                charge(&a, order, LEASE, &effects, async move {
                    let _ = in_body_tx.send(());
                    let _ = go_rx.await;
                })
                .await
            })
        };
        // A commit that waits for a replica that never answers (`remote_apply`, lagging) waits for
        // ever: the primary dies after this long instead. Asynchronous commits never wait for the
        // replica: a long bound, only against a hang.
        let patience = tokio::time::sleep(match commit {
            Commit::RemoteApply => Duration::from_millis(1500),
            Commit::Async => Duration::from_secs(60),
        });
        tokio::pin!(patience);
        let before: Option<Result<String, E>> = match phase {
            Phase::AfterClaim => {
                let ended = tokio::select! {
                    ended = &mut call => Some(ended.unwrap()),
                    Ok(()) = in_body => None,
                    _ = &mut patience => None,
                };
                primary.crash();
                call.abort();
                ended
            }
            Phase::AfterComplete => {
                let _ = in_body.await;
                if lag {
                    wait_until(
                        "the claim on the replica",
                        Duration::from_secs(30),
                        caught_up,
                    );
                    link.lag();
                }
                let _ = go.send(());
                let ended = tokio::select! {
                    ended = &mut call => Some(ended.unwrap()),
                    _ = &mut patience => None,
                };
                primary.crash();
                match ended {
                    Some(ended) => Some(ended),
                    // Its completion was waiting for the replica: it ends now, unacknowledged.
                    None => tokio::time::timeout(Duration::from_secs(30), call)
                        .await
                        .ok()
                        .map(Result::unwrap),
                }
            }
        };
        link.cut();
        replica.promote();
        drop(a);

        let b = Idem::new(connect(replica.url()).await);
        let after = charge(&b, order, LEASE, &effects, async {}).await;
        tally.add(before.as_ref(), &after, effects.count(order));
    }

    async fn failover_case(
        setup: &Setup,
        phase: Phase,
        lag: bool,
        commit: Commit,
        reps: u32,
    ) -> Tally {
        let mut tally = Tally::default();
        for _ in 0..reps {
            failover_once(setup, phase, lag, commit, &mut tally).await;
        }
        tally.print(&format!(
            "postgres primary+streaming replica, crashed {}{}, {}",
            match phase {
                Phase::AfterClaim => "after the claim",
                Phase::AfterComplete => "after the completion",
            },
            if lag { " with the replica lagging" } else { "" },
            match commit {
                Commit::Async => "asynchronous replication",
                Commit::RemoteApply => "synchronous_commit = remote_apply",
            }
        ));
        tally
    }

    /// Asynchronous replication, the replica lagging: the acknowledged claim is lost and the key
    /// runs again on the promoted replica, every time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_failover_async_lagging_replica_loses_the_claim_and_runs_twice() {
        let _one = one_at_a_time().await;
        let setup = setup();
        let t = failover_case(&setup, Phase::AfterClaim, true, Commit::Async, 2).await;
        assert_eq!((t.double_runs, t.cut_off), (2, 2), "{t:?}");
    }

    /// Asynchronous replication, the replica lagging after the claim: the acknowledged outcome is
    /// lost; the next caller ends ambiguous (S20), nothing runs twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_failover_async_lagging_replica_loses_the_outcome() {
        let _one = one_at_a_time().await;
        let setup = setup();
        let t = failover_case(&setup, Phase::AfterComplete, true, Commit::Async, 2).await;
        assert_eq!(
            (t.double_runs, t.lost_outcomes, t.ambiguous_after),
            (0, 2, 2),
            "{t:?}"
        );
    }

    /// `remote_apply`, the replica lagging: no claim and no outcome is acknowledged that the
    /// replica lacks; no double run, no lost outcome.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_failover_remote_apply_lagging_replica_no_double_run_no_lost_outcome() {
        let _one = one_at_a_time().await;
        let setup = setup();
        for phase in [Phase::AfterClaim, Phase::AfterComplete] {
            let t = failover_case(&setup, phase, true, Commit::RemoteApply, 2).await;
            assert_eq!(
                (t.double_runs, t.lost_outcomes, t.acknowledged),
                (0, 0, 0),
                "{t:?}"
            );
        }
    }

    /// No induced lag (loopback streaming, usually caught up within the crash's round trip):
    /// `remote_apply` must give 0 and 0; asynchronous replication is measured and bounded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_failover_mid_stream_remote_apply_holds_and_async_is_measured() {
        let _one = one_at_a_time().await;
        let setup = setup();
        for phase in [Phase::AfterClaim, Phase::AfterComplete] {
            let t = failover_case(&setup, phase, false, Commit::RemoteApply, 2).await;
            assert_eq!((t.double_runs, t.lost_outcomes), (0, 0), "{t:?}");
            // Asynchronous: the counts are whatever happened, printed, not asserted.
            failover_case(&setup, phase, false, Commit::Async, 2).await;
        }
    }
}
