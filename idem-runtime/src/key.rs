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

use sha2::digest::generic_array::GenericArray;
use sha2::digest::typenum::U64;
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

    /// Wraps a UUID read back from a store or a log. Keys are *derived*, never minted: there is
    /// deliberately no `random()` constructor.
    pub fn from_uuid(uuid: Uuid) -> Self {
        IdempotencyKey {
            uuid,
            text: hyphenated(uuid.as_bytes()),
        }
    }
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

/// One key field: its name and its value. The value is `Sync` so that a call's future stays
/// `Send` while the field list is borrowed.
pub type KeyField<'a> = (&'a str, &'a (dyn KeyPart + Sync));

/// The SHA-256 block: the compression function takes 64 bytes at a time.
const BLOCK: usize = 64;

/// Encoding v1 gathered before it is hashed: two blocks, enough for the head and three typical
/// fields (the benchmark's three come to 100 bytes). A longer key is hashed a full buffer at a
/// time. The buffer has one more block after these, for SHA-256's padding.
const BUF: usize = 2 * BLOCK;

/// SHA-256's initial hash value (FIPS 180-4, 5.3.3).
const SHA256_IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// Streams encoding v1 into SHA-256 without building the byte string on the heap.
///
/// [`IdempotencyKey::derive`] is the usual way in; this is for callers that know their fields
/// only one at a time (generated code, key builders).
///
/// A key is a hundred bytes or so of small pieces (lengths, names, tags, values); given to
/// `Sha256::update` one at a time, they cost more in bookkeeping than in hashing. So each field
/// is written at once into a buffer on the stack, and SHA-256's compression function
/// ([`sha2::compress256`]) runs over the buffer where it lies, once it is full and in
/// [`finish`](KeyHasher::finish), which pads the last block as SHA-256 does (FIPS 180-4,
/// 5.1.1). The key is exactly as before, the first 16 bytes of `Sha256::digest` of encoding v1:
/// the tests compare the two across the block and buffer boundaries.
#[derive(Clone)]
pub struct KeyHasher {
    /// SHA-256's state after the blocks hashed so far.
    state: [u32; 8],
    /// How many blocks are hashed: all of the encoding before `buf`.
    blocks: u64,
    /// `buf[..len]` is the encoding not yet hashed; the rest of `buf` is zero, as the padding
    /// needs it.
    buf: [u8; BUF + BLOCK],
    len: usize,
    expected: usize,
    seen: usize,
}

impl KeyHasher {
    /// Starts the key of `tool`, which will have exactly `n_fields` fields.
    #[inline]
    pub fn new(tool: &str, n_fields: usize) -> Self {
        let mut hasher = KeyHasher::empty(n_fields);
        hasher.start(tool);
        hasher
    }

    /// A hasher with nothing written, not even the head.
    #[inline]
    fn empty(n_fields: usize) -> Self {
        KeyHasher {
            state: SHA256_IV,
            blocks: 0,
            buf: [0; BUF + BLOCK],
            len: 0,
            expected: n_fields,
            seen: 0,
        }
    }

    /// Writes the head: the domain, the tool's name and the number of fields.
    #[inline]
    fn start(&mut self, tool: &str) {
        let tool = tool.as_bytes();
        let tool_len = be32(tool.len()).to_be_bytes();
        let n_fields = be32(self.expected).to_be_bytes();
        let end = DOMAIN.len() + 4 + tool.len() + 4;
        if end <= BUF {
            let (domain, rest) = self.buf[..end].split_at_mut(DOMAIN.len());
            domain.copy_from_slice(DOMAIN);
            rest[..4].copy_from_slice(&tool_len);
            copy_short(&mut rest[4..4 + tool.len()], tool);
            rest[4 + tool.len()..].copy_from_slice(&n_fields);
            self.len = end;
        } else {
            self.put(DOMAIN);
            self.put(&tool_len);
            self.put(tool);
            self.put(&n_fields);
        }
    }

    /// Adds the next key field.
    #[inline]
    pub fn field(&mut self, name: &str, value: &(impl KeyPart + ?Sized)) -> &mut Self {
        self.seen += 1;
        let mut int_buf = itoa::Buffer::new();
        let mut char_buf = [0u8; 4];
        let uuid_buf;
        let (tag, bytes): (u8, &[u8]) = match value.key_value() {
            KeyValue::Text(s) => (1, s.as_bytes()),
            KeyValue::Char(c) => (1, c.encode_utf8(&mut char_buf).as_bytes()),
            // Most integers fit 64 bits, whose digits come cheaper than 128 bits' (and are the
            // same digits).
            KeyValue::Int(i) => match i64::try_from(i) {
                Ok(i) => (2, int_buf.format(i).as_bytes()),
                Err(_) => (2, int_buf.format(i).as_bytes()),
            },
            KeyValue::UInt(u) => match u64::try_from(u) {
                Ok(u) => (2, int_buf.format(u).as_bytes()),
                Err(_) => (2, int_buf.format(u).as_bytes()),
            },
            KeyValue::Bool(b) => (3, if b { &[1] } else { &[0] }),
            KeyValue::Bytes(b) => (4, b),
            KeyValue::Uuid(u) => {
                uuid_buf = u.into_bytes();
                (5, &uuid_buf)
            }
        };
        let name = name.as_bytes();
        let name_len = be32(name.len()).to_be_bytes();
        let value_len = be32(bytes.len()).to_be_bytes();
        // Both lengths fit 32 bits (checked just above), so the sum cannot overflow.
        let end = self.len + 4 + name.len() + 5 + bytes.len();
        if end <= BUF {
            // The usual case: the whole field goes in at once, with one bounds check and the
            // running length in a register rather than in `self` after every piece.
            let (out, rest) = self.buf[self.len..end].split_at_mut(4);
            out.copy_from_slice(&name_len);
            let (out, rest) = rest.split_at_mut(name.len());
            copy_short(out, name);
            rest[0] = tag;
            rest[1..5].copy_from_slice(&value_len);
            copy_short(&mut rest[5..], bytes);
            self.len = end;
        } else {
            self.put(&name_len);
            self.put(name);
            self.put(&[tag]);
            self.put(&value_len);
            self.put(bytes);
        }
        self
    }

    /// Finishes the key.
    ///
    /// # Panics
    ///
    /// If the number of fields added differs from the number announced in [`KeyHasher::new`]:
    /// the count is part of the encoding, so such a key would be wrong, not merely different.
    #[inline]
    pub fn finish(mut self) -> IdempotencyKey {
        self.key()
    }

    /// [`finish`](Self::finish), in place.
    #[inline]
    fn key(&mut self) -> IdempotencyKey {
        assert_eq!(
            self.seen, self.expected,
            "idemkit: a key announced {} fields but was given {}",
            self.expected, self.seen
        );
        // SHA-256's padding: 0x80, zeros (there already), and the length in bits, big-endian,
        // ending the first block with room for it. `len <= BUF`, so that is within `buf`.
        let bits = (self.blocks * BLOCK as u64 + self.len as u64) * 8;
        let end = (self.len + 9).next_multiple_of(BLOCK);
        self.buf[self.len] = 0x80;
        self.buf[end - 8..end].copy_from_slice(&bits.to_be_bytes());
        compress(&mut self.state, &self.buf[..end]);
        let mut first = [0u8; 16];
        for (out, word) in first.chunks_exact_mut(4).zip(&self.state) {
            out.copy_from_slice(&word.to_be_bytes());
        }
        IdempotencyKey::from_uuid(Uuid::new_v8(first))
    }

    /// Appends `bytes`, hashing the buffer whenever it fills up.
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if end <= BUF {
            copy_short(&mut self.buf[self.len..end], bytes);
            self.len = end;
        } else {
            self.put_overflowing(bytes);
        }
    }

    /// [`put`](Self::put) of bytes that overflow the buffer: they fill it up and it is hashed,
    /// the whole blocks of what is left are hashed where they lie, and the rest starts the
    /// buffer afresh.
    #[cold]
    #[inline(never)]
    fn put_overflowing(&mut self, bytes: &[u8]) {
        let (now, rest) = bytes.split_at(BUF - self.len);
        self.buf[self.len..BUF].copy_from_slice(now);
        compress(&mut self.state, &self.buf[..BUF]);
        let (whole, rest) = rest.split_at(rest.len() - rest.len() % BLOCK);
        compress(&mut self.state, whole);
        self.blocks += ((BUF + whole.len()) / BLOCK) as u64;
        self.buf[..BUF].fill(0);
        self.buf[..rest.len()].copy_from_slice(rest);
        self.len = rest.len();
    }
}

/// Runs SHA-256's compression function over `bytes`, a whole number of blocks, in one call (a
/// call per block cost a few percent of a short key).
fn compress(state: &mut [u32; 8], bytes: &[u8]) {
    debug_assert_eq!(bytes.len() % BLOCK, 0);
    // `compress256` takes its blocks as `&[GenericArray<u8, U64>]`; ours are in a byte slice.
    // SAFETY: `GenericArray<u8, U64>` has the layout of `[u8; 64]` (it is `repr(transparent)`
    // over `repr(C)` halves; generic-array's own `from_slice` casts a slice's pointer the same
    // way, and sha2's `compress256` casts these blocks back to `[u8; 64]`); the assertion below
    // pins its size and alignment. Any 64 bytes are a valid value of it, alignment 1 holds at any address,
    // and the `bytes.len() / BLOCK` blocks lie within `bytes`, which stays borrowed (shared)
    // while they are read.
    let blocks = unsafe {
        std::slice::from_raw_parts(
            bytes.as_ptr().cast::<GenericArray<u8, U64>>(),
            bytes.len() / BLOCK,
        )
    };
    sha2::compress256(state, blocks);
}

const _: () = assert!(
    size_of::<GenericArray<u8, U64>>() == BLOCK && align_of::<GenericArray<u8, U64>>() == 1
);

/// `dst.copy_from_slice(src)` for the few bytes of a typical piece (a name, a value), without a
/// call to `memcpy`: two overlapping copies of the widest size that fits.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    debug_assert_eq!(dst.len(), n);
    if n >= 16 {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else if n > 0 {
        dst[0] = src[0];
        dst[n / 2] = src[n / 2];
        dst[n - 1] = src[n - 1];
    }
}

#[inline]
fn be32(n: usize) -> u32 {
    u32::try_from(n).expect("idemkit: a key component longer than 4 GiB")
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

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    /// Encoding v1 written out and hashed the plain way, as the key was made before the buffer.
    fn reference(tool: &str, fields: &[(&str, u8, &[u8])]) -> Uuid {
        fn put(out: &mut Vec<u8>, bytes: &[u8]) {
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(bytes);
        }
        let mut encoding = DOMAIN.to_vec();
        put(&mut encoding, tool.as_bytes());
        encoding.extend_from_slice(&(fields.len() as u32).to_be_bytes());
        for (name, tag, value) in fields {
            put(&mut encoding, name.as_bytes());
            encoding.push(*tag);
            put(&mut encoding, value);
        }
        let digest = Sha256::digest(&encoding);
        Uuid::new_v8(digest[..16].try_into().unwrap())
    }

    /// Tools and values of every length around the block (64), buffer (128) and padding
    /// boundaries, through `derive`, the streaming hasher and a clone of it.
    #[test]
    fn keys_are_sha256_of_the_encoding_at_every_length() {
        let long = "t".repeat(300);
        let bytes: Vec<u8> = (0..=255).cycle().take(700).collect();
        for tool_len in [
            0, 1, 6, 40, 53, 54, 55, 63, 64, 65, 100, 109, 110, 128, 129, 300,
        ] {
            let tool = &long[..tool_len];
            for value_len in 0..=bytes.len() {
                let value = &bytes[..value_len];
                let expected = reference(tool, &[("customer_id", 4, value), ("n", 2, b"7")]);
                let fields: [KeyField<'_>; 2] = [("customer_id", &value), ("n", &7u8)];
                assert_eq!(IdempotencyKey::derive(tool, &fields).as_uuid(), expected);

                let mut hasher = KeyHasher::new(tool, 2);
                hasher.field("customer_id", value);
                let clone = hasher.clone();
                hasher.field("n", &7u8);
                assert_eq!(
                    hasher.finish().as_uuid(),
                    expected,
                    "tool {tool_len}, value {value_len}"
                );
                let mut clone = clone;
                clone.field("n", &7u8);
                assert_eq!(clone.finish().as_uuid(), expected);
            }
        }
    }

    #[test]
    fn many_fields_and_a_long_value_are_hashed_like_one_string() {
        let value = vec![0xa5u8; 10_000];
        let names: Vec<String> = (0..40).map(|i| "f".repeat(i)).collect();
        let mut fields: Vec<KeyField<'_>> =
            names.iter().map(|n| (n.as_str(), &true as _)).collect();
        fields.insert(17, ("big", &value));
        let mut expected: Vec<(&str, u8, &[u8])> =
            names.iter().map(|n| (n.as_str(), 3, &[1u8][..])).collect();
        expected.insert(17, ("big", 4, &value));
        assert_eq!(
            IdempotencyKey::derive("charge", &fields).as_uuid(),
            reference("charge", &expected)
        );
    }

    #[test]
    fn every_kind_of_value_is_encoded_as_before() {
        let uuid = Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        let fields: [KeyField<'_>; 8] = [
            ("text", &"héllo"),
            ("char", &'é'),
            ("int", &-42i64),
            ("wide", &i128::MIN),
            ("uint", &u128::MAX),
            ("bool", &false),
            ("bytes", &[0u8, 255]),
            ("uuid", &uuid),
        ];
        let expected = reference(
            "t",
            &[
                ("text", 1, "héllo".as_bytes()),
                ("char", 1, "é".as_bytes()),
                ("int", 2, b"-42"),
                ("wide", 2, i128::MIN.to_string().as_bytes()),
                ("uint", 2, u128::MAX.to_string().as_bytes()),
                ("bool", 3, &[0]),
                ("bytes", 4, &[0, 255]),
                ("uuid", 5, uuid.as_bytes()),
            ],
        );
        assert_eq!(IdempotencyKey::derive("t", &fields).as_uuid(), expected);
    }

    #[test]
    fn the_text_is_the_uuid_crates_hyphenated_lowercase() {
        let mut uuids: Vec<u128> = (0..=255u8).map(|b| u128::from_ne_bytes([b; 16])).collect();
        uuids.extend(
            (0..1000u128).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)),
        );
        uuids.extend((0..128).map(|bit| 1u128 << bit));
        for u in uuids {
            let uuid = Uuid::from_u128(u);
            let mut expected = [0u8; 36];
            uuid.hyphenated().encode_lower(&mut expected);
            assert_eq!(
                IdempotencyKey::from_uuid(uuid).as_str().as_bytes(),
                expected
            );
        }
    }
}
