//! Numbers fingerprinted by their exact value, never by the `f64` they round to.
//!
//! A number's canonical text is the one serde_json writes without `arbitrary_precision`: an
//! integer within `u64` or `i64` as that integer, any other number as the shortest text of the
//! `f64` it reads as (`-0.0` as `0.0`). That text is kept wherever it spells the same decimal
//! value as the number's own text (`1.50`, `1e3`, `0.1`, `1e20`: every number a double holds as
//! written), so the fingerprints of such numbers never change. A number whose text it does not
//! spell (an integer beyond 64 bits such as `18446744073709551617`, a decimal of more digits
//! than a double keeps, a value beyond a double's range) would have been rounded: it is written
//! instead as its exact decimal value, normalized (`1.8446744073709551617e19`), so two numbers
//! of different values never share a text, and two spellings of one value (`1.8446744073709551617e19`,
//! `18446744073709551617`) share one.
//!
//! Every text written is a JSON number that denotes its value exactly, so two different values
//! never meet in one fingerprint, whichever of the two ways each is written.

use std::borrow::Cow;

/// A JSON number's decimal value: `digits × 10^exponent`, `digits` without leading or trailing
/// zeros (empty for zero, which has no sign).
#[derive(Debug, PartialEq, Eq)]
struct Decimal<'a> {
    negative: bool,
    digits: Cow<'a, [u8]>,
    exponent: i64,
}

/// The value of a JSON number's text; `None` when the text is not one, or its exponent is beyond
/// what an `i64` counts.
fn decimal(text: &str) -> Option<Decimal<'_>> {
    let bytes = text.as_bytes();
    let negative = bytes.first() == Some(&b'-');
    let mut at = usize::from(negative);
    let digits_of = |at: usize| {
        bytes[at..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(bytes.len(), |n| at + n)
    };
    let int_end = digits_of(at);
    let int = &bytes[at..int_end];
    if int.is_empty() {
        return None;
    }
    at = int_end;
    let mut fraction: &[u8] = &[];
    if bytes.get(at) == Some(&b'.') {
        let end = digits_of(at + 1);
        fraction = &bytes[at + 1..end];
        if fraction.is_empty() {
            return None;
        }
        at = end;
    }
    // The exponent's text, its sign and digits without leading zeros.
    let mut written: (bool, &[u8]) = (false, &[]);
    if let Some(b'e' | b'E') = bytes.get(at) {
        at += 1;
        let minus = bytes.get(at) == Some(&b'-');
        if let Some(b'+' | b'-') = bytes.get(at) {
            at += 1;
        }
        let end = digits_of(at);
        let digits = &bytes[at..end];
        if digits.is_empty() {
            return None;
        }
        written = (
            minus,
            &digits[digits.iter().take_while(|&&b| b == b'0').count()..],
        );
        at = end;
    }
    if at != bytes.len() {
        return None;
    }
    // `int` then `fraction`, the point dropped: the exponent counts the fraction's digits.
    let joined: Cow<'_, [u8]> = if fraction.is_empty() {
        Cow::Borrowed(int)
    } else {
        Cow::Owned([int, fraction].concat())
    };
    let leading = joined.iter().take_while(|&&b| b == b'0').count();
    let trailing = joined[leading..]
        .iter()
        .rev()
        .take_while(|&&b| b == b'0')
        .count();
    let significant = leading..joined.len() - trailing;
    if significant.is_empty() {
        return Some(Decimal {
            negative: false,
            digits: Cow::Borrowed(&[]),
            exponent: 0,
        });
    }
    // Kept within an i64 with room for the shifts (zero, above, has any exponent).
    if written.1.len() > 17 {
        return None;
    }
    let magnitude: i64 = std::str::from_utf8(written.1).ok()?.parse().unwrap_or(0);
    let exponent = (if written.0 { -magnitude } else { magnitude })
        - i64::try_from(fraction.len()).ok()?
        + i64::try_from(trailing).ok()?;
    let digits = match joined {
        Cow::Borrowed(b) => Cow::Borrowed(&b[significant]),
        Cow::Owned(b) => Cow::Owned(b[significant].to_vec()),
    };
    Some(Decimal {
        negative,
        digits,
        exponent,
    })
}

/// The canonical text of a JSON number's `text` that serde_json (without `arbitrary_precision`)
/// reads as an `f64` (anything but an integer within `u64` or `i64`): the `f64`'s text where it
/// spells the same value, else the exact value.
pub(crate) fn canonical(text: &str) -> Canonical {
    let value = decimal(text);
    // (Rust's reading is the nearest `f64`, whatever the number of digits.)
    if let Ok(float) = text.parse::<f64>()
        && float.is_finite()
    {
        let shortest = if float == 0.0 {
            // `-0.0` too: it equals `0.0`.
            "0.0".to_owned()
        } else {
            serde_json::to_string(&float).expect("a finite f64 serializes")
        };
        if value.is_some() && decimal(&shortest) == value {
            return Canonical::Double(shortest);
        }
    }
    Canonical::Exact(match value {
        Some(value) => exact(&value).unwrap_or_else(|| text.to_owned()),
        // An exponent beyond an i64's count: the text itself spells its value exactly.
        None => text.to_owned(),
    })
}

/// A number's canonical text, by whether a double holds it as written.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Canonical {
    /// The double's text (as serde_json writes it): the value as written.
    Double(String),
    /// The exact value, which a double would have rounded.
    Exact(String),
}

impl Canonical {
    pub(crate) fn text(&self) -> &str {
        match self {
            Canonical::Double(s) | Canonical::Exact(s) => s,
        }
    }
}

/// `d.ddde±x` (`de±x` for one digit), or `None` where the exponent leaves an i64.
fn exact(value: &Decimal<'_>) -> Option<String> {
    let digits = std::str::from_utf8(&value.digits).ok()?;
    let Some(first) = digits.get(..1) else {
        return Some("0.0".to_owned());
    };
    let rest = &digits[1..];
    let exponent = value
        .exponent
        .checked_add(i64::try_from(rest.len()).ok()?)?;
    let sign = if value.negative { "-" } else { "" };
    let point = if rest.is_empty() { "" } else { "." };
    Some(format!("{sign}{first}{point}{rest}e{exponent}"))
}

/// Whether serde_json's `Value` holds a number of this text exactly (an integer within `u64` or
/// `i64`, or a number a double holds as written).
#[cfg_attr(not(feature = "json"), allow(dead_code))]
pub(crate) fn held(text: &str) -> bool {
    text.parse::<u64>().is_ok()
        || text.parse::<i64>().is_ok()
        || matches!(canonical(text), Canonical::Double(_))
}

/// The texts of the numbers of a JSON text, in order (not those inside strings). For a text that
/// is JSON; any other gets some sequence of pieces.
#[cfg_attr(not(any(feature = "json", feature = "tower")), allow(dead_code))]
pub(crate) fn number_tokens(text: &[u8]) -> impl Iterator<Item = &str> {
    let mut at = 0;
    std::iter::from_fn(move || {
        while let Some(&b) = text.get(at) {
            match b {
                b'"' => {
                    at += 1;
                    while let Some(&c) = text.get(at) {
                        at += if c == b'\\' { 2 } else { 1 };
                        if c == b'"' {
                            break;
                        }
                    }
                }
                b'-' | b'0'..=b'9' => {
                    let start = at;
                    at += text[at..]
                        .iter()
                        .position(|c| !matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                        .unwrap_or(text.len() - at);
                    return std::str::from_utf8(&text[start..at]).ok();
                }
                _ => at += 1,
            }
        }
        None
    })
}

/// Whether serde_json's `Number`s keep the text they were read from (its `arbitrary_precision`
/// feature, which any crate in a build may switch on), asked of serde_json once per process.
pub(crate) fn numbers_keep_text() -> bool {
    static KEEP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *KEEP.get_or_init(|| {
        serde_json::from_str::<serde_json::Number>("1.50").is_ok_and(|n| n.to_string() == "1.50")
    })
}

#[cfg(test)]
mod tests {
    use super::{Canonical, canonical, decimal, held, number_tokens};
    use proptest::prelude::*;

    #[test]
    fn a_number_a_double_holds_keeps_the_doubles_text() {
        for (text, want) in [
            ("1.50", "1.5"),
            ("1e3", "1000.0"),
            ("1E+2", "100.0"),
            ("0.1", "0.1"),
            ("-0", "0.0"),
            ("-0.0e7", "0.0"),
            ("0e-999999999999999999999", "0.0"),
            ("100000000000000000000", "1e+20"),
            ("1.8446744073709552e19", "1.8446744073709552e+19"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("0.30000000000000004", "0.30000000000000004"),
        ] {
            assert_eq!(
                canonical(text),
                Canonical::Double(want.to_owned()),
                "{text}"
            );
            assert!(held(text), "{text}");
        }
    }

    #[test]
    fn a_number_a_double_would_round_is_written_exactly() {
        for (text, want) in [
            ("18446744073709551616", "1.8446744073709551616e19"),
            ("18446744073709551617", "1.8446744073709551617e19"),
            ("1.8446744073709551617e19", "1.8446744073709551617e19"),
            ("184467440737095516170e-1", "1.8446744073709551617e19"),
            ("-9223372036854775809", "-9.223372036854775809e18"),
            ("0.10000000000000000001", "1.0000000000000000001e-1"),
            ("1e400", "1e400"),
            ("-12.5e-400", "-1.25e-399"),
            ("1e-400", "1e-400"),
            // Beyond an i64's count of exponents: the text as written.
            ("1e999999999999999999999", "1e999999999999999999999"),
        ] {
            assert_eq!(canonical(text), Canonical::Exact(want.to_owned()), "{text}");
            assert!(!held(text), "{text}");
        }
        for integer in ["18446744073709551615", "-9223372036854775808", "0", "-1"] {
            assert!(held(integer), "{integer}");
        }
    }

    #[test]
    fn tokens_are_the_numbers_outside_strings() {
        let text = br#"{"a1":[1,-2.5e+3,"3 \"4\" \\",true,null,false],"b":18446744073709551617, "c" : {"-5":0}}"#;
        let tokens: Vec<&str> = number_tokens(text).collect();
        assert_eq!(tokens, ["1", "-2.5e+3", "18446744073709551617", "0"]);
    }

    /// A number's text, with or without a fraction and exponent, up to 25 digits.
    fn number_text() -> impl Strategy<Value = String> {
        "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?"
    }

    proptest! {
        /// Two numbers of different values never share a canonical text; two of one value
        /// share the double's text, or the exact one, alike.
        #[test]
        fn canonical_texts_are_one_per_value(a in number_text(), b in number_text()) {
            let (ca, cb) = (canonical(&a), canonical(&b));
            let same_value = decimal(&a).unwrap() == decimal(&b).unwrap();
            if ca.text() == cb.text() {
                prop_assert!(same_value, "{} and {} both {}", a, b, ca.text());
            }
            if same_value {
                prop_assert_eq!(ca, cb);
            }
        }

        /// Each canonical text spells the value of the number it is written for.
        #[test]
        fn a_canonical_text_spells_its_number(a in number_text()) {
            let c = canonical(&a);
            prop_assert_eq!(decimal(c.text()).unwrap(), decimal(&a).unwrap(), "{}", c.text());
        }

        /// A number one unit of its last digit away from another (past a double's precision,
        /// mostly) never shares its text.
        #[test]
        fn numbers_a_last_digit_apart_differ(digits in "[1-9][0-9]{15,30}", exp in -30i32..30) {
            let last = digits.as_bytes()[digits.len() - 1];
            let mut next = digits.clone();
            if last == b'9' {
                next.push('1');
            } else {
                next.pop();
                next.push(char::from(last + 1));
            }
            let (a, b) = (format!("{digits}e{exp}"), format!("{next}e{exp}"));
            let (ca, cb) = (canonical(&a), canonical(&b));
            prop_assert_ne!(ca.text(), cb.text(), "{} {}", a, b);
        }
    }
}
