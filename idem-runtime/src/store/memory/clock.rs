//! The memory store's clock: tokio's (so tests can pause and advance it), counted in 8-byte ticks
//! from the moment the store was made, and mapped to wall-clock time for operators.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// A moment on a store's clock: nanoseconds since the store was made (negative before it: a
/// store made outside a runtime whose clock is paused may be used on that clock). Eight bytes
/// where an `Instant` takes sixteen: a record holds four of them, and a smaller record is less
/// memory for each call to touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Tick(i64);

impl Tick {
    /// Never: the expiry of a record that never expires by time (a running or ambiguous one,
    /// S34), which only a decision ends.
    pub(super) const NEVER: Tick = Tick(i64::MAX);

    /// `d` later (saturating: a lease or ttl of `Duration::MAX` never ends).
    #[inline]
    pub(super) fn after(self, d: Duration) -> Tick {
        Tick(self.0.saturating_add(nanos(d)))
    }

    /// How long from `self` until `later` (zero if it has passed).
    pub(super) fn until(self, later: Tick) -> Duration {
        Duration::from_nanos(later.0.saturating_sub(self.0).max(0).unsigned_abs())
    }
}

/// The moment a store was made, on its clock (tokio's, which tests may pause) and on the wall
/// clock: records' times are reported as wall-clock times that move with the store's clock.
#[derive(Debug, Clone, Copy)]
pub(super) struct Origin {
    instant: Instant,
    wall: SystemTime,
}

impl Default for Origin {
    fn default() -> Self {
        Origin {
            instant: Instant::now(),
            wall: SystemTime::now(),
        }
    }
}

impl Origin {
    /// Now, on the store's clock.
    #[inline]
    pub(super) fn now(&self) -> Tick {
        self.at(Instant::now())
    }

    /// `at` (read from tokio's clock), on the store's clock.
    #[inline]
    pub(super) fn at(&self, now: Instant) -> Tick {
        match now.checked_duration_since(self.instant) {
            Some(since) => Tick(nanos(since)),
            None => Tick(-nanos(self.instant - now)),
        }
    }

    pub(super) fn wall(&self, at: Tick) -> SystemTime {
        let off = Duration::from_nanos(at.0.unsigned_abs());
        if at.0 >= 0 {
            self.wall + off
        } else {
            self.wall - off
        }
    }
}

/// `d` in nanoseconds, saturating (in 64-bit steps: `as_nanos` multiplies in 128 bits).
#[inline]
fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_secs())
        .ok()
        .and_then(|s| s.checked_mul(1_000_000_000))
        .and_then(|n| n.checked_add(i64::from(d.subsec_nanos())))
        .unwrap_or(i64::MAX)
}
