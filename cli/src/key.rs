//! `idemkit key TOOL FIELD=VALUE…`: key fields as typed on a command line, derived by the
//! runtime's own encoding (v1, and the tenant extension); checked against the application's
//! tool manifest (`idemkit::registry::tools_manifest()`) with `--check`.

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
    /// `op:NAME`: the id of the operation `NAME` in the store, looked up before deriving.
    Operation(String),
}

impl Value {
    /// The kind a key encodes it as (the manifest's `kind`).
    fn kind(&self) -> &'static str {
        match self {
            Value::Text(_) => "text",
            Value::Int(_) | Value::UInt(_) => "int",
            Value::Bool(_) => "bool",
            Value::Bytes(_) => "bytes",
            Value::Uuid(_) | Value::Operation(_) => "uuid",
        }
    }
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
            Value::Operation(name) => {
                unreachable!("op:{name} is looked up in the store before a key is derived")
            }
        }
    }
}

const KINDS: &str = "int, bool, bytes, uuid, op, text";

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
        "op" if !rest.is_empty() => Value::Operation(rest.to_owned()),
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

/// What `--check` finds wrong with `fields` for `tool`, by the manifest's text: every mistake,
/// one a line (empty: they fit).
pub fn check(
    manifest: &str,
    tool: &str,
    fields: &[(String, Value)],
) -> Result<Vec<String>, String> {
    let manifest: serde_json::Value = serde_json::from_str(manifest).map_err(|e| {
        format!(
            "the manifest is not JSON ({e}); write it with `idemkit::registry::tools_manifest()`"
        )
    })?;
    let tools = manifest["tools"].as_array().ok_or(
        "the manifest has no `tools` list; write it with `idemkit::registry::tools_manifest()`"
            .to_owned(),
    )?;
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    let Some(entry) = tools.iter().find(|t| t["name"] == tool) else {
        return Ok(vec![format!(
            "no tool is named `{tool}` in the manifest{}; its tools are: {}",
            closest(tool, &names)
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default(),
            names.join(", ")
        )]);
    };
    if entry["kind"] == "read_only" {
        return Ok(vec![format!("`{tool}` is read-only: it has no key")]);
    }
    let expected: Vec<(&str, &str, &str)> = entry["key_fields"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|f| {
                    (
                        f["name"].as_str().unwrap_or(""),
                        f["type"].as_str().unwrap_or("?"),
                        f["kind"].as_str().unwrap_or("any"),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let order = expected
        .iter()
        .map(|(n, ..)| *n)
        .collect::<Vec<_>>()
        .join(", ");
    let mut wrong = Vec::new();
    for (i, (name, _)) in fields.iter().enumerate() {
        if fields[..i].iter().any(|(n, _)| n == name) {
            wrong.push(format!("key field `{name}` is given twice"));
        }
    }
    for (name, value) in fields {
        match expected.iter().find(|(n, ..)| n == name) {
            None => {
                let known: Vec<&str> = expected.iter().map(|(n, ..)| *n).collect();
                wrong.push(format!(
                    "`{name}` is not a key field of `{tool}`{}; its key fields are {order}, in this order",
                    closest(name, &known).map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default()
                ));
            }
            Some((_, ty, kind)) if *kind != "any" && *kind != value.kind() => {
                let example = match *kind {
                    "int" => "int:42",
                    "bool" => "bool:true",
                    "bytes" => "bytes:00ff",
                    "uuid" => "uuid:… or op:NAME",
                    _ => "text:…",
                };
                wrong.push(format!(
                    "key field `{name}` is {} in `{tool}` (`{ty}`), not {}: write {name}={example}",
                    article(kind),
                    article(value.kind())
                ));
            }
            Some(_) => {}
        }
    }
    for (name, ..) in &expected {
        if !fields.iter().any(|(n, _)| n == name) {
            wrong.push(format!("key field `{name}` of `{tool}` is missing; its key fields are {order}, in this order"));
        }
    }
    if wrong.is_empty() {
        let given: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        let want: Vec<&str> = expected.iter().map(|(n, ..)| *n).collect();
        if given != want {
            let at = given
                .iter()
                .zip(&want)
                .position(|(g, w)| g != w)
                .unwrap_or(0);
            wrong.push(format!(
                "key fields out of order: `{}` is given where `{}` goes; `{tool}` keys on {order}, in this order (the order is part of the key)",
                given[at], want[at]
            ));
        }
    }
    Ok(wrong)
}

fn article(kind: &str) -> String {
    match kind {
        "int" => "an int".to_owned(),
        "uuid" => "a uuid".to_owned(),
        other => other.to_owned(),
    }
}

/// The name in `known` one typo away from `name`, if any.
fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    }
    known
        .iter()
        .map(|k| (distance(name, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, k)| k)
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
