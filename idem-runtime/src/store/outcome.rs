//! [`Outcome`]: a completed operation's stored bytes, owned and cheap to keep and to hand back.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// The bytes of a completed operation's outcome, as the executor serialized them (JSON, or a
/// marker that it cannot be replayed). A store keeps them as they are and hands them back, byte
/// for byte, to a later claim with the same fingerprint.
///
/// Owned and reference-counted (the count and the bytes in one allocation): a store that keeps
/// outcomes in memory keeps this value (no copy), and cloning it to answer a claim copies no
/// bytes. A store that writes them elsewhere reads them as a slice (`&outcome[..]`,
/// [`Outcome::as_bytes`]).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Outcome(Arc<[u8]>);

impl Outcome {
    /// The bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes, as a vector (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        self.0.to_vec()
    }
}

impl Deref for Outcome {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Outcome {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for Outcome {
    fn from(bytes: Vec<u8>) -> Self {
        Outcome(bytes.into())
    }
}

impl From<&[u8]> for Outcome {
    #[inline]
    fn from(bytes: &[u8]) -> Self {
        Outcome(bytes.into())
    }
}

impl<const N: usize> From<&[u8; N]> for Outcome {
    fn from(bytes: &[u8; N]) -> Self {
        Outcome(bytes[..].into())
    }
}

impl PartialEq<[u8]> for Outcome {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_bytes() == other
    }
}

impl PartialEq<&[u8]> for Outcome {
    fn eq(&self, other: &&[u8]) -> bool {
        self.as_bytes() == *other
    }
}

impl PartialEq<Vec<u8>> for Outcome {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_bytes() == other.as_slice()
    }
}

impl fmt::Debug for Outcome {
    /// Shows the bytes as ASCII text (JSON usually is), other bytes escaped (`\xNN`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Outcome(\"{}\")", self.0.escape_ascii())
    }
}
