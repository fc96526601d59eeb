//! S19: a verification's answers, each a transition of the [`Call`] that asked it: applied (the
//! record completes), not applied (the call goes on under its retry policy), unknown (the record
//! stays ambiguous), and what each is counted and logged as.

use std::borrow::Cow;

use super::end::Run;
use super::{Between, Call, Ended, Phase};
use crate::failure::Failure;

impl<'a> Call<'a> {
    /// Whether the step handed out last is a verification (S19).
    pub(crate) fn verifying(&self) -> bool {
        matches!(self.phase, Phase::Running(_, Between::Verifying(_)))
    }

    /// The verification found the effect applied, with `value` (S19): the record completes
    /// with it.
    pub(crate) fn verified_applied<T: serde::Serialize>(&mut self, value: &T) {
        let ended = self.outcome_of(value);
        let run = self.verification_answered("applied");
        run.call.verified = true;
        run.ambiguous = false;
        self.end_run(ended);
    }

    /// The verification found the effect not applied (S19): the unknown attempt counts as not
    /// having happened, and the call goes on under its retry policy.
    pub(crate) fn verified_not_applied(&mut self) {
        let after = match &self.phase {
            Phase::Running(_, Between::Verifying(after)) => *after,
            _ => unreachable!("idemkit: a verification ended that the call did not start"),
        };
        let run = self.verification_answered("not_applied");
        run.ambiguous = false;
        let Some(_failed) = after else {
            // Met at the claim: nothing of this call ran yet.
            self.set_between(Between::Ready);
            return;
        };
        match run.next_delay(Failure::Transient) {
            Some(delay) => self.set_between(Between::Backoff(Box::pin(tokio::time::sleep(delay)))),
            None => self.end_run(Ended::Failed(Failure::Transient)),
        }
    }

    /// The verification could not tell (`None`), or failed with this error (S19): the record
    /// stays ambiguous, and why is kept with it (its note, which `idemkit show` prints) and in
    /// the call's span.
    pub(crate) fn verified_unknown(&mut self, failed: Option<String>) {
        let why = match failed {
            Some(error) => {
                self.verification_failed(&error);
                Cow::Owned(format!("the verify function failed: {error}"))
            }
            None => {
                self.verification_answered("unknown");
                Cow::Borrowed("the verify function could not tell")
            }
        };
        self.end_run(Ended::Unsettled(why, true));
    }

    /// Counts and logs a verification's answer.
    fn verification_answered(&mut self, answer: &'static str) -> &mut Run<'a> {
        let run = self.verifying_run();
        crate::meters::verified(&run.call.tool, answer);
        run.call.span.in_scope(|| {
            tracing::info!(answer, "the tool's verify function answered");
        });
        run
    }

    /// Counts and logs a verification that failed, with its error.
    fn verification_failed(&mut self, error: &str) {
        let run = self.verifying_run();
        crate::meters::verified(&run.call.tool, "error");
        run.call.span.in_scope(|| {
            tracing::warn!(answer = "error", error, "the tool's verify function failed");
        });
    }

    fn verifying_run(&mut self) -> &mut Run<'a> {
        let Phase::Running(run, Between::Verifying(_)) = &mut self.phase else {
            unreachable!("idemkit: a verification ended that the call did not start")
        };
        run
    }
}
