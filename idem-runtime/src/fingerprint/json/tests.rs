use proptest::prelude::*;
use serde_json::Value;

use super::Fingerprint;

/// The reference: the `Value` path the HTTP server took before.
fn by_value(text: &[u8]) -> Option<Fingerprint> {
    serde_json::from_slice::<Value>(text)
        .ok()
        .map(|v| Fingerprint::of_value(&v))
}

/// Whether the `Value` path holds each of the text's numbers as written: without
/// `arbitrary_precision` it rounds one that a double does not hold, which this path keeps
/// exactly (so there the two differ).
fn value_holds_its_numbers(text: &[u8]) -> bool {
    use super::exact::{Canonical, canonical, number_tokens, numbers_keep_text};
    // As serde_json reads it: without `float_roundtrip`, a double may be read one step away
    // from the nearest (`3304130604.4E-69`), and written so in the `Value` path.
    let read = |token: &str| match serde_json::from_str::<Value>(token) {
        Ok(Value::Number(n)) if n.is_f64() => {
            canonical(token)
                == Canonical::Double(match n.as_f64() {
                    Some(0.0) => "0.0".to_owned(),
                    _ => n.to_string(),
                })
        }
        _ => true,
    };
    numbers_keep_text() || number_tokens(text).all(read)
}

/// Each text whose fingerprint differs from the `Value` path's, with both (for a text with
/// a number that path rounds: each that one path refuses and the other does not; they
/// differ where the number counts, and need not where a repeated key drops it).
fn differing<'a>(texts: impl IntoIterator<Item = &'a [u8]>) -> Vec<String> {
    texts
        .into_iter()
        .filter_map(|text| {
            let (got, want) = (Fingerprint::of_json_slice(text), by_value(text));
            let wrong = if want.is_some() && !value_holds_its_numbers(text) {
                got.is_none()
            } else {
                got != want
            };
            wrong.then(|| {
                format!(
                    "{:?}: {got:?}, against {want:?}",
                    String::from_utf8_lossy(text)
                )
            })
        })
        .collect()
}

#[test]
fn fingerprints_json_as_the_value_path_does() {
    let texts: &[&str] = &[
        // Nesting, keys out of order, empty containers.
        r#"{"b":{"d":[1,{"z":0,"a":0}],"c":null},"a":0.25}"#,
        r#"[{"y":[],"x":{}},[[[]]],{},[]]"#,
        r#"{}"#,
        r#"[]"#,
        r#"{"zeta":1,"alpha":2,"mike":{"b":[3,2,1],"a":"x"}}"#,
        // A key given more than once: the last value is kept, at any depth, whatever the
        // earlier one held.
        r#"{"a":1,"a":2}"#,
        r#"{"a":1,"b":0,"a":2,"a":3}"#,
        r#"{"b":{"x":1,"x":2},"a":[{"k":1,"k":{"z":1,"y":2}}]}"#,
        r#"{"a":{"deep":{"x":1}},"b":1,"a":2}"#,
        r#"{"a":[1,{"b":2}],"a":{"z":2,"y":1}}"#,
        r#"{"é":1,"\u00e9":2}"#,
        r#"{"\u00e9":1,"é":2}"#,
        // Escapes in strings and keys, borrowed nowhere.
        r#""quote \" backslash \\ slash \/ \b\f\n\r\t \u00e9 \ud83d\ude00 \u0000 \u001f \u2028""#,
        r#"{"k\"ey":"v\\al","n\nl":"\u00e9","\ud83d\ude00":"😀","é":"\u00E9"}"#,
        r#"["héllo wörld — 日本語 😀", "\u65e5\u672c"]"#,
        // Keys whose orders differ: bytes (= chars) against UTF-16 or case.
        r#"{"\uffff":1,"😀":2,"\ue000":3,"z":4,"é":5,"E":6,"e":7,"":8,"a\u0000":9,"a":10,"ab":11}"#,
        // Numbers.
        "0",
        "-0",
        "0.0",
        "-0.0",
        "1e3",
        "1E-7",
        "12345678901234567890",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "1.5",
        "4200",
        "2.5E+10",
        "5e-324",
        "1.7976931348623157e308",
        "0.1",
        "100.000",
        r#"[0,-0,0.0,-0.0,1e3,1E-7,12345678901234567890,-9223372036854775808,1.5,4200]"#,
        r#"{"n":-0,"m":{"z":-0.0,"a":0}}"#,
        // Literals.
        "true",
        "false",
        "null",
        r#"[true,false,null,"",{"t":true,"f":false,"n":null}]"#,
        // Whitespace everywhere.
        " \t\n\r{ \"b\" :\n[ 1 ,\t2 ] , \"a\" : { } , \"c\":\r\"x\" }\r\n ",
        "  [ ]  ",
        "\n\"s\"\n",
    ];
    let wrong = differing(texts.iter().map(|t| t.as_bytes()));
    assert!(wrong.is_empty(), "differs:\n{}", wrong.join("\n"));
    // Not vacuous: each of those is JSON.
    for text in texts {
        assert!(by_value(text.as_bytes()).is_some(), "{text}");
    }
}

#[test]
fn refuses_exactly_what_value_refuses() {
    let mut texts: Vec<Vec<u8>> = [
        "",
        "   ",
        r#"{"a":1}x"#,
        r#"{"a":1} {"b":2}"#,
        "[1] [2]",
        r#"{"a":1"#,
        r#"{"a":"#,
        r#"{"a""#,
        r#"{"a"}"#,
        r#"{"a":}"#,
        "[1,2",
        "[1,]",
        r#"{"a":1,}"#,
        "{'a':1}",
        r#"{a:1}"#,
        r#""abc"#,
        "[",
        "{",
        "nul",
        "tru",
        "NaN",
        "[NaN]",
        "Infinity",
        "-Infinity",
        "-",
        "01",
        "1.",
        ".5",
        "+1",
        "1e",
        "0x10",
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\x41""#,
        "\"a\nb\"",
        "\"tab\there\"",
        r#"{"a":1,"a":}"#,
    ]
    .iter()
    .map(|t| t.as_bytes().to_vec())
    .collect();
    // Bytes that are not UTF-8, in a string and in a key.
    texts.push(b"\"\xff\"".to_vec());
    texts.push(b"{\"\xc3\":1}".to_vec());
    for text in &texts {
        assert_eq!(
            Fingerprint::of_json_slice(text),
            None,
            "{:?}",
            String::from_utf8_lossy(text)
        );
        assert_eq!(by_value(text), None, "{:?}", String::from_utf8_lossy(text));
    }
}

/// serde_json stops at a depth of 128: one limit for both, arrays and objects alike.
#[test]
fn nests_as_deep_as_value_and_no_deeper() {
    let mut texts = Vec::new();
    for depth in 120..=135 {
        texts.push(format!("{}1{}", "[".repeat(depth), "]".repeat(depth)));
        texts.push(format!(
            "{}1{}",
            r#"{"a":"#.repeat(depth),
            "}".repeat(depth)
        ));
        texts.push(format!(
            "{}[]{}",
            r#"[{"a":"#.repeat(depth / 2),
            "}]".repeat(depth / 2)
        ));
    }
    let wrong = differing(texts.iter().map(|t| t.as_bytes()));
    assert!(wrong.is_empty(), "differs:\n{}", wrong.join("\n"));
    let parsed = |t: &String| Fingerprint::of_json_slice(t.as_bytes()).is_some();
    assert!(texts.iter().any(parsed), "some depth parses");
    assert!(!texts.iter().all(parsed), "some depth is refused");
}

/// Texts that `Value` reads one way or another by serde_json's features (any crate in a
/// build may switch them on; this crate's tests build it with `raw_value`): numbers beyond
/// `f64` (refused, but kept as text under `arbitrary_precision`), and serde_json's private
/// keys (read as a number or as JSON text when the feature using them is on).
#[test]
fn reads_feature_dependent_texts_as_value_does() {
    let texts: &[&str] = &[
        "1e400",
        "-1e400",
        "[1e400]",
        "123456789012345678901234567890",
        "-123456789012345678901234567890.5e-3",
        r#"{"$serde_json::private::Number":"12"}"#,
        r#"{"$serde_json::private::Number":"1.50"}"#,
        r#"{"$serde_json::private::Number":"x"}"#,
        r#"{"$serde_json::private::Number":12}"#,
        r#"{"$serde_json::private::Number":"12","b":1}"#,
        r#"{"b":1,"$serde_json::private::Number":"12"}"#,
        r#"{"$serde_json::private::RawValue":"{\"b\":[1,-0.0],\"a\":\"\\u00e9\"}"}"#,
        r#"{"$serde_json::private::RawValue":"[1, 2]"}"#,
        r#"{"$serde_json::private::RawValue":"[1, 2"}"#,
        r#"{"$serde_json::private::RawValue":"1 x"}"#,
        r#"{"$serde_json::private::RawValue":[1]}"#,
        r#"{"$serde_json::private::RawValue":"1","b":1}"#,
        r#"{"b":1,"$serde_json::private::RawValue":"1"}"#,
        r#"[{"$serde_json::private::RawValue":"{\"$serde_json::private::RawValue\":\"7\"}"}]"#,
        r#"{"$serde_json::private::RawValu":"1"}"#,
    ];
    let wrong = differing(texts.iter().map(|t| t.as_bytes()));
    assert!(wrong.is_empty(), "differs:\n{}", wrong.join("\n"));
}

/// Whitespace, at most two characters of it.
fn ws() -> impl Strategy<Value = String> {
    "[ \t\n\r]{0,2}"
}

/// A string's JSON text: plain characters and escapes.
fn string_text() -> BoxedStrategy<String> {
    let escapes = [
        r#"\""#,
        r#"\\"#,
        r#"\/"#,
        r#"\n"#,
        r#"\t"#,
        r#"\u00e9"#,
        r#"\ud83d\ude00"#,
        r#"\u0000"#,
    ];
    prop::collection::vec(
        prop_oneof![
            "[a-zA-Z0-9 ]",
            "[éE日😀\u{e000}\u{ffff}]",
            prop::sample::select(escapes.to_vec()).prop_map(str::to_owned),
        ],
        0..4,
    )
    .prop_map(|parts| format!("\"{}\"", parts.concat()))
    .boxed()
}

/// A key, from few enough that objects repeat them (`é` both plain and escaped).
fn key_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            r#""a""#, r#""b""#, r#""é""#, r#""\u00e9""#, r#""E""#, r#""e""#, r#""""#,
            r#""😀""#, r#""\uffff""#, r#""a!""#, r#""a b""#, r#""ab""#, r#""$x""#,
        ])
        .prop_map(str::to_owned),
        1 => string_text(),
    ]
}

/// Any JSON text, some of them numbers out of range.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        prop::sample::select(vec!["null", "true", "false"]).prop_map(str::to_owned),
        "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
        string_text(),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec((ws(), inner.clone(), ws()), 0..5).prop_map(|items| {
                let items: Vec<String> = items.into_iter().map(|(a, v, b)| a + &v + &b).collect();
                format!("[{}]", items.join(","))
            }),
            prop::collection::vec((ws(), key_text(), ws(), inner, ws()), 0..5).prop_map(
                |entries| {
                    let entries: Vec<String> = entries
                        .into_iter()
                        .map(|(a, k, b, v, c)| format!("{a}{k}{b}:{v}{c}"))
                        .collect();
                    format!("{{{}}}", entries.join(","))
                }
            ),
        ]
    })
}

/// Issue 52 finding 7: an integer beyond 64 bits was hashed as the `f64` it rounds to, so
/// the HTTP layer replayed one amount's response to another.
#[test]
fn issue52_bodies_whose_numbers_differ_past_a_doubles_precision_differ() {
    let of = |text: &str| Fingerprint::of_json_slice(text.as_bytes()).unwrap();
    for (a, b) in [
        (
            r#"{"amount_wei":18446744073709551616}"#,
            r#"{"amount_wei":18446744073709551617}"#,
        ),
        (r#"[-9223372036854775809]"#, r#"[-9223372036854775810]"#),
        (r#"{"rate":0.1}"#, r#"{"rate":0.10000000000000000001}"#),
        (r#"{"x":1e-400}"#, r#"{"x":0}"#),
        (
            r#"{"a":[1.5,{"b":123456789012345678901234567890}]}"#,
            r#"{"a":[1.5,{"b":123456789012345678901234567891}]}"#,
        ),
    ] {
        assert_ne!(of(a), of(b), "{a} and {b}");
    }
    // One value, spelled two ways (and with a number a double holds around it), is one.
    assert_eq!(
        of(r#"{"n":1.5,"amount_wei":18446744073709551617}"#),
        of(r#"{ "amount_wei": 1.8446744073709551617e19, "n": 1.50 }"#)
    );
}

proptest! {
    /// Any text, and any cut of it (mostly not JSON), fingerprints as the `Value` path's
    /// (where that path holds its numbers).
    #[test]
    fn any_text_fingerprints_as_the_value_path_does(
        text in json_text(),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = text.as_bytes();
        let wrong = differing([bytes]);
        prop_assert!(wrong.is_empty(), "{:?}", wrong);
        let cut = &bytes[..cut.index(bytes.len() + 1)];
        let wrong = differing([cut]);
        prop_assert!(wrong.is_empty(), "{:?}", wrong);
    }

    /// Two texts that differ in one number share a fingerprint only when the numbers'
    /// values are equal, however many digits they have.
    #[test]
    fn issue52_texts_differing_in_a_numbers_value_never_share_a_fingerprint(
        a in "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?",
        b in "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?",
        around in json_text(),
    ) {
        let body = |n: &str| format!(r#"{{"z":{around},"n":[{n}]}}"#);
        let (fa, fb) = (
            Fingerprint::of_json_slice(body(&a).as_bytes()),
            Fingerprint::of_json_slice(body(&b).as_bytes()),
        );
        // (`canonical` is one text per value: `exact`'s tests.)
        let same_value = super::exact::canonical(&a) == super::exact::canonical(&b);
        // (Of one value, an integer and a float are two: `1` and `1.0`, `0` and `-0`.)
        if fa.is_some() && fa == fb {
            prop_assert!(same_value, "{} and {} share a fingerprint", a, b);
        }
    }
}
