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
use std::rc::Rc;
use std::str::FromStr;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use uuid::Uuid;

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
        let mut hasher = KeyHasher::new(tool, fields.len());
        for (name, value) in fields {
            hasher.field(name, value);
        }
        hasher.finish()
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

    /// Wraps a UUID read back from a store or a log. Keys are *derived*, never minted: there is
    /// deliberately no `random()` constructor.
    pub fn from_uuid(uuid: Uuid) -> Self {
        let mut text = [0u8; 36];
        uuid.hyphenated().encode_lower(&mut text);
        IdempotencyKey { uuid, text }
    }
}

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

/// One key field: its name and its value. The value is `Sync` so that a call's future stays
/// `Send` while the field list is borrowed.
pub type KeyField<'a> = (&'a str, &'a (dyn KeyPart + Sync));

/// Streams encoding v1 into SHA-256 without building the byte string first.
///
/// [`IdempotencyKey::derive`] is the usual way in; this is for callers that know their fields
/// only one at a time (generated code, key builders).
#[derive(Clone)]
pub struct KeyHasher {
    sha: Sha256,
    expected: usize,
    seen: usize,
}

impl KeyHasher {
    /// Starts the key of `tool`, which will have exactly `n_fields` fields.
    pub fn new(tool: &str, n_fields: usize) -> Self {
        let mut sha = Sha256::new();
        // Fixed-size pieces go in together: each update costs a copy and bookkeeping of its own.
        let mut head = [0u8; DOMAIN.len() + 4];
        head[..DOMAIN.len()].copy_from_slice(DOMAIN);
        head[DOMAIN.len()..].copy_from_slice(&be32(tool.len()).to_be_bytes());
        sha.update(head);
        sha.update(tool.as_bytes());
        sha.update(be32(n_fields).to_be_bytes());
        KeyHasher {
            sha,
            expected: n_fields,
            seen: 0,
        }
    }

    /// Adds the next key field.
    pub fn field(&mut self, name: &str, value: &(impl KeyPart + ?Sized)) -> &mut Self {
        self.seen += 1;
        put_len_prefixed(&mut self.sha, name.as_bytes());
        let mut int_buf = itoa::Buffer::new();
        let mut char_buf = [0u8; 4];
        let uuid_buf;
        let (tag, bytes): (u8, &[u8]) = match value.key_value() {
            KeyValue::Text(s) => (1, s.as_bytes()),
            KeyValue::Char(c) => (1, c.encode_utf8(&mut char_buf).as_bytes()),
            KeyValue::Int(i) => (2, int_buf.format(i).as_bytes()),
            KeyValue::UInt(u) => (2, int_buf.format(u).as_bytes()),
            KeyValue::Bool(b) => (3, if b { &[1] } else { &[0] }),
            KeyValue::Bytes(b) => (4, b),
            KeyValue::Uuid(u) => {
                uuid_buf = u.into_bytes();
                (5, &uuid_buf)
            }
        };
        let len = be32(bytes.len()).to_be_bytes();
        self.sha.update([tag, len[0], len[1], len[2], len[3]]);
        self.sha.update(bytes);
        self
    }

    /// Finishes the key.
    ///
    /// # Panics
    ///
    /// If the number of fields added differs from the number announced in [`KeyHasher::new`]:
    /// the count is part of the encoding, so such a key would be wrong, not merely different.
    pub fn finish(self) -> IdempotencyKey {
        assert_eq!(
            self.seen, self.expected,
            "idemkit: a key announced {} fields but was given {}",
            self.expected, self.seen
        );
        let digest = self.sha.finalize();
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest[..16]);
        IdempotencyKey::from_uuid(Uuid::new_v8(first))
    }
}

fn be32(n: usize) -> u32 {
    u32::try_from(n).expect("idemkit: a key component longer than 4 GiB")
}

fn put_len_prefixed(sha: &mut Sha256, bytes: &[u8]) {
    sha.update(be32(bytes.len()).to_be_bytes());
    sha.update(bytes);
}

/// The value of one key field, as encoding v1 sees it (the tag is implied by the variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyValue<'a> {
    /// Tag 1: UTF-8 text.
    Text(&'a str),
    /// Tag 1: one character, encoded as its UTF-8 text.
    Char(char),
    /// Tag 2: a signed integer, encoded as decimal ASCII.
    Int(i128),
    /// Tag 2: an unsigned integer, encoded as decimal ASCII.
    UInt(u128),
    /// Tag 3: one byte, 0 or 1.
    Bool(bool),
    /// Tag 4: raw bytes.
    Bytes(&'a [u8]),
    /// Tag 5: the 16 bytes of a UUID.
    Uuid(Uuid),
}

/// A value that may identify an operation: text, integers, bools, bytes and UUIDs.
///
/// References encode as their referent, so `&str`, `String`, `Cow<str>` and `Arc<str>` of the
/// same text give the same key. A newtype implements it by delegating:
///
/// ```
/// use idem_runtime::{KeyPart, KeyValue};
///
/// struct CustomerId(String);
///
/// impl KeyPart for CustomerId {
///     fn key_value(&self) -> KeyValue<'_> {
///         self.0.key_value()
///     }
/// }
/// ```
///
/// Floats, `Option`, maps and sets are deliberately not `KeyPart`: a float has no stable
/// identity, an absent value identifies nothing, and a map's order is not part of its value.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be part of an idempotency key",
    label = "not a key field type: `{Self}` does not implement `KeyPart`",
    note = "a key field must identify the operation exactly: use text, an integer, a bool, bytes or a UUID",
    note = "floats have no stable identity (key on integer cents or a string); `Option` identifies nothing when absent (key on the inner value or use a sentinel); maps and sets have no order (key on a sorted id)",
    note = "for your own newtype, implement `idemkit::KeyPart` by delegating to its inner value"
)]
pub trait KeyPart {
    /// This value as encoding v1 sees it.
    fn key_value(&self) -> KeyValue<'_>;
}

impl<T: KeyPart + ?Sized> KeyPart for &T {
    fn key_value(&self) -> KeyValue<'_> {
        (**self).key_value()
    }
}

impl<T: KeyPart + ?Sized> KeyPart for &mut T {
    fn key_value(&self) -> KeyValue<'_> {
        (**self).key_value()
    }
}

macro_rules! key_part_via_deref {
    ($($ty:ty),*) => {$(
        impl<T: KeyPart + ?Sized> KeyPart for $ty {
            fn key_value(&self) -> KeyValue<'_> {
                (**self).key_value()
            }
        }
    )*};
}
key_part_via_deref!(Box<T>, Arc<T>, Rc<T>);

impl KeyPart for str {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Text(self)
    }
}

impl KeyPart for String {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Text(self)
    }
}

impl KeyPart for Cow<'_, str> {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Text(self)
    }
}

impl KeyPart for char {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Char(*self)
    }
}

macro_rules! key_part_int {
    ($variant:ident as $wide:ty: $($ty:ty),*) => {$(
        impl KeyPart for $ty {
            fn key_value(&self) -> KeyValue<'_> {
                KeyValue::$variant(*self as $wide)
            }
        }
    )*};
}
key_part_int!(Int as i128: i8, i16, i32, i64, i128, isize);
key_part_int!(UInt as u128: u8, u16, u32, u64, u128, usize);

impl KeyPart for bool {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Bool(*self)
    }
}

impl KeyPart for [u8] {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Bytes(self)
    }
}

impl KeyPart for Vec<u8> {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Bytes(self)
    }
}

impl<const N: usize> KeyPart for [u8; N] {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Bytes(self)
    }
}

impl KeyPart for Uuid {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Uuid(*self)
    }
}

impl KeyPart for OperationId {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Uuid(self.0)
    }
}

impl KeyPart for IdempotencyKey {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Uuid(self.uuid)
    }
}

/// The identity of an operation that has no natural one: a UUID v4 minted once per name,
/// persisted in the store before it is first returned, and returned unchanged ever after
/// (also after a restart). Use it as a key field.
///
/// Get one with [`Idem::operation`](crate::Idem::operation).
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct OperationId(Uuid);

impl OperationId {
    /// Wraps a UUID read back from a store.
    pub fn from_uuid(uuid: Uuid) -> Self {
        OperationId(uuid)
    }

    /// The UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl fmt::Debug for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OperationId({})", self.0.hyphenated())
    }
}
