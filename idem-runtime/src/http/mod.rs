//! HTTP both ways: the key on the wire to any provider, and a tower layer that gives an API the
//! semantics of the IETF draft "The Idempotency-Key HTTP Header Field" (draft-ietf-httpapi-
//! idempotency-key-header-09) and of Stripe.
//!
//! - **Client** (feature `reqwest`, for reqwest 0.13): [`IdempotentRequest::send_idempotent`] sends a request made
//!   inside a side effect's body with the call's key as `Idempotency-Key` (a structured-field
//!   string: `Idempotency-Key: "32e00e40-…"`), the tool writing nothing, and answers an
//!   [`HttpError`] that [`Classify`](crate::Classify)s the way the retry policy needs: refused
//!   before sending → transient, timeout or reset after sending → ambiguous, 429/503 → transient
//!   or `RetryAfter`, 409 → in flight, 422 → key reused (permanent), other 4xx permanent, other
//!   5xx ambiguous.
//! - **Server** (feature `tower`): [`IdempotencyLayer`] stores the first response to a keyed
//!   request (status, chosen headers, body) under the key and the request's scope, through the
//!   same claim, lease, renewal and fencing as a tool call (its records are what `idemkit show` and
//!   `idemkit list` print), and answers repeats with it, marked `Idempotent-Replayed: true`;
//!   422 for another payload under the key, 409 while the first is in flight, 400 for a missing
//!   key where one is required, 413 for a body over the bound.
//!
//! `docs/http.md` holds the draft's requirements against what each side does, with the test of
//! each.

#[cfg(feature = "reqwest")]
pub(crate) mod client;
#[cfg(feature = "tower")]
mod server;

#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub use self::client::{HttpError, IdempotentRequest, current_key};
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use self::server::{IdempotencyLayer, IdempotencyService, Prefixed, ResponseBody};

/// The request header that carries the key (draft-09 §2): `Idempotency-Key`, lowercase as the
/// `http` crate spells header names.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The longest key the layer takes, in characters (Stripe's bound): a longer one, or an empty
/// one, is refused with `400` saying so (S29), never one record shared by all such requests.
pub const MAX_KEY_LENGTH: usize = 255;

/// The response header that marks a replayed response: `Idempotent-Replayed: true`, as Stripe
/// sends it (the draft names no marker).
pub const REPLAYED: &str = "idempotent-replayed";

/// `value` as a structured-field string (RFC 8941 §3.3.3, what draft-09 makes the key): quoted,
/// `\` and `"` escaped. `None` when it holds a character an sf-string cannot (outside printable
/// ASCII).
pub fn sf_string(value: &str) -> Option<String> {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => return None,
        }
    }
    out.push('"');
    Some(out)
}

/// The key an `Idempotency-Key` header value carries: an sf-string unquoted and unescaped. A bare
/// token (no quotes, as clients written before the draft send it, Stripe's among them) is taken
/// as it is. `None` when the value is neither, or empty.
pub fn parse_sf_string(value: &[u8]) -> Option<String> {
    let value = value.trim_ascii();
    let Some(inner) = value.strip_prefix(b"\"") else {
        // A bare token: visible ASCII, no quote, no backslash, no separator of a list.
        let ok = !value.is_empty()
            && value
                .iter()
                .all(|&b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b','));
        return ok.then(|| String::from_utf8_lossy(value).into_owned());
    };
    let mut out = String::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(e as char),
                _ => return None,
            },
            // The closing quote ends the string, and nothing may follow it.
            b'"' => return (bytes.len() == 0 && !out.is_empty()).then_some(out),
            b' '..=b'~' => out.push(b as char),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{parse_sf_string, sf_string};

    #[test]
    fn keys_are_sf_strings_both_ways() {
        let key = "32e00e40-1a53-8058-93c7-e9d1adc8ecaa";
        let quoted = sf_string(key).unwrap();
        assert_eq!(quoted, format!("\"{key}\""));
        assert_eq!(parse_sf_string(quoted.as_bytes()).as_deref(), Some(key));
        assert_eq!(
            sf_string(r#"a"b\c"#).as_deref(),
            Some(r#""a\"b\\c""#),
            "quotes and backslashes are escaped"
        );
        assert_eq!(
            parse_sf_string(br#""a\"b\\c""#).as_deref(),
            Some(r#"a"b\c"#)
        );
        assert_eq!(sf_string("caf\u{e9}"), None);
    }

    #[test]
    fn a_bare_token_is_taken_and_malformed_values_are_not() {
        assert_eq!(parse_sf_string(b"abc-123").as_deref(), Some("abc-123"));
        for bad in [
            &b""[..],
            b"\"\"",
            b"\"open",
            b"\"a\" trailing",
            b"\"bad\\escape\"",
            b"a,b",
            b"\"tab\there\"",
        ] {
            assert_eq!(
                parse_sf_string(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
