//! S19: what a tool's verify function answers.

/// What a tool's verify function found at the provider about an operation whose outcome is
/// unknown (S19): an attempt failed [`Failure::Ambiguous`](crate::Failure::Ambiguous) or was cut
/// off (cancelled, panicked, its lease lost, its process gone), and the provider cannot
/// deduplicate a re-send.
///
/// The verify function is asked before anything is sent again: when an attempt's outcome is
/// unknown, when a call meets a record kept as ambiguous, and when it takes over a running record
/// whose holder's lease ran out. It looks the operation up by what identifies it (the key it was
/// sent with, a message id derived from it, the order it was for).
///
/// ```
/// use idem_runtime::Verified;
///
/// // "Did the message with this key go out?" answered from the provider's log:
/// fn from_log(found: Option<&str>, log_reachable: bool) -> Verified<String> {
///     match (log_reachable, found) {
///         (true, Some(id)) => Verified::Applied(id.to_owned()), // it went out: that is the result
///         (true, None) => Verified::NotApplied,                 // it did not: safe to send
///         (false, _) => Verified::Unknown,                      // cannot tell: ask an operator
///     }
/// }
/// assert_eq!(from_log(Some("msg_1"), true), Verified::Applied("msg_1".to_owned()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Verified<T> {
    /// The effect happened, with this result: the record completes with it (repeats replay it)
    /// and the caller gets `Ok` of it.
    Applied(T),
    /// The effect did not happen, and cannot still happen: the unknown attempt counts as not
    /// having happened, and the call goes on under its retry policy (it may send again).
    ///
    /// Answer it only when no request of the operation can still land: a request still on the
    /// wire, or accepted but not yet committed, is not seen by a look-up, and a send after a
    /// `NotApplied` then makes two (the simulation counts such cases). Until the provider's own
    /// time-out for a request has passed, answer [`Verified::Unknown`].
    NotApplied,
    /// The provider cannot tell (yet): the record stays ambiguous and the caller gets
    /// [`Error::Ambiguous`](crate::Error::Ambiguous); a later call asks again, or an operator
    /// settles it (`idemkit resolve`). An error from the verify function counts the same.
    Unknown,
}
