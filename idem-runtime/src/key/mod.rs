//! Idempotency keys: encoding v1 (a contract), [`KeyPart`], [`OperationId`].
//!
//! A key is a UUID (RFC 9562 version 8) made from the first 16 bytes of
//!
//! ```text
//! SHA-256( "idemkit:v1" 0x00
//!          u32be(len(tool)) tool
//!          u32be(n_fields)
//!          for each field: u32be(len(name)) name  tag:u8  u32be(len(value)) value )
//! ```
//!
//! Changing a single byte of this changes every key in flight, and a replay after an upgrade
//! would then act twice: the golden vectors in the tests pin it.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

mod hasher;
mod json;
pub mod normalize;
mod operation;
mod part;
#[cfg(test)]
mod tests;

pub use self::hasher::KeyHasher;
pub use self::json::JsonKeyField;
pub use self::operation::OperationId;
pub use self::part::{KeyField, KeyPart, KeyValue};

const DOMAIN: &[u8] = b"idemkit:v1\0";

/// The idempotency key of one logical operation.
///
/// Derived once, before the first attempt, from the tool's name and its key fields; reused
/// unchanged by every retry and after a crash and replay. It is a UUID (version 8), so it fits
/// any API that wants a UUID, and displays as 36 lowercase characters.
///
/// ```
/// use idem_runtime::IdempotencyKey;
///
/// let key = IdempotencyKey::derive(
///     "charge",
///     &[("customer_id", &"cus_1"), ("purpose", &"subscription"), ("period", &"2026-11")],
/// );
/// assert_eq!(key.as_str(), "32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey {
    uuid: Uuid,
    text: [u8; 36],
}

impl IdempotencyKey {
    /// Derives the key of `tool` from its key fields, in the order written.
    ///
    /// `fields` pairs each field's name (the last segment of its path: `args.customer_id` →
    /// `"customer_id"`) with its value.
    pub fn derive(tool: &str, fields: &[KeyField<'_>]) -> Self {
        // Not `KeyHasher::new` and `finish`: each moves the hasher (some 250 bytes, just written
        // a few at a time, which a copy right after waits for), where this works on it in place.
        let mut hasher = KeyHasher::empty(fields.len());
        hasher.start(tool);
        for (name, value) in fields {
            hasher.field(name, value);
        }
        hasher.key()
    }

    /// The key as a UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.uuid
    }

    /// The key as 36 lowercase hyphenated characters, e.g. for an `Idempotency-Key` header.
    pub fn as_str(&self) -> &str {
        // The buffer holds the ASCII of `Uuid::hyphenated`, written once in `from_uuid`.
        std::str::from_utf8(&self.text).expect("a hyphenated UUID is ASCII")
    }

    /// The key's 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.uuid.as_bytes()
    }

    /// This key under `tenant` (an account, an authenticated principal): a documented extension
    /// of encoding v1, so that equal key fields of two tenants are two operations. The key is
    /// derived from this one, so an unscoped key (v1) never changes:
    ///
    /// ```text
    /// SHA-256( "idemkit:tenant:v1" 0x00  u32be(len(tenant)) tenant  key's 16 bytes )
    /// ```
    ///
    /// taken as a UUID version 8 like v1's. `charge`'s golden key under tenant `acme` is
    /// `key.for_tenant("acme")`:
    ///
    /// ```
    /// use idem_runtime::IdempotencyKey;
    ///
    /// let key = IdempotencyKey::derive(
    ///     "charge",
    ///     &[("customer_id", &"cus_1"), ("purpose", &"subscription"), ("period", &"2026-11")],
    /// );
    /// assert_eq!(key.for_tenant("acme").as_str(), "6a1557d2-fe2a-83ea-9696-a86f7991dfbf");
    /// assert_ne!(key.for_tenant("acme"), key.for_tenant("globex"));
    /// ```
    pub fn for_tenant(&self, tenant: &str) -> IdempotencyKey {
        use sha2::{Digest, Sha256};
        let len = u32::try_from(tenant.len()).expect("idemkit: a tenant longer than 4 GiB");
        let digest = Sha256::new()
            .chain_update(b"idemkit:tenant:v1\0")
            .chain_update(len.to_be_bytes())
            .chain_update(tenant.as_bytes())
            .chain_update(self.as_bytes())
            .finalize();
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest[..16]);
        IdempotencyKey::from_uuid(Uuid::new_v8(first))
    }

    /// Wraps a UUID read back from a store or a log. Keys are *derived*, never minted: there is
    /// deliberately no `random()` constructor.
    pub fn from_uuid(uuid: Uuid) -> Self {
        IdempotencyKey {
            uuid,
            text: hyphenated(uuid.as_bytes()),
        }
    }

    /// The nil key, what a read's attempts are handed: made at compile time.
    pub(crate) const NIL: IdempotencyKey = IdempotencyKey {
        uuid: Uuid::nil(),
        text: *b"00000000-0000-0000-0000-000000000000",
    };
}

/// The 36 characters of `Uuid::hyphenated` in lowercase: `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
///
/// Every derived key pays for its text right after its hash, so the digits come eight at a time
/// from a table of digit pairs instead of a nibble at a time.
fn hyphenated(bytes: &[u8; 16]) -> [u8; 36] {
    let hex8 = |i: usize| {
        let pair = |j: usize| u64::from(HEX_PAIRS[usize::from(bytes[i + j])]);
        (pair(0) | pair(1) << 16 | pair(2) << 32 | pair(3) << 48).to_le_bytes()
    };
    let (a, b, c, d) = (hex8(0), hex8(4), hex8(8), hex8(12));
    let mut text = [b'-'; 36];
    text[0..8].copy_from_slice(&a);
    text[9..13].copy_from_slice(&b[..4]);
    text[14..18].copy_from_slice(&b[4..]);
    text[19..23].copy_from_slice(&c[..4]);
    text[24..28].copy_from_slice(&c[4..]);
    text[28..36].copy_from_slice(&d);
    text
}

/// The two lowercase hex digits of each byte value, in a little-endian `u16`: the first digit is
/// the low byte.
const HEX_PAIRS: [u16; 256] = {
    let digits = b"0123456789abcdef";
    let mut pairs = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        pairs[i] = digits[i >> 4] as u16 | (digits[i & 15] as u16) << 8;
        i += 1;
    }
    pairs
};

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({})", self.as_str())
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl FromStr for IdempotencyKey {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(Self::from_uuid)
    }
}

impl serde::Serialize for IdempotencyKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for IdempotencyKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Cow::<'de, str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
