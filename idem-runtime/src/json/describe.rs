//! How a JSON tool's error is described to a model: through `Display`, its chain of sources, or
//! `Debug`, picked by autoref specialization (`Describe`).

use std::error::Error as StdError;
use std::fmt;

/// The error as text: its `Display` when it has one, else its `Debug`; an error that is a
/// `std::error::Error` is also handed back as one, so that it is explained by idemkit's own error
/// in its chain (autoref specialisation, resolved where the error type is concrete:
/// `(&&Describe(err)).describe()`).
#[doc(hidden)]
pub struct Describe<'a, E>(pub &'a E);

/// A tool's error described: its text, and the error as a `std::error::Error` where it is one
/// (searched for idemkit's own error by the explanation of the failure).
#[doc(hidden)]
pub struct Described<'a> {
    pub(super) text: String,
    pub(super) error: Option<&'a (dyn StdError + 'static)>,
}

impl<'a> Described<'a> {
    /// An error seen as a `std::error::Error`: its `Display`, and itself.
    fn error(error: &'a (dyn StdError + 'static)) -> Self {
        Described {
            text: error.to_string(),
            error: Some(error),
        }
    }

    /// An error that is no `std::error::Error`: its text alone.
    fn text(text: String) -> Self {
        Described { text, error: None }
    }
}

#[doc(hidden)]
pub trait DescribeDisplay<'a> {
    fn describe(&self) -> Described<'a>;
}

impl<'a, E: StdError + 'static> DescribeDisplay<'a> for &Describe<'a, E> {
    fn describe(&self) -> Described<'a> {
        Described::error(self.0)
    }
}

/// `anyhow::Error` and `Box<dyn Error + Send + Sync>`, not `std::error::Error`s themselves: seen
/// through what they hold, so idemkit's own error in their chain explains them too.
#[doc(hidden)]
pub trait DescribeChain<'a> {
    fn describe(&self) -> Described<'a>;
}

impl<'a> DescribeChain<'a> for &Describe<'a, Box<dyn StdError + Send + Sync>> {
    fn describe(&self) -> Described<'a> {
        Described::error(&**self.0)
    }
}

#[cfg(feature = "anyhow")]
impl<'a> DescribeChain<'a> for &Describe<'a, anyhow::Error> {
    fn describe(&self) -> Described<'a> {
        Described::error(self.0.as_ref())
    }
}

impl<'a, E: fmt::Display> DescribeDisplay<'a> for &&Describe<'a, E> {
    fn describe(&self) -> Described<'a> {
        Described::text(self.0.to_string())
    }
}

#[doc(hidden)]
pub trait DescribeDebug<'a> {
    fn describe(&self) -> Described<'a>;
}

impl<'a, E: fmt::Debug> DescribeDebug<'a> for Describe<'a, E> {
    fn describe(&self) -> Described<'a> {
        Described::text(format!("{:?}", self.0))
    }
}
