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

/// How the executor seals an outcome it serialized (S16, S9): after the JSON, a newline and a tab,
/// then 16 whitespace characters giving a 32-bit digest of the tool's output type name and of
/// the JSON, two bits each (` `, `\t`, `\r`, `\n` for 0–3, the digest's high bits first).
/// Whitespace after a JSON text is part of it (RFC 8259), so a sealed outcome is still the same
/// JSON to every reader (serde, `jq`, PostgreSQL's `::json`); serde_json's compact writer never
/// ends a text with whitespace. Part of the record format.
///
/// Why: a stored outcome that does not decode at replay is either one the executor wrote, intact,
/// whose type does not read back what it wrote (S16: not replayable, the operation ran), or one
/// that is not (damaged, an operator's of another shape, the tool's output type changed since:
/// S9, fail closed). Before, every outcome was decoded once as it was stored, so that the first
/// case was found at once: 849 instructions of a 6,024-instruction call outside SHA-256
/// (`benches/instructions.sh`, the calls bench's two-field receipt), more for a larger outcome.
/// The seal costs a hash of a few words (~130 instructions there, growing by one multiply per 8
/// bytes), and the decode happens only where it is needed anyway, at replay. A check once per
/// output type was not taken: a hand-written `Deserialize` may refuse some values only, so one
/// value reading back proves nothing of the next.
const SEAL: &[u8] = b"\n\t";

/// Characters of the digest after [`SEAL`].
const SEAL_DIGITS: usize = 16;

/// The digest's alphabet: whitespace only, two bits a character.
const SEAL_ALPHABET: [u8; 4] = [b' ', b'\t', b'\r', b'\n'];

/// A 32-bit digest of `type_name` and `json`, eight bytes a step (not a cryptographic hash: it
/// tells a sealed outcome that was changed, truncated or extended, or sealed for another type,
/// from an intact one, with 2^-32 odds of a miss).
fn seal_digest(type_name: &str, json: &[u8]) -> u32 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    #[inline(always)]
    fn mix(h: u64, w: u64) -> u64 {
        (h ^ w).wrapping_mul(K).rotate_left(29)
    }
    #[inline(always)]
    fn words(mut h: u64, bytes: &[u8]) -> u64 {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            h = mix(h, u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        // The last 0 to 7 bytes as a little-endian word, zero-padded (assembled in a register:
        // a copy into a padded array is a `memcpy` call of its own, a tenth of the seal's time).
        let last = chunks
            .remainder()
            .iter()
            .rev()
            .fold(0u64, |w, &b| w << 8 | u64::from(b));
        mix(mix(h, last), bytes.len() as u64)
    }
    let h = words(words(K, type_name.as_bytes()), json);
    let h = (h ^ (h >> 32)).wrapping_mul(K);
    (h >> 32) as u32
}

impl Outcome {
    /// Appends the seal of `json` (an outcome the executor just serialized as `type_name`) to
    /// `buf`, which holds it.
    #[inline]
    pub(crate) fn seal(buf: &mut Vec<u8>, type_name: &str) {
        let digest = seal_digest(type_name, buf);
        let mut tail = [0u8; SEAL.len() + SEAL_DIGITS];
        tail[..SEAL.len()].copy_from_slice(SEAL);
        for (i, c) in tail[SEAL.len()..].iter_mut().enumerate() {
            *c = SEAL_ALPHABET[(digest >> (30 - 2 * i)) as usize & 3];
        }
        buf.extend_from_slice(&tail);
    }

    /// Whether `outcome` is one the executor serialized as `type_name` and sealed, intact (after
    /// the JSON: a newline, a tab, then 16 characters among space, tab, CR and LF giving a
    /// 32-bit digest of `type_name` and the JSON, two bits each). Asked only of an outcome that did not decode, at replay: `true` says its type
    /// does not read back what it wrote (S16), `false` that the record is not as it was written,
    /// or was written for another type or by someone else (S9). Part of the record format.
    ///
    /// ```
    /// use idem_runtime::store::Outcome;
    ///
    /// assert!(!Outcome::sealed_for(br#"{"receipt":"r_1"}"#, "Receipt"));
    /// ```
    pub fn sealed_for(outcome: &[u8], type_name: &str) -> bool {
        let Some(split) = outcome.len().checked_sub(SEAL.len() + SEAL_DIGITS) else {
            return false;
        };
        let (json, tail) = outcome.split_at(split);
        if !tail.starts_with(SEAL) {
            return false;
        }
        let mut digest = 0u32;
        for c in &tail[SEAL.len()..] {
            let Some(bits) = SEAL_ALPHABET.iter().position(|a| a == c) else {
                return false;
            };
            digest = digest << 2 | bits as u32;
        }
        digest == seal_digest(type_name, json)
    }

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

    /// The digest over every length of a last partial word, against the digest as first
    /// written (the remainder copied into a zero-padded array): the seal is part of the format.
    #[test]
    fn the_seal_digest_is_the_same_for_every_tail_length() {
        fn reference(type_name: &str, json: &[u8]) -> u32 {
            const K: u64 = 0x9E37_79B9_7F4A_7C15;
            fn mix(h: u64, w: u64) -> u64 {
                (h ^ w).wrapping_mul(K).rotate_left(29)
            }
            fn words(mut h: u64, bytes: &[u8]) -> u64 {
                let mut chunks = bytes.chunks_exact(8);
                for c in &mut chunks {
                    h = mix(h, u64::from_le_bytes(c.try_into().unwrap()));
                }
                let rest = chunks.remainder();
                let mut last = [0u8; 8];
                last[..rest.len()].copy_from_slice(rest);
                mix(mix(h, u64::from_le_bytes(last)), bytes.len() as u64)
            }
            let h = words(words(K, type_name.as_bytes()), json);
            let h = (h ^ (h >> 32)).wrapping_mul(K);
            (h >> 32) as u32
        }
        let bytes: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        for n in 0..bytes.len() {
            for t in ["", "T", "app::Order", "alloc::vec::Vec<app::Order>"] {
                assert_eq!(
                    super::seal_digest(t, &bytes[..n]),
                    reference(t, &bytes[..n]),
                    "{t:?}, {n} bytes"
                );
            }
        }
    }

    /// The seal is part of the record format: these bytes are what this version writes for
    /// `{"id":1}` of type `app::Order`; a record written with them must keep telling S16 from S9.
    #[test]
    fn a_sealed_outcome_is_its_json_then_whitespace_and_tells_intact_from_damaged() {
        let mut buf = br#"{"id":1}"#.to_vec();
        Outcome::seal(&mut buf, "app::Order");
        assert_eq!(buf, b"{\"id\":1}\n\t\n\t\r \t\r \t\t \n\n\n \r\n");
        // Still the same JSON to a reader.
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v, serde_json::json!({"id": 1}));
        assert!(Outcome::sealed_for(&buf, "app::Order"));
        // Sealed for another type (the tool's output type changed since): not this one's.
        assert!(!Outcome::sealed_for(&buf, "app::Receipt"));
        // Damaged: a byte of the JSON changed, the record cut short or extended.
        let mut changed = buf.clone();
        changed[6] = b'2';
        assert!(!Outcome::sealed_for(&changed, "app::Order"));
        assert!(!Outcome::sealed_for(&buf[..buf.len() - 1], "app::Order"));
        assert!(!Outcome::sealed_for(
            &[&buf[..], b" "].concat(),
            "app::Order"
        ));
        // Not sealed at all: an operator's outcome, a record of an earlier version.
        assert!(!Outcome::sealed_for(br#"{"id":1}"#, "app::Order"));
        assert!(!Outcome::sealed_for(b"", "app::Order"));
    }
}
