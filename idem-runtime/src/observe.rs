//! What callers can learn about a call without changing the tool's signature.

use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::failure::Failure;
use crate::key::IdempotencyKey;

/// What happened in one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallInfo {
    /// The tool's name.
    pub tool: String,
    /// The key it ran with (`None` for read-only tools).
    pub key: Option<IdempotencyKey>,
    /// How many times the body ran in this call (0 for a replay or a refusal).
    pub attempts: u32,
    /// Whether the result is a stored outcome of an earlier call.
    pub replayed: bool,
    /// How the call ended.
    pub outcome: CallOutcome,
    /// The outcome of an earlier attempt was unknown and the tool's verify function found it
    /// applied: the result is what it found (S19).
    pub verified: bool,
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallOutcome {
    /// The body succeeded; for side effects, its outcome was recorded.
    Completed,
    /// The body succeeded but its outcome could not be recorded (the store failed, or the lease
    /// was taken over meanwhile): the next call with this key may run again, with the same key.
    Unrecorded,
    /// An earlier call's stored outcome was returned; the body did not run.
    Replayed,
    /// The body failed, and the last failure was this.
    Failed(Failure),
    /// idemkit did not run the body: key reuse, another call in flight, or a store failure.
    Refused,
    /// The lease was lost while the call ran (S13): the outcome is unknown.
    LeaseLost,
    /// An earlier call ran the operation, but its outcome cannot be replayed (S16); the body did
    /// not run.
    Unreplayable,
    /// An attempt's outcome was unknown, the tool's verify function found the effect applied,
    /// and what it found was recorded as the outcome (S19).
    Verified,
}

impl CallOutcome {
    /// A short lowercase word for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            CallOutcome::Completed => "completed",
            CallOutcome::Unrecorded => "unrecorded",
            CallOutcome::Replayed => "replayed",
            CallOutcome::Failed(Failure::Permanent) => "failed_permanent",
            CallOutcome::Failed(Failure::Transient) => "failed_transient",
            CallOutcome::Failed(Failure::Ambiguous) => "failed_ambiguous",
            CallOutcome::Failed(Failure::RetryAfter(_)) => "failed_retry_after",
            CallOutcome::Refused => "refused",
            CallOutcome::LeaseLost => "lease_lost",
            CallOutcome::Unreplayable => "unreplayable",
            CallOutcome::Verified => "verified",
        }
    }
}

tokio::task_local! {
    static OBSERVED: RefCell<Option<CallInfo>>;
}

/// Runs `fut` and returns its output with what happened in the last tool call that finished
/// inside it (for a tool calling other tools, that is the outer one).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_runtime::{observe, Classify, Failure, Idem, MemoryStore, Tool};
///
/// #[derive(Debug)]
/// struct E;
/// impl Classify for E { fn classify(&self) -> Failure { Failure::Permanent } }
/// impl From<idem_runtime::Error> for E { fn from(_: idem_runtime::Error) -> Self { E } }
///
/// let idem = Idem::new(MemoryStore::new());
/// let call = || Tool::new("charge").idem(&idem)
///     .side_effect(&[("order", &7u32)], &(), |_key| async { Ok::<_, E>(42) });
/// let (first, info) = observe(call()).await;
/// assert_eq!((first.unwrap(), info.unwrap().replayed), (42, false));
/// let (again, info) = observe(call()).await;
/// assert_eq!((again.unwrap(), info.unwrap().replayed), (42, true));
/// # });
/// ```
pub async fn observe<F: Future>(fut: F) -> (F::Output, Option<CallInfo>) {
    /// Open while its `observe` runs (dropped with it, however it ends).
    struct Open;
    impl Drop for Open {
        fn drop(&mut self) {
            OPEN.fetch_sub(1, Ordering::Relaxed);
        }
    }
    OPEN.fetch_add(1, Ordering::Relaxed);
    let _open = Open;
    OBSERVED
        .scope(RefCell::new(None), async move {
            let out = fut.await;
            (out, OBSERVED.with(|slot| slot.borrow_mut().take()))
        })
        .await
}

/// How many [`observe`] scopes are open in the process. A call's end looks for the enclosing one
/// only when some are: most programs never observe, and the look-up (a task-local) was ~22 of a
/// read-only call's ~390 instructions (issue 20). A call inside a scope always sees it counted:
/// the count went up before the scope's future first ran, in the same task.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// Hands what happened to the enclosing [`observe`], if any; `info` is only made when one is
/// listening (it allocates).
pub(crate) fn report(info: impl FnOnce() -> CallInfo) {
    if OPEN.load(Ordering::Relaxed) == 0 {
        return;
    }
    let _ = OBSERVED.try_with(|slot| *slot.borrow_mut() = Some(info()));
}
