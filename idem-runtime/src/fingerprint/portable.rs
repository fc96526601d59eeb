//! An argument's JSON tree as serde_json builds it without its `arbitrary_precision` feature,
//! whatever features it is built with.
//!
//! Any crate in a user's graph may switch that feature on (and a later release of it off again),
//! and a fingerprint must not change with it: a retry after such a deploy would be refused as
//! another operation ([`Error::KeyReuse`](crate::Error::KeyReuse)). Without the feature,
//! serde_json keeps an `f32` as the `f64` it widens to, and refuses an `i128` or a `u128` beyond
//! `i64` and `u64`; with it, it keeps an `f32`'s own shortest text and any 128-bit integer as its
//! text. So here an `f32` reaches serde_json as its `f64`, and a 128-bit integer as a 64-bit one
//! or not at all. Numbers that arrive as text (JSON bodies and arguments) are read back the same
//! way where the fingerprint is written (`write_number`).
//!
//! Map keys pass as they are: serde_json writes every key as a string, alike with and without
//! the feature.

use serde::ser::{self, Serialize, Serializer};

/// `T`, serialized with the numbers serde_json would make without `arbitrary_precision`.
pub(super) struct Portable<'a, T: ?Sized>(pub(super) &'a T);

impl<T: Serialize + ?Sized> Serialize for Portable<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(Widen(serializer))
    }
}

/// A serializer that hands everything to `S`, numbers as above.
struct Widen<S>(S);

fn out_of_range<E: ser::Error>(v: impl std::fmt::Display) -> E {
    E::custom(format!(
        "an integer argument is {v}, beyond the 64-bit range that JSON numbers keep exactly: \
         pass it as a string"
    ))
}

macro_rules! forward {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method(self, v: $ty) -> Result<S::Ok, S::Error> {
            self.0.$method(v)
        }
    )*};
}

impl<S: Serializer> Serializer for Widen<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Widen<S::SerializeSeq>;
    type SerializeTuple = Widen<S::SerializeTuple>;
    type SerializeTupleStruct = Widen<S::SerializeTupleStruct>;
    type SerializeTupleVariant = Widen<S::SerializeTupleVariant>;
    type SerializeMap = Widen<S::SerializeMap>;
    type SerializeStruct = Widen<S::SerializeStruct>;
    type SerializeStructVariant = Widen<S::SerializeStructVariant>;

    forward!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_f64: f64, serialize_char: char, serialize_str: &str,
        serialize_bytes: &[u8], serialize_unit_struct: &'static str);

    fn serialize_f32(self, v: f32) -> Result<S::Ok, S::Error> {
        self.0.serialize_f64(f64::from(v))
    }
    fn serialize_i128(self, v: i128) -> Result<S::Ok, S::Error> {
        if let Ok(v) = u64::try_from(v) {
            self.0.serialize_u64(v)
        } else if let Ok(v) = i64::try_from(v) {
            self.0.serialize_i64(v)
        } else {
            Err(out_of_range(v))
        }
    }
    fn serialize_u128(self, v: u128) -> Result<S::Ok, S::Error> {
        match u64::try_from(v) {
            Ok(v) => self.0.serialize_u64(v),
            Err(_) => Err(out_of_range(v)),
        }
    }
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_none()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&Portable(value))
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_variant(name, index, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Portable(value))
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, index, variant, &Portable(value))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(Widen)
    }
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(Widen)
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(Widen)
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0
            .serialize_tuple_variant(name, index, variant, len)
            .map(Widen)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(Widen)
    }
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(Widen)
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0
            .serialize_struct_variant(name, index, variant, len)
            .map(Widen)
    }
    fn collect_str<T: std::fmt::Display + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.collect_str(value)
    }
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! elements {
    ($($trait:ident :: $method:ident),*) => {$(
        impl<S: ser::$trait> ser::$trait for Widen<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), S::Error> {
                self.0.$method(&Portable(value))
            }
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )*};
}

elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

macro_rules! fields {
    ($($trait:ident),*) => {$(
        impl<S: ser::$trait> ser::$trait for Widen<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), S::Error> {
                self.0.serialize_field(key, &Portable(value))
            }
            fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
                self.0.skip_field(key)
            }
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )*};
}

fields!(SerializeStruct, SerializeStructVariant);

impl<S: ser::SerializeMap> ser::SerializeMap for Widen<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), S::Error> {
        self.0.serialize_key(key)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), S::Error> {
        self.0.serialize_value(&Portable(value))
    }
    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<(), S::Error> {
        self.0.serialize_entry(key, &Portable(value))
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;

    use super::Portable;

    #[derive(Serialize)]
    enum Shape {
        Unit,
        Newtype(f32),
        Tuple(f32, u8),
        Struct { r: f32 },
    }

    #[derive(Serialize)]
    struct Everything {
        float: f32,
        wide: u128,
        negative: i128,
        some: Option<f32>,
        list: Vec<f32>,
        tuple: (f32, &'static str),
        map: BTreeMap<String, f32>,
        shapes: Vec<Shape>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
    }

    /// The writer serializer keeps an `f32`'s own shortest text with or without serde_json's
    /// features, so it shows the widening where a `Value` (without the feature) would not: every
    /// `f32` at every depth is written as its `f64`; map keys as they are.
    #[test]
    fn every_f32_reaches_serde_json_as_its_f64() {
        let value = Everything {
            float: 0.1,
            wide: u128::from(u64::MAX),
            negative: i128::from(i64::MIN),
            some: Some(0.1),
            list: vec![0.1, 0.5],
            tuple: (0.1, "x"),
            map: BTreeMap::from([("k".to_owned(), 0.1)]),
            shapes: vec![
                Shape::Unit,
                Shape::Newtype(0.1),
                Shape::Tuple(0.1, 1),
                Shape::Struct { r: 0.1 },
            ],
            skipped: None,
        };
        let w = "0.10000000149011612";
        let want = format!(
            r#"{{"float":{w},"wide":18446744073709551615,"negative":-9223372036854775808,"some":{w},"list":[{w},0.5],"tuple":[{w},"x"],"map":{{"k":{w}}},"shapes":["Unit",{{"Newtype":{w}}},{{"Tuple":[{w},1]}},{{"Struct":{{"r":{w}}}}}]}}"#
        );
        assert_eq!(serde_json::to_string(&Portable(&value)).unwrap(), want);
        assert_eq!(
            serde_json::to_string(&value).unwrap(),
            want.replace(w, "0.1"),
            "the writer keeps an f32's own text"
        );
        // A float map key is a string, not widened.
        let keyed = BTreeMap::from([(1u8, 0.5f32)]);
        assert_eq!(
            serde_json::to_string(&Portable(&keyed)).unwrap(),
            r#"{"1":0.5}"#
        );
    }

    /// 128-bit integers within 64 bits become 64-bit ones; beyond, they are refused, with what
    /// to do, as serde_json refuses them without `arbitrary_precision`.
    #[test]
    fn wide_integers_are_narrowed_or_refused() {
        assert_eq!(serde_json::to_string(&Portable(&7u128)).unwrap(), "7");
        assert_eq!(serde_json::to_string(&Portable(&-7i128)).unwrap(), "-7");
        for refused in [
            serde_json::to_value(Portable(&(u128::from(u64::MAX) + 1))),
            serde_json::to_value(Portable(&(i128::from(i64::MIN) - 1))),
            serde_json::to_value(Portable(&[i128::MAX])),
        ] {
            let e = refused.unwrap_err().to_string();
            assert!(e.contains("pass it as a string"), "{e}");
        }
    }
}
