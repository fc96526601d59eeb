//! What can be a key field: `KeyPart`, the value it encodes as (`KeyValue`, the tags of
//! encoding v1), and the implementations for text, integers, bools, bytes and UUIDs.

use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;

use uuid::Uuid;

use super::IdempotencyKey;
use super::operation::OperationId;

/// One key field: its name and its value. The value is `Sync` so that a call's future stays
/// `Send` while the field list is borrowed.
pub type KeyField<'a> = (&'a str, &'a (dyn KeyPart + Sync));

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
        KeyValue::Uuid(self.as_uuid())
    }
}

impl KeyPart for IdempotencyKey {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Uuid(self.uuid)
    }
}
