//! A JSON value as a key field ([`JsonKeyField`]): what a call made of JSON arguments (a remote
//! MCP tool's, a model's) derives its key from, encoded as the same value of a Rust parameter
//! would be, so that `{"order": "ord_1"}` and `order: &str = "ord_1"` give one key.

use serde_json::Value;

use super::part::{KeyPart, KeyValue};

/// One JSON value as a key field: a string is text (tag 1), an integer an integer (tag 2, the
/// same whether it came as `i64` or `u64`, and exact beyond 64 bits where serde_json kept the
/// number's text), `true`/`false` a bool (tag 3). Anything else is refused with
/// [`JsonKeyField::new`]'s error: a number with a fraction or an exponent (no `KeyPart` is a
/// float: two roundings of one amount must not be two operations), `null`, an array, an object.
///
/// ```
/// use idem_runtime::{IdempotencyKey, JsonKeyField};
/// use serde_json::json;
///
/// let (customer, period) = (json!("cus_1"), json!(202611));
/// let from_json = IdempotencyKey::derive(
///     "charge",
///     &[("customer_id", &JsonKeyField::new(&customer).unwrap()), ("period", &JsonKeyField::new(&period).unwrap())],
/// );
/// let from_rust = IdempotencyKey::derive("charge", &[("customer_id", &"cus_1"), ("period", &202611u32)]);
/// assert_eq!(from_json, from_rust);
/// assert!(JsonKeyField::new(&json!(1.5)).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonKeyField<'a>(KeyValue<'a>);

impl<'a> JsonKeyField<'a> {
    /// `value` as a key field, or what it is instead of text, an integer or a bool.
    pub fn new(value: &'a Value) -> Result<Self, &'static str> {
        match value {
            Value::String(text) => Ok(JsonKeyField(KeyValue::Text(text))),
            Value::Bool(b) => Ok(JsonKeyField(KeyValue::Bool(*b))),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    Ok(JsonKeyField(KeyValue::UInt(u.into())))
                } else if let Some(i) = n.as_i64() {
                    Ok(JsonKeyField(KeyValue::Int(i.into())))
                } else {
                    // Beyond 64 bits, where serde_json keeps the text (`arbitrary_precision`);
                    // else a fraction or exponent, or an integer already rounded to a double.
                    let text = n.to_string();
                    if let Ok(u) = text.parse::<u128>() {
                        Ok(JsonKeyField(KeyValue::UInt(u)))
                    } else if let Ok(i) = text.parse::<i128>() {
                        Ok(JsonKeyField(KeyValue::Int(i)))
                    } else {
                        Err(
                            "a number with a fraction or an exponent (a key field is text, an integer or a bool)",
                        )
                    }
                }
            }
            Value::Null => Err("null (a key field is text, an integer or a bool)"),
            Value::Array(_) => Err("an array (a key field is text, an integer or a bool)"),
            Value::Object(_) => Err(
                "an object (a key field is text, an integer or a bool: name a field inside it, `outer.inner`)",
            ),
        }
    }
}

impl KeyPart for JsonKeyField<'_> {
    fn key_value(&self) -> KeyValue<'_> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::JsonKeyField;
    use crate::key::IdempotencyKey;
    use serde_json::json;

    /// The golden vector of encoding v1 (`charge`), derived from JSON values.
    #[test]
    fn json_values_derive_the_golden_key_of_encoding_v1() {
        let (c, p, d) = (json!("cus_1"), json!("subscription"), json!("2026-11"));
        let f = |v| JsonKeyField::new(v).unwrap();
        let key = IdempotencyKey::derive(
            "charge",
            &[
                ("customer_id", &f(&c)),
                ("purpose", &f(&p)),
                ("period", &f(&d)),
            ],
        );
        assert_eq!(key.as_str(), "32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
    }

    #[test]
    fn integers_and_bools_encode_as_their_rust_types_and_floats_are_refused() {
        let key = |v: &serde_json::Value| {
            IdempotencyKey::derive("t", &[("f", &JsonKeyField::new(v).unwrap())])
        };
        assert_eq!(
            key(&json!(-5)),
            IdempotencyKey::derive("t", &[("f", &-5i64)])
        );
        assert_eq!(key(&json!(7)), IdempotencyKey::derive("t", &[("f", &7u8)]));
        assert_eq!(
            key(&json!(true)),
            IdempotencyKey::derive("t", &[("f", &true)])
        );
        for refused in [json!(0.5), json!(null), json!([1]), json!({"a": 1})] {
            assert!(JsonKeyField::new(&refused).is_err(), "{refused}");
        }
    }
}
