//! `idemkit key TOOL FIELD=VALUE…`: key fields as typed on a command line, derived by the
//! runtime's own encoding (v1, and the tenant extension).

use idem_runtime::{IdempotencyKey, KeyPart, KeyValue};
use uuid::Uuid;

/// One key field's value, with the kind its prefix named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    Int(i128),
    UInt(u128),
    Bool(bool),
    Bytes(Vec<u8>),
    Uuid(Uuid),
}

impl KeyPart for Value {
    fn key_value(&self) -> KeyValue<'_> {
        match self {
            Value::Text(t) => KeyValue::Text(t),
            Value::Int(n) => KeyValue::Int(*n),
            Value::UInt(n) => KeyValue::UInt(*n),
            Value::Bool(b) => KeyValue::Bool(*b),
            Value::Bytes(b) => KeyValue::Bytes(b),
            Value::Uuid(u) => KeyValue::Uuid(*u),
        }
    }
}

const KINDS: &str = "int, bool, bytes, uuid, text";

/// `FIELD=VALUE`, the value text unless prefixed with its kind (`int:42`, `bool:true`,
/// `bytes:` hex, `uuid:`, `text:`). A value with a colon and no known kind is refused, so that a
/// mistyped kind (`itn:42`) cannot give a wrong key in silence.
pub fn parse_field(arg: &str) -> Result<(String, Value), String> {
    let (name, value) = arg.split_once('=').ok_or_else(|| {
        format!(
            "`{arg}` is not FIELD=VALUE; write each key field as name=value, e.g. customer_id=cus_1"
        )
    })?;
    if name.is_empty() {
        return Err(format!(
            "`{arg}` has no field name before `=`; write name=value"
        ));
    }
    let Some((kind, rest)) = value.split_once(':') else {
        return Ok((name.to_owned(), Value::Text(value.to_owned())));
    };
    let bad = |what: &str| format!("field `{name}`: `{rest}` is not {what}");
    let value = match kind {
        "text" => Value::Text(rest.to_owned()),
        "int" => match rest.parse::<u128>() {
            Ok(n) => Value::UInt(n),
            Err(_) => Value::Int(rest.parse().map_err(|_| bad("an integer"))?),
        },
        "bool" => match rest {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(bad("true or false")),
        },
        "bytes" => Value::Bytes(hex(rest).ok_or_else(|| bad("hex (two digits per byte)"))?),
        "uuid" => Value::Uuid(Uuid::parse_str(rest).map_err(|_| bad("a UUID"))?),
        other => {
            return Err(format!(
                "field `{name}`: `{other}:` is not a kind ({KINDS}); for text that contains a colon, write \
                 {name}=text:{value}"
            ));
        }
    };
    Ok((name.to_owned(), value))
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The key of `tool` with `fields` in the order given, under `tenant` if one is named.
pub fn derive(tool: &str, fields: &[(String, Value)], tenant: Option<&str>) -> IdempotencyKey {
    let fields: Vec<(&str, &(dyn KeyPart + Sync))> = fields
        .iter()
        .map(|(name, value)| (name.as_str(), value as &(dyn KeyPart + Sync)))
        .collect();
    let key = IdempotencyKey::derive(tool, &fields);
    match tenant {
        Some(tenant) => key.for_tenant(tenant),
        None => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tool: &str, args: &[&str]) -> String {
        let fields: Vec<_> = args.iter().map(|a| parse_field(a).unwrap()).collect();
        derive(tool, &fields, None).to_string()
    }

    #[test]
    fn kinds_encode_as_the_runtime_types_do() {
        let same = |args: &[&str], fields: &[(&str, &(dyn KeyPart + Sync))]| {
            assert_eq!(
                key("t", args),
                IdempotencyKey::derive("t", fields).to_string()
            )
        };
        same(&["n=int:42"], &[("n", &42u64)]);
        same(&["n=int:-7"], &[("n", &-7i32)]);
        same(&["b=bool:true"], &[("b", &true)]);
        same(&["x=bytes:00ff10"], &[("x", &vec![0u8, 255, 16])]);
        let u = Uuid::parse_str("6a1557d2-fe2a-83ea-9696-a86f7991dfbf").unwrap();
        same(
            &["u=uuid:6a1557d2-fe2a-83ea-9696-a86f7991dfbf"],
            &[("u", &u)],
        );
        same(&["s=text:a:b"], &[("s", &"a:b")]);
        same(&["s=2026-11"], &[("s", &"2026-11")]);
        same(&["s="], &[("s", &"")]);
    }

    #[test]
    fn mistakes_are_refused_with_what_to_write() {
        for bad in [
            "nofield",
            "=x",
            "n=int:4x",
            "b=bool:yes",
            "x=bytes:abc",
            "u=uuid:zz",
        ] {
            assert!(parse_field(bad).is_err(), "{bad}");
        }
        let err = parse_field("s=itn:42").unwrap_err();
        assert!(err.contains("s=text:itn:42"), "{err}");
    }
}
