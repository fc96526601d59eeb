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

/// How an outcome that cannot be replayed is stored (S16): a completed record whose outcome
/// starts with a NUL byte, which no JSON text does, followed by why. Part of the record format.
const UNREPLAYABLE: &[u8] = b"\0idemkit:unreplayable\0";

impl Outcome {
    /// What the executor records in place of an outcome that cannot be replayed (S16): the
    /// marker, then why.
    pub(crate) fn unreplayable(why: &str) -> Outcome {
        let mut bytes = UNREPLAYABLE.to_vec();
        bytes.extend_from_slice(why.as_bytes());
        Outcome::from(bytes)
    }

    /// Why a stored outcome cannot be replayed, when it is what the executor records in place of
    /// one (S16: the operation ran, but its outcome did not serialize, read back, fit or get
    /// stored), as the bytes of its text; `None` for an outcome to replay. Part of the record
    /// format.
    ///
    /// ```
    /// use idem_runtime::store::Outcome;
    ///
    /// assert_eq!(Outcome::unreplayable_reason(br#"{"receipt":"r_1"}"#), None);
    /// ```
    pub fn unreplayable_reason(outcome: &[u8]) -> Option<&[u8]> {
        outcome.strip_prefix(UNREPLAYABLE)
    }

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

#[cfg(test)]
mod tests {
    use super::Outcome;

    /// The marker is part of the record format (S16): records written by earlier versions, and
    /// `idemkit show`, read these exact bytes.
    #[test]
    fn an_unreplayable_outcome_is_the_marker_then_why_and_reads_back() {
        let marker = Outcome::unreplayable("does not serialize");
        assert_eq!(marker, &b"\0idemkit:unreplayable\0does not serialize"[..]);
        assert_eq!(
            Outcome::unreplayable_reason(&marker),
            Some(&b"does not serialize"[..])
        );
        assert_eq!(Outcome::unreplayable_reason(b"{\"id\":1}"), None);
        assert_eq!(Outcome::unreplayable_reason(b"\0idemkit:other\0"), None);
    }
}
