//! How a JSON tool's error is described to a model: through `Display`, its chain of sources, or
//! `Debug`, picked by autoref specialization (`Describe`).

use super::entry::EXPLAINING;
use crate::explain::Explanation;
use crate::observe::CallOutcome;
use crate::retry::Failure;
use std::error::Error as StdError;
use std::fmt;

/// The error as text: its `Display` when it has one, else its `Debug`; an error that is a
/// `std::error::Error` is also explained by idemkit's own error in its chain (autoref
/// specialisation, resolved where the error type is concrete: `(&&Describe(err)).describe()`).
#[doc(hidden)]
pub struct Describe<'a, E>(pub &'a E);

#[doc(hidden)]
pub trait DescribeDisplay {
    fn describe(&self) -> String;
}

impl<E: StdError + 'static> DescribeDisplay for &Describe<'_, E> {
    fn describe(&self) -> String {
        describe_error(self.0)
    }
}

/// The text of an error seen as a `std::error::Error`, explained by idemkit's own error in its
/// chain when [`explaining`] asks.
pub(super) fn describe_error(error: &(dyn StdError + 'static)) -> String {
    EXPLAINING.with(|slot| {
        if let Some(explaining) = slot.borrow_mut().as_mut() {
            let failure = match explaining.info.as_ref().map(|i| i.outcome) {
                Some(CallOutcome::Failed(failure)) => failure,
                _ => Failure::Permanent,
            };
            explaining.told = Some(Explanation::of(
                error,
                failure,
                explaining.kind,
                explaining.info.as_ref(),
                explaining.key_fields,
            ));
        }
    });
    error.to_string()
}

/// `anyhow::Error` and `Box<dyn Error + Send + Sync>`, not `std::error::Error`s themselves: seen
/// through what they hold, so idemkit's own error in their chain explains them too.
#[doc(hidden)]
pub trait DescribeChain {
    fn describe(&self) -> String;
}

impl DescribeChain for &Describe<'_, Box<dyn StdError + Send + Sync>> {
    fn describe(&self) -> String {
        describe_error(&**self.0)
    }
}

#[cfg(feature = "anyhow")]
impl DescribeChain for &Describe<'_, anyhow::Error> {
    fn describe(&self) -> String {
        describe_error(self.0.as_ref())
    }
}

impl<E: fmt::Display> DescribeDisplay for &&Describe<'_, E> {
    fn describe(&self) -> String {
        self.0.to_string()
    }
}

#[doc(hidden)]
pub trait DescribeDebug {
    fn describe(&self) -> String;
}

impl<E: fmt::Debug> DescribeDebug for Describe<'_, E> {
    fn describe(&self) -> String {
        format!("{:?}", self.0)
    }
}
