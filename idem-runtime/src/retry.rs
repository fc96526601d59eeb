//! Which failures to retry, and how long to wait between attempts.

use std::time::Duration;

use backon::BackoffBuilder;

use crate::failure::Failure;

/// How often and how patiently to retry: exponential backoff with full jitter and a cap,
/// bounded by attempts and by total time.
///
/// The defaults suit an interactive agent: 4 attempts, 100 ms doubling to at most 2 s between
/// them, 10 s in all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    max_attempts: u32,
    initial_delay: Duration,
    factor: f32,
    max_delay: Duration,
    max_elapsed: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            initial_delay: Duration::from_millis(100),
            factor: 2.0,
            max_delay: Duration::from_secs(2),
            max_elapsed: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn no_retry() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// Attempts in all, the first included (at least 1).
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The delay ceiling before the first retry.
    pub fn initial_delay(&self) -> Duration {
        self.initial_delay
    }

    /// Each ceiling is the previous one times this factor (at least 1).
    pub fn factor(&self) -> f32 {
        self.factor
    }

    /// No ceiling grows past this.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// No retry starts after this much time since the first attempt; a `RetryAfter` that would
    /// end past it is not waited for.
    pub fn max_elapsed(&self) -> Duration {
        self.max_elapsed
    }

    /// The same policy whose ceilings grow by `factor` (at least 1: a smaller one is taken as
    /// 1, constant ceilings; a NaN as the default 2).
    pub fn with_factor(mut self, factor: f32) -> Self {
        self.factor = if factor.is_nan() {
            2.0
        } else {
            factor.max(1.0)
        };
        self
    }

    /// The same policy with `n` attempts in all.
    pub fn with_max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// The same policy with another first delay ceiling.
    pub fn with_initial_delay(mut self, d: Duration) -> Self {
        self.initial_delay = d;
        self
    }

    /// The same policy with another cap on each delay.
    pub fn with_max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// The same policy with another bound on total time.
    pub fn with_max_elapsed(mut self, d: Duration) -> Self {
        self.max_elapsed = d;
        self
    }

    /// The schedule of waits for one call.
    pub fn schedule(&self) -> Schedule {
        // backon gives the capped exponential ceilings and the attempt bound; its own jitter
        // adds up to one more delay on top (delay..2*delay), which is not full jitter and can
        // exceed the cap, so the wait is drawn uniformly below the ceiling here instead.
        let ceilings = backon::ExponentialBuilder::default()
            .with_min_delay(self.initial_delay)
            .with_factor(self.factor)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
            .build();
        Schedule {
            ceilings,
            rng: fastrand::Rng::new(),
            max_elapsed: self.max_elapsed,
        }
    }
}

/// The waits of one call: what [`RetryPolicy::schedule`] returns.
#[derive(Debug)]
pub struct Schedule {
    ceilings: backon::ExponentialBackoff,
    rng: fastrand::Rng,
    max_elapsed: Duration,
}

impl Schedule {
    /// How long to wait before the next attempt, given what the last one's failure was and how
    /// long the call has taken so far; `None` when the call should give up.
    pub fn next_delay(&mut self, failure: Failure, elapsed: Duration) -> Option<Duration> {
        // An attempt is spent whatever the failure, so the attempt bound holds for RetryAfter too.
        let ceiling = self.ceilings.next()?;
        let delay = match failure {
            Failure::Permanent => return None,
            Failure::RetryAfter(d) => d,
            Failure::Transient | Failure::Ambiguous => ceiling.mul_f64(self.rng.f64()),
        };
        (elapsed.saturating_add(delay) <= self.max_elapsed).then_some(delay)
    }
}
