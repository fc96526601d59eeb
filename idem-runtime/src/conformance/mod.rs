//! The conformance suite (feature `conformance`): one test per behaviour of the executor
//! protocol (S1–S13, S18), per rule of [`Store`]'s answers, and per operator read
//! of [`Records`], generic over the store, so every store proves it
//! obeys the same table; this crate's four stores run it, and so can yours.
//!
//! A store's test file runs it in two lines, for any type that is a [`StoreUnderTest`] (a
//! [`Store`], its [`OperationIds`] and its
//! [`Records`]), given an `async fn` that returns a fresh, empty one:
//!
//! ```ignore
//! // tests/conformance.rs of your store's crate, with idem-runtime's feature `conformance`
//! async fn fresh_store() -> MyStore { MyStore::connect_to_a_new_empty_namespace().await }
//! idem_runtime::conformance_tests!(fresh_store); // the protocol's rows
//! idem_runtime::records_conformance_tests!(fresh_store); // the operator reads
//! idem_runtime::restore_conformance_tests!(fresh_store); // S27: claims given back
//! ```
//!
//! `idem-runtime/tests/third_party_store.rs` is a complete store written that way, with nothing
//! but the public API. Each row is also a public `async fn` here, to run on its own.
//!
//! Each row runs on a multi-threaded runtime in real time, with leases of a second or less,
//! because stores other than memory keep their own clock.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::store::{OperationIds, Records};
use crate::{
    CallOutcome, Classify, Error, Failure, Fingerprint, Idem, IdempotencyKey, RetryPolicy, Store,
    StoreErrorKind, Tool, observe,
};

mod answers;
mod arguments;
mod faults;
mod happy;
mod lease;
mod records;
mod resolve;
mod restore;
mod settle;
mod settle_bounds;
mod settle_cut_off;
mod takeover;
mod tombstones;

pub use self::answers::unpolled_answers_change_nothing;
pub use self::arguments::{
    s28_a_verify_tools_arguments_are_kept_with_its_record_through_takeovers,
    s33_a_tombstone_keeps_no_arguments,
};
pub use self::faults::{
    operation_ids_are_minted_once, s8_a_dead_holders_lease_expires_and_is_taken_over,
    s9_corrupt_outcome_fails_closed, s9_unreachable_store_fails_closed,
    s11_a_slow_holder_cannot_overwrite_the_new_record,
    s11_late_writes_of_a_taken_over_lease_are_fenced,
    s16_an_outcome_that_does_not_read_back_is_unreplayable_and_a_damaged_one_corrupt,
    s18_operation_ids_are_scoped_to_tenants_like_keys,
    s34_an_ambiguous_record_outlives_its_ttl_until_decided,
};
pub use self::happy::{
    contention_64_tasks_one_key, s1_first_call_runs_once_and_is_stored,
    s2_repeat_returns_the_stored_outcome, s3_same_key_other_arguments_is_key_reuse,
    s4_retryable_failures_retry_with_the_identical_key,
    s5_permanent_failure_is_not_retried_and_released,
    s6_exhausted_ambiguous_is_kept_and_taken_over, s6_exhausted_transient_is_released,
    s7_a_caller_that_waits_too_long_gets_in_flight, s7_concurrent_calls_run_the_body_once,
};
pub use self::lease::{
    s12_a_body_longer_than_its_lease_runs_once,
    s12_renew_after_the_lease_ran_out_untaken_still_holds,
    s12_renew_extends_a_held_lease_past_its_end_and_its_ttl,
    s12_renew_is_refused_to_a_stale_token_and_to_ended_records,
    s13_a_holder_whose_renewals_fail_stops_and_is_taken_over,
    s18_equal_key_fields_under_two_tenants_are_two_operations,
};
pub use self::records::{
    records_counts_by_tool_and_state, records_forget_makes_the_next_call_run_again,
    records_list_newest_first_and_filtered, records_of_one_tenant_are_listed_apart,
    records_prune_removes_only_expired_records,
    records_release_is_refused_under_a_live_lease_and_applied_with_force,
    records_updated_is_the_time_of_the_last_transition,
};
pub use self::resolve::{
    complete_retried_under_its_token_is_applied, mark_ambiguous_retried_under_its_token_is_applied,
    s23_a_claimer_with_a_shorter_lease_never_takes_a_renewing_holders_key,
    s24_a_kept_decision_outlives_a_prune_until_its_ttl,
    s24_forget_is_refused_under_a_live_lease_unless_forced,
    s24_resolve_applied_completes_the_record_and_repeats_replay_it,
    s24_resolve_checks_the_outcome_fits_the_decision, s24_resolve_is_refused_on_a_completed_record,
    s24_resolve_is_refused_while_a_lease_is_live,
    s24_resolve_not_applied_releases_the_record_and_keeps_the_decision,
    s24_resolve_of_an_expired_holder_fences_it, s24_resolve_of_no_record_is_not_found,
};
pub use self::restore::{
    a_claim_sent_again_under_its_token_is_the_same_claim,
    s27_a_claim_is_given_back_only_under_its_token_and_before_its_end,
    s27_a_holders_record_brought_back_keeps_an_unknown_outcome_when_given_back,
    s27_a_new_record_given_back_is_absent,
    s27_a_taken_over_ambiguous_record_given_back_is_ambiguous_as_it_was,
    s27_a_taken_over_expired_holder_given_back_is_that_holders_again,
};
pub use self::settle::{
    s28_a_caller_racing_the_settler_never_runs_body_or_verify_alongside,
    s28_a_record_a_caller_holds_is_passed_by,
    s28_applied_completes_the_record_and_callers_replay_it,
    s28_no_verify_is_left_and_counted_and_a_dry_run_changes_nothing,
    s28_not_applied_releases_the_record_and_the_next_call_runs,
    s28_the_hosts_settler_task_settles_without_a_caller_and_stops,
    s28_unknown_keeps_the_record_and_counts_it_up_to_the_bound,
};
pub use self::settle_bounds::{
    s32_the_age_bound_counts_from_when_the_operation_was_first_made,
    s32_the_operator_bound_counts_across_callers_retries,
    s34_a_pass_reports_the_oldest_unknown_it_left,
};
pub use self::settle_cut_off::{
    s30_a_pass_cut_off_mid_verify_gives_the_record_back_at_once,
    s30_a_settler_that_dies_mid_verify_leaves_the_record_listed_once_its_lease_lapses,
    s31_a_dead_callers_record_is_reported_and_settled_without_a_caller,
    s31_a_lapsed_takeover_of_an_ambiguous_record_reads_with_its_note,
};
pub use self::takeover::{
    s6_a_claim_of_an_ambiguous_record_is_a_takeover_from_ambiguity,
    s8_a_claim_past_a_holders_lease_is_a_takeover_from_an_expired_holder,
    s10_claims_of_absent_or_expired_records_are_not_takeovers,
};
pub use self::tombstones::{
    s33_a_repeat_after_the_ttl_runs_nothing_and_is_told_when_it_was_done,
    s33_a_tombstone_is_never_claimed_and_never_replayed,
    s33_forgetting_a_tombstone_is_kept_as_an_operators_decision,
    s33_what_did_not_happen_leaves_no_tombstone_and_a_decision_applied_does,
};

/// What the suite tests: a [`Store`] (the claim state machine the executor drives), its
/// [`OperationIds`], and its operator [`Records`] (the rows read what the calls left behind
/// through them). Every type with the three is one.
pub trait StoreUnderTest: Store + OperationIds + Records {}

impl<S: Store + OperationIds + Records> StoreUnderTest for S {}

/// Generates one `#[test]` per conformance row for the store `make` returns (an `async fn`
/// returning a fresh, empty store each time it is called). A new row goes in this list and in
/// `idem-runtime/tests/redis_acl.rs`, which runs the rows by hand as a user limited by an ACL.
#[macro_export]
macro_rules! conformance_tests {
    ($make:path) => {
        $crate::conformance_tests!(@rows $make;
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
            s33_a_repeat_after_the_ttl_runs_nothing_and_is_told_when_it_was_done,
            s33_what_did_not_happen_leaves_no_tombstone_and_a_decision_applied_does,
            s33_a_tombstone_is_never_claimed_and_never_replayed,
            s33_forgetting_a_tombstone_is_kept_as_an_operators_decision,
            s34_an_ambiguous_record_outlives_its_ttl_until_decided,
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
            s23_a_claimer_with_a_shorter_lease_never_takes_a_renewing_holders_key
        );
    };
    (@rows $make:path; $($row:ident),*) => {$(
        #[test]
        fn $row() {
            $crate::conformance::block_on(async { $crate::conformance::$row($make().await).await });
        }
    )*};
}

/// Generates one `#[test]` per settler row (S28: [`Settler`](crate::Settler) over the store
/// `make` returns, which implements [`Records::settle`]).
#[macro_export]
macro_rules! settle_conformance_tests {
    ($make:path) => {
        $crate::conformance_tests!(@rows $make;
            s28_applied_completes_the_record_and_callers_replay_it,
            s28_not_applied_releases_the_record_and_the_next_call_runs,
            s28_unknown_keeps_the_record_and_counts_it_up_to_the_bound,
            s28_no_verify_is_left_and_counted_and_a_dry_run_changes_nothing,
            s28_a_record_a_caller_holds_is_passed_by,
            s28_a_caller_racing_the_settler_never_runs_body_or_verify_alongside,
            s28_the_hosts_settler_task_settles_without_a_caller_and_stops,
            s28_a_verify_tools_arguments_are_kept_with_its_record_through_takeovers,
            s33_a_tombstone_keeps_no_arguments,
            s30_a_pass_cut_off_mid_verify_gives_the_record_back_at_once,
            s30_a_settler_that_dies_mid_verify_leaves_the_record_listed_once_its_lease_lapses,
            s31_a_dead_callers_record_is_reported_and_settled_without_a_caller,
            s31_a_lapsed_takeover_of_an_ambiguous_record_reads_with_its_note,
            s32_the_operator_bound_counts_across_callers_retries,
            s32_the_age_bound_counts_from_when_the_operation_was_first_made,
            s34_a_pass_reports_the_oldest_unknown_it_left
        );
    };
}

/// Runs a row on a fresh multi-threaded runtime.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(fut)
}

/// The error type of the suite's tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestError {
    /// The body failed so.
    Body(Failure),
    /// idemkit refused: key reuse.
    KeyReuse,
    /// idemkit refused: another call in flight.
    InFlight,
    /// idemkit refused: the store failed so.
    Store(StoreErrorKind),
    /// The call's lease was lost while it ran (S13).
    LeaseLost,
    /// Any other runtime error.
    Other(String),
}

impl Classify for TestError {
    fn classify(&self) -> Failure {
        match self {
            TestError::Body(f) => *f,
            _ => Failure::Permanent,
        }
    }
}

impl From<Error> for TestError {
    fn from(e: Error) -> Self {
        match e {
            Error::KeyReuse { .. } => TestError::KeyReuse,
            Error::InFlight { .. } => TestError::InFlight,
            Error::Store { source, .. } => TestError::Store(source.kind()),
            Error::LeaseLost { .. } => TestError::LeaseLost,
            other => TestError::Other(other.to_string()),
        }
    }
}

/// What the suite's tools return.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// Which run of the body made it.
    pub run: u32,
    /// The key the body saw.
    pub key: String,
}

// Long enough that a holder under a loaded CI machine still completes inside its lease (a
// takeover there would be a second body run, and a false failure of S7), short enough for S8.
const LEASE: Duration = Duration::from_millis(1000);

fn runtime(store: impl Store + OperationIds) -> Idem {
    Idem::builder()
        .store(store)
        .retry(
            RetryPolicy::default()
                .with_initial_delay(Duration::from_millis(2))
                .with_max_delay(Duration::from_millis(10))
                .with_max_elapsed(Duration::from_secs(5)),
        )
        .lease(LEASE)
        .build()
        .expect("the suite's settings are consistent")
}

/// A tool whose body counts its runs and fails as `script` says, then succeeds.
struct Counted {
    runs: Arc<AtomicU32>,
    keys: Arc<std::sync::Mutex<Vec<IdempotencyKey>>>,
}

impl Counted {
    fn new() -> Self {
        Counted {
            runs: Arc::default(),
            keys: Arc::default(),
        }
    }

    fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    /// Calls tool `charge` with key field `order` and argument `amount`; the body sleeps `hold`
    /// and fails with `script[n]` on its n-th run in this call.
    async fn call(
        &self,
        tool: Tool<'_>,
        order: u64,
        amount: u64,
        script: &[Failure],
        hold: Duration,
    ) -> (Result<Receipt, TestError>, CallOutcome) {
        let mut attempt = 0usize;
        let (result, info) = observe(tool.side_effect(&[("order", &order)], &amount, |key| {
            let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
            self.keys.lock().unwrap().push(key);
            let failure = script.get(attempt).copied();
            attempt += 1;
            async move {
                tokio::time::sleep(hold).await;
                match failure {
                    Some(f) => Err(TestError::Body(f)),
                    None => Ok(Receipt {
                        run: n,
                        key: key.to_string(),
                    }),
                }
            }
        }))
        .await;
        (
            result,
            info.expect("every call reports what happened").outcome,
        )
    }
}

fn charge(idem: &Idem) -> Tool<'_> {
    Tool::new("charge").idem(idem)
}

fn key_of(order: u64) -> IdempotencyKey {
    IdempotencyKey::derive("charge", &[("order", &order)])
}

fn fingerprint_of(amount: u64) -> Fingerprint {
    Fingerprint::of(&amount).unwrap()
}
