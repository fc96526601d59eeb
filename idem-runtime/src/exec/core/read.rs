//! A read-only call: no key, no store, no claim; its attempts retried by failure kind, its span
//! and its end.
//!
//! Apart from [`Call`], whose phases carry a claim, a lease and an end to write: a read's state
//! is a few words, so a step of it moves nothing large. What only a retry needs (the runtime's
//! policy, the schedule, the timer) is made at the first failure; a read that answers at once,
//! most of them, never looks the runtime up.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tracing::field::Empty;

use super::trace::finish_read;
use crate::exec::Tool;
use crate::failure::Failure;
use crate::idem::Idem;
use crate::key::IdempotencyKey;
use crate::observe::CallOutcome;
use crate::retry::{RetryPolicy, Schedule};

/// The protocol of one read, driven by a loop in the caller like [`Call`]'s:
///
/// ```text
/// while read.next_attempt().await.is_some() {
///     let result = body().await;
///     read.read() / read.failed(err.classify());
/// }
/// ```
///
/// Not a stable API: what [`super::typed::ReadCall`] wraps.
#[doc(hidden)]
pub struct Read<'a> {
    /// What the read needs of its [`Tool`]: its name, and what makes its retry policy (not the
    /// whole `Tool`, whose side-effect settings would make every read's state twice as large).
    name: &'a str,
    idem: Option<&'a Idem>,
    retry: Option<RetryPolicy>,
    max_attempts: Option<u32>,
    step: Step,
    attempts: u32,
    /// `none` until the first poll, which opens it (inside the caller's task, like a side
    /// effect's); closed at the end.
    span: tracing::Span,
    /// When the first attempt could start: retries are bounded by the time since.
    started: Option<Instant>,
    /// Made at the first failure (boxed: most reads never need one).
    schedule: Option<Box<Schedule>>,
}

impl std::fmt::Debug for Read<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Read").finish_non_exhaustive()
    }
}

/// Where a read is.
enum Step {
    /// Not yet polled.
    Unpolled,
    /// The caller is running an attempt.
    Attempting,
    /// Waiting before the next attempt.
    Backoff(Pin<Box<Sleep>>),
    /// Over: the last attempt's result stands.
    Over,
}

impl<'a> Read<'a> {
    pub(crate) fn new(tool: Tool<'a>) -> Self {
        Read {
            name: tool.name,
            idem: tool.idem,
            retry: tool.retry,
            max_attempts: tool.max_attempts,
            step: Step::Unpolled,
            attempts: 0,
            span: tracing::Span::none(),
            started: None,
            schedule: None,
        }
    }

    /// Whether to run another attempt (`Some`, with the nil key), or `None` when it is over.
    pub(crate) fn next_attempt(&mut self) -> ReadNext<'_, 'a> {
        ReadNext { read: self }
    }

    /// Whether the read is over (its last attempt's result stands).
    pub(crate) fn is_over(&self) -> bool {
        matches!(self.step, Step::Over)
    }

    /// The attempt succeeded.
    pub(crate) fn read(&mut self) {
        self.attempted();
        self.finish(CallOutcome::Completed);
    }

    /// The attempt failed, classified as `failure`: retried after a wait, or the read is over.
    pub(crate) fn failed(&mut self, failure: Failure) {
        self.attempted();
        match self.next_delay(failure) {
            Some(delay) => self.step = Step::Backoff(Box::pin(tokio::time::sleep(delay))),
            None => self.finish(CallOutcome::Failed(failure)),
        }
    }

    fn attempted(&self) {
        if !matches!(self.step, Step::Attempting) {
            unreachable!("idemkit: an attempt ended that the call did not start")
        }
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<IdempotencyKey>> {
        match &mut self.step {
            Step::Unpolled => {
                self.span = tracing::info_span!(
                    "idemkit.read_only",
                    tool = self.name,
                    attempts = Empty,
                    outcome = Empty,
                    otel.status_code = Empty,
                    otel.status_description = Empty,
                );
                self.started = Some(Instant::now());
            }
            Step::Backoff(sleep) => std::task::ready!(sleep.as_mut().poll(cx)),
            Step::Over => return Poll::Ready(None),
            Step::Attempting => {
                unreachable!("idemkit: a call was asked for its next attempt while one was running")
            }
        }
        self.attempts += 1;
        self.step = Step::Attempting;
        Poll::Ready(Some(IdempotencyKey::NIL))
    }

    /// The wait before the next attempt, or `None` to give up.
    fn next_delay(&mut self, failure: Failure) -> Option<Duration> {
        let tool = Tool {
            idem: self.idem,
            retry: self.retry,
            max_attempts: self.max_attempts,
            ..Tool::new(self.name)
        };
        let schedule = self.schedule.get_or_insert_with(|| {
            // A read needs no store: never open the default one just for its retry policy.
            let base = match tool.idem {
                Some(idem) => idem.retry_policy(),
                None => {
                    Idem::configured().map_or_else(RetryPolicy::default, |idem| idem.retry_policy())
                }
            };
            Box::new(tool.policy(base).schedule())
        });
        let elapsed = self
            .started
            .map_or(Duration::ZERO, |started| started.elapsed());
        let delay = schedule.next_delay(failure, elapsed)?;
        let attempt = self.attempts;
        let _span = self.span.enter();
        tracing::debug!(attempt, ?failure, ?delay, "read failed; retrying");
        Some(delay)
    }

    /// Over: the span gets its fields and closes; an enclosing `observe` learns of it.
    fn finish(&mut self, outcome: CallOutcome) {
        self.step = Step::Over;
        let span = std::mem::replace(&mut self.span, tracing::Span::none());
        finish_read(
            self.name,
            &span,
            crate::meters::recording(),
            self.attempts,
            outcome,
        );
    }
}

/// The future of [`Read::next_attempt`].
#[doc(hidden)]
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct ReadNext<'c, 'a> {
    read: &'c mut Read<'a>,
}

impl Future for ReadNext<'_, '_> {
    type Output = Option<IdempotencyKey>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.read.poll_next(cx)
    }
}
