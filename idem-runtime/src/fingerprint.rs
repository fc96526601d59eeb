//! Fingerprints of the arguments that are not key fields.
//!
//! Two calls with the same key must be the same operation: the fingerprint (SHA-256 of the
//! arguments' canonical JSON, object keys sorted at every depth) tells a retry from a key reused
//! for something else, which is refused as [`Error::KeyReuse`](crate::Error::KeyReuse).

use std::fmt;

use std::io::Write;

use serde::Serialize;
use serde::ser::Impossible;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 of the canonical JSON of a call's other arguments.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of any serializable value, via its canonical JSON.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        let mut hashing = Hashing::new();
        if value.serialize(Scalar(&mut hashing)).is_ok() {
            return Ok(hashing.finish());
        }
        let value = serde_json::to_value(value)?;
        Ok(Self::of_value(&value))
    }

    /// The fingerprint of a JSON value, object keys sorted at every depth.
    pub fn of_value(value: &Value) -> Self {
        let mut hashing = Hashing::new();
        write_canonical(&mut hashing, value);
        hashing.finish()
    }

    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            use fmt::Write;
            let _ = write!(s, "{b:02x}");
        }
        s
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Builds the fingerprint of named arguments: `{"name": value, ...}` in canonical form.
///
/// ```
/// use idem_runtime::Fingerprinter;
///
/// let mut args = Fingerprinter::new();
/// args.arg("amount_cents", &4200u64).unwrap();
/// args.arg("currency", &"eur").unwrap();
/// let fp = args.finish();
/// # let _ = fp;
/// ```
#[derive(Debug, Default)]
pub struct Fingerprinter {
    // Each argument's bytes, in the order added: its name as given (to sort by), then its member
    // of the object as hashed, `"name":value` in canonical JSON. One buffer for all of them, so
    // an argument costs no allocation of its own once the buffer has grown.
    text: Vec<u8>,
    // Where each argument's bytes lie in `text`; sorted by name (the last of equal names winning,
    // as in a JSON map) when finished, so no map is built.
    args: Vec<Arg>,
}

#[derive(Debug, Clone, Copy)]
struct Arg {
    /// `text[name..member]` is the name; `text[member..end]` is `"name":value`.
    name: usize,
    member: usize,
    end: usize,
}

impl Fingerprinter {
    /// No arguments yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one argument by name.
    pub fn arg<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<&mut Self, serde_json::Error> {
        if self.text.capacity() == 0 {
            self.text.reserve(128);
            self.args.reserve(4);
        }
        let start = self.text.len();
        self.text.extend_from_slice(name.as_bytes());
        let member = self.text.len();
        write_str(&mut self.text, name);
        self.text.push(b':');
        let value_start = self.text.len();
        // Scalars are written as they serialize; anything else goes through a `Value`, which
        // decides what JSON the arguments are (and what fails to be).
        if value.serialize(Scalar(&mut self.text)).is_err() {
            self.text.truncate(value_start);
            match serde_json::to_value(value) {
                Ok(value) => write_canonical(&mut self.text, &value),
                Err(e) => {
                    self.text.truncate(start);
                    return Err(e);
                }
            }
        }
        self.args.push(Arg {
            name: start,
            member,
            end: self.text.len(),
        });
        Ok(self)
    }

    /// The fingerprint of the arguments added so far.
    pub fn finish(mut self) -> Fingerprint {
        let text = &self.text[..];
        let name = |a: &Arg| &text[a.name..a.member];
        // Stable, so of equal names the last added stays last. Skipped when added in order.
        if !self.args.is_sorted_by(|a, b| name(a) <= name(b)) {
            self.args.sort_by(|a, b| name(a).cmp(name(b)));
        }
        let mut hashing = Hashing::new();
        hashing.push(b"{");
        let mut first = true;
        for (i, arg) in self.args.iter().enumerate() {
            if self
                .args
                .get(i + 1)
                .is_some_and(|next| name(next) == name(arg))
            {
                continue;
            }
            if !first {
                hashing.push(b",");
            }
            first = false;
            hashing.push(&text[arg.member..arg.end]);
        }
        hashing.push(b"}");
        hashing.finish()
    }
}

/// SHA-256 fed through a buffer on the stack, so the hash sees a few large updates rather than
/// one per JSON token (each of which costs `sha2` its own buffer bookkeeping).
struct Hashing {
    sha: Sha256,
    len: usize,
    buf: [u8; HASHING_BUF],
}

const HASHING_BUF: usize = 128;

impl Hashing {
    fn new() -> Self {
        Hashing {
            sha: Sha256::new(),
            len: 0,
            buf: [0; HASHING_BUF],
        }
    }

    #[inline]
    fn push(&mut self, bytes: &[u8]) {
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => self.spill(bytes),
        }
    }

    #[cold]
    fn spill(&mut self, bytes: &[u8]) {
        self.sha.update(&self.buf[..self.len]);
        self.len = 0;
        if bytes.len() >= HASHING_BUF {
            self.sha.update(bytes);
        } else {
            self.buf[..bytes.len()].copy_from_slice(bytes);
            self.len = bytes.len();
        }
    }

    fn finish(mut self) -> Fingerprint {
        self.sha.update(&self.buf[..self.len]);
        Fingerprint(self.sha.finalize().into())
    }
}

impl Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.push(buf);
        Ok(buf.len())
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.push(buf);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// Written by hand rather than trusting `serde_json::Map`'s order: with serde_json's
// `preserve_order` feature (which any crate in a user's graph may switch on) maps keep
// insertion order, and the fingerprint would change with it.
fn write_canonical<W: Write>(out: &mut W, value: &Value) {
    match value {
        Value::Object(map) => {
            let _ = out.write_all(b"{");
            // Without `preserve_order` the map iterates sorted already: then nothing is collected.
            if map.keys().is_sorted() {
                for (i, (k, v)) in map.iter().enumerate() {
                    write_member(out, i, k, v);
                }
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    write_member(out, i, k, v);
                }
            }
            let _ = out.write_all(b"}");
        }
        Value::Array(items) => {
            let _ = out.write_all(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    let _ = out.write_all(b",");
                }
                write_canonical(out, v);
            }
            let _ = out.write_all(b"]");
        }
        Value::String(s) => write_str(out, s),
        Value::Null => {
            let _ = out.write_all(b"null");
        }
        Value::Bool(b) => {
            let _ = out.write_all(if *b { b"true" } else { b"false" });
        }
        number => write_json(out, number),
    }
}

fn write_member<W: Write>(out: &mut W, i: usize, k: &str, v: &Value) {
    if i > 0 {
        let _ = out.write_all(b",");
    }
    write_str(out, k);
    let _ = out.write_all(b":");
    write_canonical(out, v);
}

/// serde_json's text of a string: quoted and escaped.
fn write_str<W: Write>(out: &mut W, s: &str) {
    write_json(out, s);
}

/// serde_json's text of a string or a scalar, written straight out (no `String` made).
fn write_json<W: Write, T: Serialize + ?Sized>(out: &mut W, value: &T) {
    serde_json::to_writer(out, value).expect("a JSON string or scalar serializes");
}

/// Writes a value that serializes as one JSON scalar exactly as its `Value` would be written;
/// anything else (and anything whose `Value` is not plainly that scalar) it refuses with
/// [`NotScalar`], having written nothing, and the value goes through `serde_json::to_value`.
struct Scalar<'a, W>(&'a mut W);

#[derive(Debug)]
struct NotScalar;

impl fmt::Display for NotScalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a JSON scalar")
    }
}

impl std::error::Error for NotScalar {}

impl serde::ser::Error for NotScalar {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        NotScalar
    }
}

impl<W: Write> Scalar<'_, W> {
    fn raw(self, bytes: &[u8]) -> Result<(), NotScalar> {
        self.0.write_all(bytes).map_err(|_| NotScalar)
    }
    fn int(self, i: impl itoa::Integer) -> Result<(), NotScalar> {
        self.raw(itoa::Buffer::new().format(i).as_bytes())
    }
}

impl<W: Write> serde::Serializer for Scalar<'_, W> {
    type Ok = ();
    type Error = NotScalar;
    type SerializeSeq = Impossible<(), NotScalar>;
    type SerializeTuple = Impossible<(), NotScalar>;
    type SerializeTupleStruct = Impossible<(), NotScalar>;
    type SerializeTupleVariant = Impossible<(), NotScalar>;
    type SerializeMap = Impossible<(), NotScalar>;
    type SerializeStruct = Impossible<(), NotScalar>;
    type SerializeStructVariant = Impossible<(), NotScalar>;

    fn serialize_bool(self, v: bool) -> Result<(), NotScalar> {
        self.raw(if v { b"true" } else { b"false" })
    }
    fn serialize_i8(self, v: i8) -> Result<(), NotScalar> {
        self.int(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), NotScalar> {
        self.int(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), NotScalar> {
        self.int(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), NotScalar> {
        self.int(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), NotScalar> {
        self.int(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), NotScalar> {
        self.int(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), NotScalar> {
        self.int(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), NotScalar> {
        self.int(v)
    }
    // 128-bit integers may not fit a `Value`, and an `f32`'s `Value` depends on serde_json's
    // features (`arbitrary_precision` keeps its own digits): `to_value` decides.
    fn serialize_i128(self, _: i128) -> Result<(), NotScalar> {
        Err(NotScalar)
    }
    fn serialize_u128(self, _: u128) -> Result<(), NotScalar> {
        Err(NotScalar)
    }
    fn serialize_f32(self, _: f32) -> Result<(), NotScalar> {
        Err(NotScalar)
    }
    fn serialize_f64(self, v: f64) -> Result<(), NotScalar> {
        // A non-finite float's `Value` is null, which is what serde_json writes for it too.
        serde_json::to_writer(self.0, &v).map_err(|_| NotScalar)
    }
    fn serialize_char(self, v: char) -> Result<(), NotScalar> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), NotScalar> {
        serde_json::to_writer(self.0, v).map_err(|_| NotScalar)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), NotScalar> {
        Err(NotScalar)
    }
    fn serialize_none(self) -> Result<(), NotScalar> {
        self.raw(b"null")
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), NotScalar> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), NotScalar> {
        self.raw(b"null")
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), NotScalar> {
        self.raw(b"null")
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), NotScalar> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), NotScalar> {
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
    use std::collections::{BTreeMap, HashMap};

    use serde::Serialize;
    use serde_json::json;

    use super::{Fingerprint, Fingerprinter};

    #[derive(Serialize)]
    struct Order {
        // Declared out of order: the fingerprint sorts them.
        zeta: u32,
        alpha: Option<String>,
        items: Vec<Item>,
        kind: Kind,
        unit: (),
        ratio: f32,
    }

    #[derive(Serialize)]
    struct Item {
        sku: &'static str,
        qty: i64,
    }

    #[derive(Serialize)]
    enum Kind {
        #[allow(dead_code)]
        Plain,
        Tagged(u8),
    }

    #[derive(Serialize)]
    struct Wrapper(u64);

    #[derive(Serialize)]
    enum Unit {
        Variant,
    }

    fn args(build: impl FnOnce(&mut Fingerprinter)) -> String {
        let mut f = Fingerprinter::new();
        build(&mut f);
        f.finish().to_hex()
    }

    /// Computed with the fingerprint code before it buffered its bytes: stored records hold
    /// these, so none of them may ever change.
    #[test]
    fn fingerprints_are_pinned() {
        let mut hashed = HashMap::new();
        hashed.insert("b", 2);
        hashed.insert("a", 1);
        hashed.insert("c", 3);
        let mut int_keys = BTreeMap::new();
        int_keys.insert(10u32, "ten");
        int_keys.insert(9u32, "nine");
        let cases: Vec<(&str, String, &str)> = vec![
            (
                "empty",
                args(|_| {}),
                "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
            ),
            (
                "one u64",
                args(|f| {
                    f.arg("amount_cents", &4200u64).unwrap();
                }),
                "5c145998f248e9e38b0ee0faa81f7dd3f401d432e7153445e27ef66e7f42c3de",
            ),
            (
                "doc example",
                args(|f| {
                    f.arg("amount_cents", &4200u64).unwrap();
                    f.arg("currency", &"eur").unwrap();
                }),
                "6e6ae9d379b06b9cdc80a7bc08dd55a9fc06d8d255dc752da7d71ff2efda0556",
            ),
            (
                "unsorted names",
                args(|f| {
                    f.arg("zulu", &1u8).unwrap();
                    f.arg("alpha", &-7i32).unwrap();
                    f.arg("Mike", &true).unwrap();
                    f.arg("mike", &false).unwrap();
                    f.arg("_", &()).unwrap();
                }),
                "f5f0be113384b1f9e8c789ee3f2409aa9fe7066473c267f1f96c746e8da8d839",
            ),
            (
                "duplicate names, last wins",
                args(|f| {
                    f.arg("b", &1u8).unwrap();
                    f.arg("a", &"first").unwrap();
                    f.arg("b", &2u8).unwrap();
                    f.arg("a", &"second").unwrap();
                    f.arg("a", &"third").unwrap();
                }),
                "2e4254ad9c3d7985bf7e1a6ac5c63ae9c55322c910fa2e760b21082a2a21eebc",
            ),
            (
                "escapes and non-ASCII",
                args(|f| {
                    f.arg("s", "quote \" backslash \\ slash / nl \n tab \t cr \r nul \0 bell \u{7} del \u{7f}")
                        .unwrap();
                    f.arg("u", "héllo wörld — 日本語 😀 \u{2028}\u{2029}")
                        .unwrap();
                    f.arg("names with \"quotes\" and é", &'ü').unwrap();
                    f.arg("", &"").unwrap();
                }),
                "db721f86fc57dd230df820113cb9452ec2819951a882ed7db785728b692c657f",
            ),
            (
                "nested maps with unsorted keys",
                args(|f| {
                    f.arg(
                        "meta",
                        &json!({"z": {"y": 1, "b": [ {"k2": null, "k1": 1.5} ], "a": "x"}, "é": 1, "e": 2, "E": 3}),
                    )
                    .unwrap();
                    f.arg("hashed", &hashed).unwrap();
                    f.arg("int_keys", &int_keys).unwrap();
                }),
                "19697a0d56072b54a6894ec7501e1382e2a80dd729bf19ae7dce56d58e23d472",
            ),
            (
                "arrays",
                args(|f| {
                    f.arg("empty", &Vec::<u8>::new()).unwrap();
                    f.arg("nums", &[3u64, 1, 2, u64::MAX]).unwrap();
                    f.arg(
                        "mixed",
                        &json!([null, true, false, "s", 0, -1, [], {}, [[1]]]),
                    )
                    .unwrap();
                    f.arg("tuple", &(1u8, "two", 3.0f64)).unwrap();
                    f.arg("bytes", &serde_bytes_like()).unwrap();
                }),
                "63fc57cf8c13f9480d32031ca0d9798b44d11cd87c9dc6050dbb71c9953613e7",
            ),
            (
                "floats",
                args(|f| {
                    f.arg("half", &0.5f64).unwrap();
                    f.arg("tenth", &0.1f64).unwrap();
                    f.arg("tenth32", &0.1f32).unwrap();
                    f.arg("big", &1e300f64).unwrap();
                    f.arg("tiny", &-2.5e-300f64).unwrap();
                    f.arg("whole", &3.0f64).unwrap();
                    f.arg("neg_zero", &-0.0f64).unwrap();
                    f.arg("nan", &f64::NAN).unwrap();
                    f.arg("inf", &f32::INFINITY).unwrap();
                    f.arg("max", &f64::MAX).unwrap();
                }),
                "dc0c4dc99f58c604ea70678c5456a26aff9590643b7e8ad9663f3de8b6413dbe",
            ),
            (
                "null, bools, integers",
                args(|f| {
                    f.arg("none", &Option::<u8>::None).unwrap();
                    f.arg("some", &Some(5u8)).unwrap();
                    f.arg("unit", &()).unwrap();
                    f.arg("t", &true).unwrap();
                    f.arg("f", &false).unwrap();
                    f.arg("i64min", &i64::MIN).unwrap();
                    f.arg("i128", &-5i128).unwrap();
                    f.arg("u128", &(u64::MAX as u128)).unwrap();
                    f.arg("newtype", &Wrapper(9)).unwrap();
                    f.arg("unit_variant", &Unit::Variant).unwrap();
                }),
                "4043bf08f30e4f17a803222646dedc3e30b592a5c13da42bef5e52c2e84c55a0",
            ),
            (
                "a struct",
                args(|f| {
                    f.arg(
                        "order",
                        &Order {
                            zeta: 1,
                            alpha: Some("a".into()),
                            items: vec![Item { sku: "x", qty: -2 }, Item { sku: "y\"", qty: 3 }],
                            kind: Kind::Tagged(4),
                            unit: (),
                            ratio: 0.3,
                        },
                    )
                    .unwrap();
                    f.arg("value", &json!("plain")).unwrap();
                }),
                "4e7e5cfe322d228ae058b07f6dd9190d59a951463ff344042cda8f777eb2b377",
            ),
            (
                "Fingerprint::of u64",
                Fingerprint::of(&4200u64).unwrap().to_hex(),
                "be5220c4102d65865bde1ef9740d3d2093a02192e5773c56f23e27d917f17958",
            ),
            (
                "Fingerprint::of struct",
                Fingerprint::of(&Item {
                    sku: "é\n", qty: 1
                })
                .unwrap()
                .to_hex(),
                "68921a300a651bd7920d5254de33ea96a66772ae80b6cf7efc76316ba8b46695",
            ),
            (
                "Fingerprint::of nested map",
                Fingerprint::of(&json!({"b": {"d": [1, {"z": 0, "a": 0}], "c": null}, "a": 0.25}))
                    .unwrap()
                    .to_hex(),
                "4b359a147041340e72a3c664f0301e483b40cc2d56d3ef0957f5566e3ac05985",
            ),
            (
                "Fingerprint::of str",
                Fingerprint::of("a \"str\"").unwrap().to_hex(),
                "f2337f0727257ddcf5e350750b6b00258b3f928de64d38b3b38b7944f55534dc",
            ),
        ];
        let mut wrong = Vec::new();
        for (name, got, want) in &cases {
            if got != want {
                wrong.push(format!("{name:?}: {got}"));
            }
        }
        assert!(
            wrong.is_empty(),
            "changed fingerprints:\n{}",
            wrong.join("\n")
        );
    }

    fn serde_bytes_like() -> impl Serialize {
        struct Bytes(&'static [u8]);
        impl Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(self.0)
            }
        }
        Bytes(b"\x00\x7f\xff")
    }

    #[test]
    fn errors_are_kept() {
        let mut map = BTreeMap::new();
        map.insert(vec![1u8], 1u8);
        assert!(Fingerprinter::new().arg("bad", &map).is_err());
        assert!(Fingerprint::of(&map).is_err());
        assert!(Fingerprinter::new().arg("big", &u128::MAX).is_err());
    }
}
