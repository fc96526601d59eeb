//! The fingerprint of a JSON text, hashed from a tree that borrows its strings from the text:
//! the HTTP server fingerprints every keyed JSON body, and a `serde_json::Value` (a map, and a
//! `String` for every key and string, all freed again) was most of that cost.
//!
//! The bytes hashed are exactly those [`Fingerprint::of_value`] hashes for the `Value` the same
//! text parses into, since records already stored hold them: the tests below compare the two.
//! One exception: a number that a double does not hold as written, which the `Value` (without
//! serde_json's `arbitrary_precision`) holds as the double nearest it, is hashed here by its
//! exact value, read from the text ([`exact`]).

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

use super::{Fingerprint, exact, write_json, write_number};

impl Fingerprint {
    /// The fingerprint of a JSON text, as [`Fingerprint::of_value`] of the `Value` it parses
    /// into (but each number by its exact value: [`exact`]); `None` where
    /// `serde_json::from_slice::<Value>` fails (same recursion limit, same refusal of trailing
    /// characters).
    pub(crate) fn of_json_slice(text: &[u8]) -> Option<Fingerprint> {
        // A plain text (no escapes, no floats: most request bodies) is copied in canonical form
        // in one pass; any other goes through the tree below, which decides what it is.
        if let Some(hashed) = super::plain::with_canonical(text, |plain| Sha256::digest(plain)) {
            return Some(Fingerprint(hashed.into()));
        }
        let json = parse(text).ok()?;
        let mut sha = Sha256::new();
        write_canonical(&mut sha, json);
        Some(Fingerprint(sha.finalize().into()))
    }
}

/// The tree of a JSON text, each number that serde_json read as an `f64` resolved from its own
/// spelling in the text: a double where it holds the number as written, else the exact value
/// ([`exact`]). (serde_json has read such a number as the nearest `f64`; its text is gone from
/// the tree, so the text's numbers are read again, in order, and matched to the tree's.)
fn parse(text: &[u8]) -> Result<Json<'_>, serde_json::Error> {
    let mut json: Json<'_> = serde_json::from_slice(text)?;
    let mut numbers = Numbers {
        tokens: exact::number_tokens(text),
        seen: 0,
        taken: 0,
    };
    numbers
        .resolve(&mut json)
        .ok_or_else(|| de::Error::custom("a number of the text was not found in it"))?;
    Ok(json)
}

/// The numbers of a text, matched to its tree's in the text's order.
struct Numbers<I> {
    tokens: I,
    /// The tree's numbers passed so far.
    seen: usize,
    /// The text's numbers read so far.
    taken: usize,
}

impl<'t, I: Iterator<Item = &'t str>> Numbers<I> {
    fn resolve(&mut self, json: &mut Json<'_>) -> Option<()> {
        match json {
            Json::Number(_) => self.seen += 1,
            Json::Float(_) => {
                // Only the tokens up to this one are read: a text with no such number (most
                // bodies) is not read again.
                let token = self.tokens.nth(self.seen - self.taken)?;
                self.taken = self.seen + 1;
                self.seen += 1;
                *json = Json::Canonical(exact::canonical(token).text().to_owned());
            }
            Json::Array(items) => {
                for item in items {
                    self.resolve(item)?;
                }
            }
            Json::Object(entries) => {
                for (_, value) in entries {
                    self.resolve(value)?;
                }
            }
            Json::Null
            | Json::Bool(_)
            | Json::String(_)
            | Json::Canonical(_)
            | Json::Resolved(_) => {}
        }
        Some(())
    }
}

/// A JSON value as `Value` holds it, but strings borrowed from the text where they hold no
/// escape, and an object's entries in the text's order, repeated keys and all.
enum Json<'a> {
    Null,
    Bool(bool),
    Number(Number),
    /// A number serde_json read as an `f64`, before [`parse`] resolves it.
    Float(f64),
    /// A number's canonical text, resolved from its spelling.
    Canonical(String),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
    /// The tree of another text (serde_json's private `RawValue` key), resolved on its own.
    Resolved(Box<Json<'a>>),
}

impl Json<'_> {
    /// The same value, owning its strings.
    fn into_owned(self) -> Json<'static> {
        let owned = |s: Cow<'_, str>| Cow::Owned(s.into_owned());
        match self {
            Json::Null => Json::Null,
            Json::Bool(b) => Json::Bool(b),
            Json::Number(n) => Json::Number(n),
            Json::Float(f) => Json::Float(f),
            Json::Canonical(s) => Json::Canonical(s),
            Json::Resolved(json) => Json::Resolved(Box::new(json.into_owned())),
            Json::String(s) => Json::String(owned(s)),
            Json::Array(items) => Json::Array(items.into_iter().map(Json::into_owned).collect()),
            Json::Object(entries) => Json::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (owned(k), v.into_owned()))
                    .collect(),
            ),
        }
    }
}

/// `write_canonical`'s text for the `Value` this tree stands for: object keys sorted by `str`
/// order, of a key given twice the last value (the one serde_json's map keeps), numbers and
/// strings as serde_json writes them, `-0.0` as `0.0`.
fn write_canonical(sha: &mut Sha256, value: Json<'_>) {
    match value {
        Json::Null => write_json(sha, &()),
        Json::Bool(b) => write_json(sha, &b),
        Json::Number(n) => write_number(sha, &n),
        Json::Canonical(text) => sha.update(text.as_bytes()),
        Json::Float(f) => {
            debug_assert!(false, "every float is resolved");
            write_number(
                sha,
                &Number::from_f64(f).expect("serde_json reads finite floats"),
            );
        }
        Json::Resolved(json) => write_canonical(sha, *json),
        Json::String(s) => write_json(sha, &*s),
        Json::Array(items) => {
            sha.update(b"[");
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 {
                    sha.update(b",");
                }
                write_canonical(sha, item);
            }
            sha.update(b"]");
        }
        Json::Object(mut entries) => {
            // Stable, so of a repeated key the last given stays last: the one written.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            sha.update(b"{");
            let mut entries = entries.into_iter().peekable();
            let mut first = true;
            while let Some((key, value)) = entries.next() {
                if entries.peek().is_some_and(|(next, _)| *next == key) {
                    continue;
                }
                if !first {
                    sha.update(b",");
                }
                first = false;
                write_json(sha, &*key);
                sha.update(b":");
                write_canonical(sha, value);
            }
            sha.update(b"}");
        }
    }
}

/// serde_json's private map keys. Where the serde_json feature using one is on (any crate in a
/// build may switch it on), `Value` reads a map whose first key it is as no map: under
/// `NUMBER` (`arbitrary_precision`, which hands every number over so) as the number its string
/// spells, under `RAW` (`raw_value`) as the JSON text its string holds. Without the feature, or
/// further on in a map, either is an ordinary key.
const NUMBER: &str = "$serde_json::private::Number";
const RAW: &str = "$serde_json::private::RawValue";

/// Whether `Value` reads a map whose first key is `token` as no map, asked of `Value` itself
/// once per process.
fn value_reads(token: &'static str) -> bool {
    static NUMBER_READ: OnceLock<bool> = OnceLock::new();
    static RAW_READ: OnceLock<bool> = OnceLock::new();
    let read = if token == NUMBER {
        &NUMBER_READ
    } else {
        &RAW_READ
    };
    *read.get_or_init(|| {
        let probe = format!(r#"{{"{token}":"0"}}"#);
        serde_json::from_str::<Value>(&probe).is_ok_and(|v| v.is_number())
    })
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

/// `Value`'s visitor, borrowing.
struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Self::Value, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Self::Value, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Self::Value, E> {
        // As `Value`: a float with no JSON form is null (serde_json's parser makes none).
        Ok(if n.is_finite() {
            Json::Float(n)
        } else {
            Json::Null
        })
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Owned(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Some(Text(first)) = map.next_key()? else {
            return Ok(Json::Object(Vec::new()));
        };
        if first == NUMBER && value_reads(NUMBER) {
            let Text(number) = map.next_value()?;
            return number.parse().map(Json::Number).map_err(de::Error::custom);
        }
        if first == RAW && value_reads(RAW) {
            let Text(raw) = map.next_value()?;
            return parse(raw.as_bytes())
                .map(|json| Json::Resolved(Box::new(json.into_owned())))
                .map_err(de::Error::custom);
        }
        let mut entries = vec![(first, map.next_value()?)];
        while let Some((Text(key), value)) = map.next_entry()? {
            entries.push((key, value));
        }
        Ok(Json::Object(entries))
    }
}

/// A key (or a private key's string value), borrowed where it holds no escape.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(s)))
            }

            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }

            fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

#[cfg(test)]
mod tests;
