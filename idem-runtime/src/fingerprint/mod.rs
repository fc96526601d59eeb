//! Fingerprints of the arguments that are not key fields.
//!
//! Two calls with the same key must be the same operation: the fingerprint (SHA-256 of the
//! arguments' canonical JSON, object keys sorted at every depth) tells a retry from a key reused
//! for something else, which is refused as [`Error::KeyReuse`](crate::Error::KeyReuse).
//!
//! Floats: `-0.0` fingerprints as `0.0` (they compare equal); a NaN or an infinite float is
//! refused ([`Error::Arguments`](crate::Error::Arguments)), since JSON would write it as `null`.
//!
//! Numbers are exact: two values that differ never share a fingerprint. A number a double holds
//! as written is hashed as serde_json writes it; one a double would round (an integer beyond 64
//! bits, a decimal of more digits than a double keeps) as its exact value ([`exact`]), or it is
//! refused where its text is already lost (a 128-bit integer argument beyond 64 bits; a model's
//! JSON arguments, refused by `JsonTools` when their text holds one).
//!
//! serde_json's features, which any crate in a build may switch on, change no fingerprint: maps
//! are sorted here (`preserve_order` keeps insertion order), and numbers are those serde_json makes
//! without `arbitrary_precision` ([`portable`], `write_number`).

pub(crate) mod exact;
pub(crate) mod finite;
mod portable;
// Only the HTTP server fingerprints JSON texts (request bodies).
#[cfg(feature = "tower")]
mod json;
// The fast path of `json`: plain texts copied in canonical form.
#[cfg(feature = "tower")]
mod plain;
pub(crate) mod sorted;

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;
use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// SHA-256 of the canonical JSON of a call's other arguments.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of any serializable value, via its canonical JSON.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        Ok(Self::of_value(&to_value(value)?))
    }

    /// The fingerprint of a JSON value, object keys sorted at every depth.
    pub fn of_value(value: &Value) -> Self {
        let mut sha = Sha256::new();
        write_canonical(&mut sha, value);
        Fingerprint(sha.finalize().into())
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
    // In the order added; sorted by name (the last of equal names winning, as in a JSON map) when
    // finished, so no map is built. A generated call's names are literals: borrowed, not copied.
    args: Vec<(Cow<'static, str>, Value)>,
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
        self.push(Cow::Owned(name.to_owned()), value)
    }

    /// [`Fingerprinter::arg`] with a name that lives for ever (a generated call's literal), so
    /// not copied. Not a stable API.
    #[doc(hidden)]
    pub fn arg_static<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<&mut Self, serde_json::Error> {
        self.push(Cow::Borrowed(name), value)
    }

    fn push<T: Serialize + ?Sized>(
        &mut self,
        name: Cow<'static, str>,
        value: &T,
    ) -> Result<&mut Self, serde_json::Error> {
        self.args.push((name, to_value(value)?));
        Ok(self)
    }

    /// The fingerprint of the arguments added so far.
    pub fn finish(mut self) -> Fingerprint {
        // Stable, so of equal names the last added stays last.
        self.args.sort_by(|a, b| a.0.cmp(&b.0));
        let mut sha = Sha256::new();
        sha.update(b"{");
        let mut first = true;
        for (i, (name, value)) in self.args.iter().enumerate() {
            if self.args.get(i + 1).is_some_and(|next| next.0 == *name) {
                continue;
            }
            if !first {
                sha.update(b",");
            }
            first = false;
            write_json(&mut sha, &**name);
            sha.update(b":");
            write_canonical(&mut sha, value);
        }
        sha.update(b"}");
        Fingerprint(sha.finalize().into())
    }
}

/// An argument's JSON tree, as its fingerprint reads it: refused when it holds a NaN or an
/// infinite float ([`finite`]); its numbers those of serde_json without `arbitrary_precision`,
/// whatever its features ([`portable`]).
pub(crate) fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, serde_json::Error> {
    finite::check(value)?;
    serde_json::to_value(portable::Portable(value))
}

// Written by hand rather than trusting `serde_json::Map`'s order: with serde_json's
// `preserve_order` feature (which any crate in a user's graph may switch on) maps keep
// insertion order, and the fingerprint would change with it.
fn write_canonical(sha: &mut Sha256, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            sha.update(b"{");
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    sha.update(b",");
                }
                write_json(sha, k);
                sha.update(b":");
                write_canonical(sha, v);
            }
            sha.update(b"}");
        }
        Value::Array(items) => {
            sha.update(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    sha.update(b",");
                }
                write_canonical(sha, v);
            }
            sha.update(b"]");
        }
        Value::Number(n) => write_number(sha, n),
        scalar => write_json(sha, scalar),
    }
}

/// A number as serde_json writes it without `arbitrary_precision`, whatever its features: an
/// integer within `u64` or `i64` as that integer, any other number as the `f64` it reads as, and
/// `-0.0` as `0.0` (they compare equal, so one text for both) — where that `f64` holds the number
/// exactly. Without the feature a `Number` is an integer or an `f64`, so always. With it, a
/// `Number` keeps the text it was read from (`1.50`, `1e2`, `-0`, `18446744073709551617`): its
/// text is hashed as the `f64`'s where they spell one value, and a number the `f64` would round
/// as its exact value instead ([`exact`]), so two numbers of different values never share a
/// fingerprint.
fn write_number(sha: &mut Sha256, n: &Number) {
    if let Some(u) = n.as_u64() {
        write_json(sha, &u);
    } else if let Some(i) = n.as_i64().filter(|&i| i != 0) {
        // (A zero here is the feature's `-0`, which serde_json without it reads as `-0.0`.)
        write_json(sha, &i);
    } else if exact::numbers_keep_text() {
        sha.update(exact::canonical(&n.to_string()).text().as_bytes());
    } else {
        match n.as_f64() {
            Some(0.0) => sha.update(b"0.0"), // `-0.0` too: it equals `0.0`
            Some(f) => write_json(sha, &f),
            None => sha.update(exact::canonical(&n.to_string()).text().as_bytes()),
        }
    }
}

/// serde_json's text of a string or a scalar, streamed into the hash (no `String` made).
fn write_json<T: Serialize + ?Sized>(sha: &mut Sha256, value: &T) {
    struct Hashing<'a>(&'a mut Sha256);
    impl std::io::Write for Hashing<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Hashing(sha), value).expect("a JSON string or scalar serializes");
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
                    f.arg("max", &f64::MAX).unwrap();
                }),
                // Changed in issue 15: -0.0 as 0.0, and NaN and infinities (refused now) left out.
                "4655f866056e8eb4dadce0fd0dbeaeac4a4dc9a69f071aef44c73c2f7dec5296",
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

    #[test]
    fn negative_zero_fingerprints_as_zero() {
        assert_eq!(
            Fingerprint::of(&-0.0f64).unwrap(),
            Fingerprint::of(&0.0f64).unwrap()
        );
        assert_eq!(
            Fingerprint::of(&json!({"a": [-0.0f32]})).unwrap(),
            Fingerprint::of(&json!({"a": [0.0f32]})).unwrap()
        );
        assert_ne!(
            Fingerprint::of(&0.0f64).unwrap(),
            Fingerprint::of(&0u8).unwrap()
        );
    }

    #[test]
    fn nan_and_infinities_are_refused_anywhere_in_an_argument() {
        #[derive(Serialize)]
        struct Quote {
            items: Vec<Option<f32>>,
        }
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let err = Fingerprint::of(&bad).unwrap_err();
            assert!(err.to_string().contains("has no JSON form"), "{err}");
            let mut f = Fingerprinter::new();
            assert!(f.arg("rate", &bad).is_err(), "{bad}");
            let nested = Quote {
                items: vec![Some(1.0), Some(bad as f32)],
            };
            assert!(Fingerprint::of(&nested).is_err(), "{bad} nested");
        }
        let fine = Quote {
            items: vec![None, Some(2.5)],
        };
        assert!(Fingerprint::of(&fine).is_ok());
        assert_ne!(
            Fingerprint::of(&Option::<f64>::None).unwrap(),
            Fingerprint::of(&Some(0.0f64)).unwrap()
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
        let big = Fingerprinter::new().arg("big", &u128::MAX).unwrap_err();
        assert!(big.to_string().contains("pass it as a string"), "{big}");
    }

    /// A number's text fingerprints as the number serde_json reads it as without its
    /// `arbitrary_precision` feature, whatever its features: with the feature a `Number` keeps
    /// the text it was read from. (`.ci/run` runs this crate's unit tests once more with the
    /// feature on, where this test and `fingerprints_are_pinned` tell.)
    #[test]
    fn number_texts_fingerprint_as_the_numbers_they_read_as() {
        let of = |text: &str| Fingerprint::of_value(&serde_json::from_str(text).unwrap());
        for (text, same_as) in [
            ("1.50", "1.5"),
            ("1e2", "100.0"),
            ("1E+2", "100.0"),
            ("0.10e1", "1.0"),
            ("-0", "0.0"),
            ("-0.0", "0.0"),
            ("-0e5", "0.0"),
            ("[1.0, {\"a\": 2.50}]", "[1.0, {\"a\": 2.5}]"),
        ] {
            assert_eq!(of(text), of(same_as), "{text} and {same_as}");
        }
        // And integers stay integers.
        assert_ne!(of("1"), of("1.0"));
        assert_eq!(
            of("18446744073709551615"),
            Fingerprint::of(&u64::MAX).unwrap()
        );
        assert_eq!(
            of("-9223372036854775808"),
            Fingerprint::of(&i64::MIN).unwrap()
        );
        // A number a double would round: with the feature the `Value` keeps its text, and the
        // fingerprint its exact value; without it, serde_json rounded it when it read the text
        // (where idemkit reads the text itself, the HTTP layer and `JsonTools::call`, it is kept
        // exactly or refused).
        for (text, rounded) in [
            ("18446744073709551616", "1.8446744073709552e19"),
            ("-9223372036854775809", "-9.223372036854776e18"),
            ("0.10000000000000000001", "0.1"),
        ] {
            assert_eq!(
                of(text) != of(rounded),
                super::exact::numbers_keep_text(),
                "{text}"
            );
        }
        // An `f32` argument fingerprints as the `f64` it widens to.
        assert_eq!(Fingerprint::of(&0.1f32).unwrap(), of("0.10000000149011612"));
    }
}
