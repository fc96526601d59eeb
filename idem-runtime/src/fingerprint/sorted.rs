//! The fingerprint of a generated call's arguments, streamed into the hash as they come: the
//! attributes hand them over sorted by name, so nothing is collected, sorted or allocated, and a
//! scalar (the usual argument) is written without a `serde_json::Value` made of it.
//!
//! The bytes hashed are exactly [`Fingerprinter`](super::Fingerprinter)'s for the same arguments:
//! records stored by either must match (the tests below compare the two over every kind of
//! argument; `fingerprints_are_pinned` pins `Fingerprinter`'s).

use serde::Serialize;
use serde::ser::{self, Impossible};
use sha2::{Digest, Sha256};

use super::{Fingerprint, to_value, write_canonical};

/// Canonical JSON of named arguments given in ascending name order, hashed as it is written.
/// Not a stable API: the attributes' expansions reach it through `Arguments`.
#[doc(hidden)]
#[derive(Clone)]
pub struct SortedArgs {
    sha: Sha256,
    last: Option<&'static str>,
}

impl std::fmt::Debug for SortedArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedArgs")
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl Default for SortedArgs {
    fn default() -> Self {
        Self::new()
    }
}

impl SortedArgs {
    /// No arguments yet.
    pub fn new() -> Self {
        let mut sha = Sha256::new();
        sha.update(b"{");
        SortedArgs { sha, last: None }
    }

    /// Adds one argument. Names must come in strictly ascending order (`str`'s order, the one
    /// the canonical form sorts by); one that does not is an error, never a wrong fingerprint.
    pub fn arg<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        if self.last.is_some_and(|last| last >= name) {
            return Err(ser::Error::custom(format!(
                "the argument `{name}` was fingerprinted out of order (a bug in idemkit's attributes: \
                 please report it)"
            )));
        }
        // `"name":` and a scalar are written to the stack and hashed in one update; anything
        // else goes through a `Value`, as `Fingerprinter` does, so maps are sorted and floats
        // checked at every depth.
        let mut text = Text::new();
        if self.last.is_some() {
            text.push(b",");
        }
        // A generated call's names are Rust identifiers: nothing in them is escaped.
        if name.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            text.push(b"\"");
            text.push(name.as_bytes());
            text.push(b"\":");
        } else {
            let _ = serde_json::to_writer(&mut text, name);
            text.push(b":");
        }
        let named = text.len();
        if value.serialize(Scalar(&mut text)).is_ok() {
            self.sha.update(text.as_bytes());
        } else {
            let value = to_value(value)?;
            text.truncate(named);
            self.sha.update(text.as_bytes());
            write_canonical(&mut self.sha, &value);
        }
        self.last = Some(name);
        Ok(())
    }

    /// The fingerprint of the arguments added.
    pub fn finish(mut self) -> Fingerprint {
        self.sha.update(b"}");
        Fingerprint(self.sha.finalize().into())
    }
}

/// An argument's `"name":` and scalar JSON text, on the stack (the longest scalar text that is
/// not a string is a float's, 24 bytes); a longer one spills to the heap.
struct Text {
    inline: [u8; 64],
    len: usize,
    spilled: Vec<u8>,
}

impl Text {
    fn new() -> Self {
        Text {
            inline: [0; 64],
            len: 0,
            spilled: Vec::new(),
        }
    }

    #[inline]
    fn push(&mut self, bytes: &[u8]) {
        let _ = std::io::Write::write(self, bytes);
    }

    fn len(&self) -> usize {
        if self.spilled.is_empty() {
            self.len
        } else {
            self.spilled.len()
        }
    }

    fn truncate(&mut self, len: usize) {
        if self.spilled.is_empty() {
            self.len = len;
        } else {
            self.spilled.truncate(len);
        }
    }

    fn as_bytes(&self) -> &[u8] {
        if self.spilled.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spilled
        }
    }
}

impl std::io::Write for Text {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.spilled.is_empty() && self.len + buf.len() <= self.inline.len() {
            self.inline[self.len..self.len + buf.len()].copy_from_slice(buf);
            self.len += buf.len();
        } else {
            if self.spilled.is_empty() {
                self.spilled.extend_from_slice(&self.inline[..self.len]);
            }
            self.spilled.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Not a scalar (or a scalar with no plain JSON form here): take the `Value` path.
#[derive(Debug)]
struct NotScalar;

impl std::fmt::Display for NotScalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a scalar")
    }
}

impl std::error::Error for NotScalar {}

impl ser::Error for NotScalar {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        NotScalar
    }
}

/// Writes the scalars whose text is the same as their `Value`'s canonical text; refuses the rest
/// before writing anything (128-bit integers and `f32`, whose `Value` differs from their text;
/// non-finite floats, refused on the `Value` path; bytes, sequences, maps, structs, variants with
/// data).
struct Scalar<'a>(&'a mut Text);

impl Scalar<'_> {
    fn json<T: Serialize + ?Sized>(self, value: &T) -> Result<(), NotScalar> {
        serde_json::to_writer(self.0, value).map_err(|_| NotScalar)
    }
}

macro_rules! scalar_json {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method(self, v: $ty) -> Result<(), NotScalar> { self.json(&v) }
    )*};
}

macro_rules! not_scalar {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method(self, _: $ty) -> Result<(), NotScalar> { Err(NotScalar) }
    )*};
}

impl ser::Serializer for Scalar<'_> {
    type Ok = ();
    type Error = NotScalar;
    type SerializeSeq = Impossible<(), NotScalar>;
    type SerializeTuple = Impossible<(), NotScalar>;
    type SerializeTupleStruct = Impossible<(), NotScalar>;
    type SerializeTupleVariant = Impossible<(), NotScalar>;
    type SerializeMap = Impossible<(), NotScalar>;
    type SerializeStruct = Impossible<(), NotScalar>;
    type SerializeStructVariant = Impossible<(), NotScalar>;

    scalar_json!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_char: char, serialize_str: &str);
    not_scalar!(serialize_i128: i128, serialize_u128: u128, serialize_f32: f32,
        serialize_bytes: &[u8]);

    fn serialize_f64(self, v: f64) -> Result<(), NotScalar> {
        if !v.is_finite() {
            Err(NotScalar)
        } else if v == 0.0 {
            // -0.0 == 0.0: one text for both, as on the `Value` path.
            std::io::Write::write_all(self.0, b"0.0").map_err(|_| NotScalar)
        } else {
            self.json(&v)
        }
    }
    fn serialize_none(self) -> Result<(), NotScalar> {
        self.json(&())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), NotScalar> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), NotScalar> {
        self.json(&())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), NotScalar> {
        self.json(&())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), NotScalar> {
        self.json(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<(), NotScalar> {
        // serde_json's own tokens (a `RawValue`, a number kept exact) mean more than their inner
        // value.
        if name.starts_with("$serde_json") {
            return Err(NotScalar);
        }
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), NotScalar> {
        Err(NotScalar)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, NotScalar> {
        Err(NotScalar)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, NotScalar> {
        Err(NotScalar)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;
    use serde_json::json;

    use super::SortedArgs;
    use crate::fingerprint::Fingerprinter;

    #[derive(Serialize)]
    struct Item {
        sku: &'static str,
        qty: i64,
    }

    #[derive(Serialize)]
    struct Wrapper(u64);

    #[derive(Serialize)]
    struct Nothing;

    #[derive(Serialize)]
    enum Kind {
        Plain,
        Tagged(u8),
    }

    struct Bytes(&'static [u8]);
    impl Serialize for Bytes {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }

    /// Both ways of fingerprinting the same arguments, given in ascending order.
    fn both(args: &[(&'static str, &dyn erased::Arg)]) -> (String, String) {
        let mut sorted = SortedArgs::new();
        let mut collected = Fingerprinter::new();
        for (name, value) in args {
            value.sorted(&mut sorted, name).unwrap();
            value.collected(&mut collected, name).unwrap();
        }
        (sorted.finish().to_hex(), collected.finish().to_hex())
    }

    mod erased {
        use serde::Serialize;

        use super::{Fingerprinter, SortedArgs};

        pub trait Arg {
            fn sorted(
                &self,
                to: &mut SortedArgs,
                name: &'static str,
            ) -> Result<(), serde_json::Error>;
            fn collected(
                &self,
                to: &mut Fingerprinter,
                name: &'static str,
            ) -> Result<(), serde_json::Error>;
        }

        impl<T: Serialize> Arg for T {
            fn sorted(
                &self,
                to: &mut SortedArgs,
                name: &'static str,
            ) -> Result<(), serde_json::Error> {
                to.arg(name, self)
            }
            fn collected(
                &self,
                to: &mut Fingerprinter,
                name: &'static str,
            ) -> Result<(), serde_json::Error> {
                to.arg_static(name, self).map(|_| ())
            }
        }
    }

    #[test]
    fn streams_the_same_bytes_as_the_fingerprinter() {
        let long = "a string longer than the inline buffer of thirty-two bytes, with \"quotes\" \u{7} and é";
        let mut map = BTreeMap::new();
        map.insert("z", 1);
        map.insert("a", 2);
        let items = vec![Item { sku: "y", qty: 3 }];
        let owned = String::from("owned");
        let json = json!({"b": [1, {"z": 0, "a": -0.0}], "a": null});
        let cases: Vec<Vec<(&'static str, &dyn erased::Arg)>> = vec![
            vec![],
            vec![("amount_cents", &4200u64)],
            vec![("amount_cents", &4200u64), ("currency", &"eur")],
            vec![
                ("a", &i64::MIN),
                ("b", &u64::MAX),
                ("c", &-7i8),
                ("d", &255u8),
                ("e", &true),
                ("f", &false),
            ],
            vec![
                ("s", &"quote \" backslash \\ nl \n nul \0 del \u{7f}"),
                ("t", &long),
                ("u", &"日本語 😀 \u{2028}"),
            ],
            vec![("c", &'ü'), ("d", &'"'), ("e", &owned)],
            vec![
                ("f0", &0.5f64),
                ("f1", &0.1f64),
                ("f2", &-0.0f64),
                ("f3", &0.0f64),
                ("f4", &1e300f64),
                ("f5", &f64::MAX),
                ("f6", &-2.5e-300f64),
                ("f7", &3.0f64),
            ],
            vec![
                ("g", &0.1f32),
                ("h", &-0.0f32),
                ("i", &-5i128),
                ("j", &(u64::MAX as u128)),
            ],
            vec![
                ("n", &Option::<u8>::None),
                ("o", &Some(5u8)),
                ("p", &Some(Some("x"))),
                ("q", &()),
                ("r", &Nothing),
            ],
            vec![
                ("k1", &Kind::Plain),
                ("k2", &Kind::Tagged(4)),
                ("w", &Wrapper(9)),
                ("x", &Some(Wrapper(1))),
            ],
            vec![
                ("item", &Item { sku: "x", qty: -2 }),
                ("items", &items),
                ("map", &map),
            ],
            vec![
                ("bytes", &Bytes(b"\x00\xff")),
                ("json", &json),
                ("tuple", &(1u8, "two", 3.0f64)),
            ],
            vec![
                ("", &1u8),
                ("names with \"quotes\" and é", &2u8),
                ("r#type", &3u8),
                ("é", &4u8),
            ],
        ];
        for args in cases {
            let names: Vec<_> = args.iter().map(|(n, _)| *n).collect();
            let (sorted, collected) = both(&args);
            assert_eq!(sorted, collected, "{names:?}");
        }
        // The pinned value of `fingerprints_are_pinned`'s "doc example".
        assert_eq!(
            both(&[("amount_cents", &4200u64), ("currency", &"eur")]).0,
            "6e6ae9d379b06b9cdc80a7bc08dd55a9fc06d8d255dc752da7d71ff2efda0556"
        );
    }

    #[test]
    fn refuses_names_out_of_order_or_repeated() {
        let mut args = SortedArgs::new();
        args.arg("b", &1u8).unwrap();
        let err = args.arg("a", &1u8).unwrap_err();
        assert!(err.to_string().contains("out of order"), "{err}");
        assert!(args.arg("b", &2u8).is_err());
        assert!(args.arg("c", &2u8).is_ok());
    }

    #[test]
    fn refuses_what_the_fingerprinter_refuses() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let err = SortedArgs::new().arg("rate", &bad).unwrap_err();
            assert!(err.to_string().contains("has no JSON form"), "{err}");
            assert!(
                SortedArgs::new()
                    .arg("rates", &vec![Some(1.0), Some(bad)])
                    .is_err()
            );
            assert!(SortedArgs::new().arg("rate", &(bad as f32)).is_err());
        }
        assert!(SortedArgs::new().arg("big", &u128::MAX).is_err());
        let mut map = BTreeMap::new();
        map.insert(vec![1u8], 1u8);
        assert!(SortedArgs::new().arg("bad", &map).is_err());
    }
}
