//! `KeyHasher`: encoding v1 streamed into SHA-256's compression function over a buffer on the
//! stack (the one `unsafe` cast of the crate's key path lives here, with the padding).

use sha2::digest::generic_array::GenericArray;
use sha2::digest::typenum::U64;
use uuid::Uuid;

use super::part::{KeyPart, KeyValue};
use super::{DOMAIN, IdempotencyKey};

/// The SHA-256 block: the compression function takes 64 bytes at a time.
pub(super) const BLOCK: usize = 64;

/// Encoding v1 gathered before it is hashed: two blocks, enough for the head and three typical
/// fields (the benchmark's three come to 100 bytes). A longer key is hashed a full buffer at a
/// time. The buffer has one more block after these, for SHA-256's padding.
pub(super) const BUF: usize = 2 * BLOCK;

/// SHA-256's initial hash value (FIPS 180-4, 5.3.3).
pub(super) const SHA256_IV: [u32; 8] = [
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
    pub(super) state: [u32; 8],
    /// How many blocks are hashed: all of the encoding before `buf`.
    pub(super) blocks: u64,
    /// `buf[..len]` is the encoding not yet hashed; the rest of `buf` is zero, as the padding
    /// needs it.
    pub(super) buf: [u8; BUF + BLOCK],
    pub(super) len: usize,
    pub(super) expected: usize,
    pub(super) seen: usize,
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
    pub(super) fn empty(n_fields: usize) -> Self {
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
    pub(super) fn start(&mut self, tool: &str) {
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

    /// [`finish`](Self::finish) without moving the hasher, for generated code: a hasher that
    /// has been handed to an outlined [`field`](Self::field) is copied whole (256 bytes, a
    /// `memcpy` per key by callgrind) when `finish` takes it by value. Gives the same key when
    /// called again. Not a stable API.
    #[doc(hidden)]
    #[inline]
    pub fn finish_in_place(&mut self) -> IdempotencyKey {
        self.key()
    }

    /// [`finish`](Self::finish), in place; the same key when called again (the hasher's state
    /// is not advanced past the fields).
    #[inline]
    pub(super) fn key(&mut self) -> IdempotencyKey {
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
        let mut state = self.state;
        compress(&mut state, &self.buf[..end]);
        let mut first = [0u8; 16];
        for (out, word) in first.chunks_exact_mut(4).zip(&state) {
            out.copy_from_slice(&word.to_be_bytes());
        }
        IdempotencyKey::from_uuid(Uuid::new_v8(first))
    }

    /// Appends `bytes`, hashing the buffer whenever it fills up.
    #[inline]
    pub(super) fn put(&mut self, bytes: &[u8]) {
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
    pub(super) fn put_overflowing(&mut self, bytes: &[u8]) {
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
pub(super) fn compress(state: &mut [u32; 8], bytes: &[u8]) {
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
pub(super) fn copy_short(dst: &mut [u8], src: &[u8]) {
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
pub(super) fn be32(n: usize) -> u32 {
    u32::try_from(n).expect("idemkit: a key component longer than 4 GiB")
}
