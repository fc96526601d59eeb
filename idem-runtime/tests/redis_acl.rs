//! The Redis store through ACL users limited to its key prefix, with exactly the commands the
//! store's docs list (`RedisStore`, "ACL"): an agent's user (the transitions and the keyed
//! operator calls) runs the conformance rows, an operator's user (the same plus `SCAN`) runs the
//! records rows; a key outside the prefix is refused to both, and a store configured with a prefix
//! outside the user's keys fails closed (the body never runs). The users are made on the test
//! server at `IDEMKIT_TEST_REDIS_URL` with `ACL SETUSER` and deleted at the end.

mod servers;

mod needs_redis {
    use super::*;

    use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
    use std::sync::atomic::{AtomicU32, Ordering};

    use idem_runtime::conformance::{self, block_on};
    use idem_runtime::{CallOutcome, Idem, RedisStore};

    use servers::{TestError, charge, unique};

    fn server_url() -> String {
        servers::server_url("IDEMKIT_TEST_REDIS_URL", "Redis")
    }

    /// The rules of an agent's user, as the store's docs give them (after `~<prefix>*`).
    const AGENT: &[&str] = &[
        "-@all",
        "+evalsha",
        "+script|load",
        "+time",
        "+hget",
        "+hmget",
        "+hset",
        "+hdel",
        "+del",
        "+pexpireat",
        "+get",
        "+set",
    ];

    /// An operator's user: an agent's, and `SCAN` for list, counts and prune.
    const OPERATOR: &[&str] = &["+scan"];

    async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
        redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("an admin connection")
    }

    /// Makes user `name` (password `password`) with keys `~<prefix>*` and `rules`.
    async fn set_user(url: &str, name: &str, password: &str, prefix: &str, rules: &[&str]) {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER")
            .arg(name)
            .arg("reset")
            .arg("on")
            .arg(format!(">{password}"))
            .arg(format!("~{prefix}*"))
            .arg("resetchannels");
        for rule in rules {
            cmd.arg(*rule);
        }
        let () = cmd.query_async(&mut admin(url).await).await.unwrap();
    }

    async fn del_user(url: &str, name: &str) {
        let _: i64 = redis::cmd("ACL")
            .arg("DELUSER")
            .arg(name)
            .query_async(&mut admin(url).await)
            .await
            .unwrap();
    }

    /// `url` (no credentials of its own) as user `name`.
    fn as_user(url: &str, name: &str, password: &str) -> String {
        assert!(!url.contains('@'), "the test server's URL carries no user");
        url.replacen("redis://", &format!("redis://{name}:{password}@"), 1)
    }

    async fn store(url: &str, prefix: &str) -> RedisStore {
        RedisStore::builder(url)
            .prefix(format!("{prefix}{}:", uuid::Uuid::new_v4().simple()))
            .connect()
            .await
            .expect("the Redis store connects as the ACL user")
    }

    /// Whether `cmd`, sent as the user at `url`, is refused for lack of permission (`NOPERM`, or,
    /// for a script's keys, the error Redis 7 answers for those).
    async fn refused(url: &str, cmd: &redis::Cmd) -> bool {
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        match cmd.query_async::<redis::Value>(&mut conn).await {
            Ok(_) => false,
            Err(e) => {
                assert!(acl_refusal(&e), "not an ACL refusal: {e}");
                true
            }
        }
    }

    /// Loads `script` as the user at `url`; its SHA-1.
    async fn load(url: &str, script: &str) -> String {
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script)
            .query_async(&mut conn)
            .await
            .expect("the user may load scripts")
    }

    fn acl_refusal(e: &redis::RedisError) -> bool {
        let said = e.to_string();
        e.code() == Some("NOPERM")
            || said.contains("can't access at least one of the keys")
            || said.contains("no permissions")
    }

    macro_rules! rows {
    ($url:expr, $prefix:expr; $($row:ident),* $(,)?) => {$(
        eprintln!("row {} as the ACL user", stringify!($row));
        block_on(async { conformance::$row(store($url, $prefix).await).await });
    )*};
}

    #[test]
    fn a_user_limited_to_the_prefix_runs_the_store_and_is_refused_outside_it() {
        let admin_url = server_url();
        let prefix = format!("{}:", unique("acl"));
        let (agent, operator) = (unique("idemkit_agent"), unique("idemkit_operator"));
        let password = uuid::Uuid::new_v4().simple().to_string();
        let operator_rules: Vec<&str> = AGENT.iter().chain(OPERATOR).copied().collect();
        block_on(async {
            set_user(&admin_url, &agent, &password, &prefix, AGENT).await;
            set_user(&admin_url, &operator, &password, &prefix, &operator_rules).await;
        });
        let agent_url = as_user(&admin_url, &agent, &password);
        let operator_url = as_user(&admin_url, &operator, &password);

        let outcome = catch_unwind(AssertUnwindSafe(|| {
            // The agent's user: every transition, the keyed operator calls, renewals, fencing.
            rows!(&agent_url, &prefix;
                s1_first_call_runs_once_and_is_stored,
                s2_repeat_returns_the_stored_outcome,
                s3_same_key_other_arguments_is_key_reuse,
                s4_retryable_failures_retry_with_the_identical_key,
                s5_permanent_failure_is_not_retried_and_released,
                s6_exhausted_transient_is_released,
                s6_exhausted_ambiguous_is_kept_and_taken_over,
                s6_a_claim_of_an_ambiguous_record_is_a_takeover_from_ambiguity,
                s7_concurrent_calls_run_the_body_once,
                s7_a_caller_that_waits_too_long_gets_in_flight,
                s8_a_dead_holders_lease_expires_and_is_taken_over,
                s8_a_claim_past_a_holders_lease_is_a_takeover_from_an_expired_holder,
                s9_unreachable_store_fails_closed,
                s9_corrupt_outcome_fails_closed,
                s16_an_outcome_that_does_not_read_back_is_unreplayable_and_a_damaged_one_corrupt,
                s10_claims_of_absent_or_expired_records_are_not_takeovers,
                s11_late_writes_of_a_taken_over_lease_are_fenced,
                s11_a_slow_holder_cannot_overwrite_the_new_record,
                s12_renew_extends_a_held_lease_past_its_end_and_its_ttl,
                s12_renew_after_the_lease_ran_out_untaken_still_holds,
                s12_renew_is_refused_to_a_stale_token_and_to_ended_records,
                s12_a_body_longer_than_its_lease_runs_once,
                s13_a_holder_whose_renewals_fail_stops_and_is_taken_over,
                s18_equal_key_fields_under_two_tenants_are_two_operations,
                contention_64_tasks_one_key,
                operation_ids_are_minted_once,
                s18_operation_ids_are_scoped_to_tenants_like_keys,
                unpolled_answers_change_nothing,
                complete_retried_under_its_token_is_applied,
                mark_ambiguous_retried_under_its_token_is_applied,
                s23_a_claimer_with_a_shorter_lease_never_takes_a_renewing_holders_key,
            );
            // The operator's user: the records rows, and S10 (it prunes): list, counts and prune
            // scan the prefix.
            rows!(&operator_url, &prefix;
                s33_a_repeat_after_the_ttl_runs_nothing_and_is_told_when_it_was_done,
                s33_what_did_not_happen_leaves_no_tombstone_and_a_decision_applied_does,
                s33_a_tombstone_is_never_claimed_and_never_replayed,
                s33_a_tombstone_keeps_no_arguments,
                s33_forgetting_a_tombstone_is_kept_as_an_operators_decision,
                s34_an_ambiguous_record_outlives_its_ttl_until_decided,
                records_list_newest_first_and_filtered,
                records_release_is_refused_under_a_live_lease_and_applied_with_force,
                records_forget_makes_the_next_call_run_again,
                records_prune_removes_only_expired_records,
                records_counts_by_tool_and_state,
                records_of_one_tenant_are_listed_apart,
                records_updated_is_the_time_of_the_last_transition,
                s24_forget_is_refused_under_a_live_lease_unless_forced,
                s24_resolve_applied_completes_the_record_and_repeats_replay_it,
                s24_resolve_not_applied_releases_the_record_and_keeps_the_decision,
                s24_resolve_is_refused_while_a_lease_is_live,
                s24_resolve_of_an_expired_holder_fences_it,
                s24_resolve_is_refused_on_a_completed_record,
                s24_resolve_of_no_record_is_not_found,
                s24_resolve_checks_the_outcome_fits_the_decision,
                s24_a_kept_decision_outlives_a_prune_until_its_ttl,
            );

            block_on(async {
                let outside = format!("outside_{}", uuid::Uuid::new_v4().simple());
                // A key outside the prefix: refused to both users, for reads, writes and scripts.
                for url in [&agent_url, &operator_url] {
                    assert!(refused(url, redis::cmd("SET").arg(&outside).arg("x")).await);
                    assert!(refused(url, redis::cmd("GET").arg(&outside)).await);
                    assert!(refused(url, redis::cmd("HGETALL").arg(&outside)).await);
                    // Scripts, which the user may load and run: on a key outside the prefix, or
                    // naming a key of the prefix but writing one outside it.
                    let script = load(url, "return redis.call('SET', KEYS[1], 'x')").await;
                    assert!(
                        refused(url, redis::cmd("EVALSHA").arg(&script).arg(1).arg(&outside)).await
                    );
                    let sneaky =
                        load(url, &format!("return redis.call('SET', '{outside}', 'x')")).await;
                    let inside = format!("{prefix}k");
                    assert!(
                        refused(url, redis::cmd("EVALSHA").arg(&sneaky).arg(1).arg(&inside)).await
                    );
                    // EVAL is not needed (redis-rs sends EVALSHA, and SCRIPT LOAD on NOSCRIPT).
                    assert!(refused(url, redis::cmd("EVAL").arg("return 1").arg(0)).await);
                    // And nothing server-wide.
                    assert!(refused(url, &redis::cmd("FLUSHALL")).await);
                    assert!(refused(url, redis::cmd("KEYS").arg("*")).await);
                    assert!(refused(url, redis::cmd("CONFIG").arg("GET").arg("*")).await);
                }
                // The agent may not scan (the operator's reads are the operator's).
                assert!(refused(&agent_url, redis::cmd("SCAN").arg(0)).await);

                // A store whose prefix is outside the user's keys fails closed: not run, a store error.
                let wrong = RedisStore::builder(&agent_url)
                    .prefix(format!("{outside}:"))
                    .connect()
                    .await
                    .expect("connecting needs no key");
                let runs = AtomicU32::new(0);
                let (result, info) = charge(&Idem::new(wrong), 1, &runs, || async {}).await;
                assert_eq!(runs.load(Ordering::SeqCst), 0, "the body never ran");
                assert_eq!(info, CallOutcome::Refused);
                assert!(matches!(result, Err(TestError::Store(_))), "{result:?}");
                let direct = RedisStore::builder(&agent_url)
                    .prefix(format!("{outside}:"))
                    .connect()
                    .await
                    .unwrap();
                let err = idem_runtime::Records::get(&direct, &servers::key_of(1))
                    .await
                    .unwrap_err();
                assert!(
                    err.to_string()
                        .contains("the Redis user lacks a permission"),
                    "{err}"
                );

                // Nothing was written outside the prefix.
                let found: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{outside}*"))
                    .query_async(&mut admin(&admin_url).await)
                    .await
                    .unwrap();
                assert!(found.is_empty(), "{found:?}");
            });
        }));

        block_on(async {
            del_user(&admin_url, &agent).await;
            del_user(&admin_url, &operator).await;
        });
        if let Err(panic) = outcome {
            resume_unwind(panic);
        }
    }
}
