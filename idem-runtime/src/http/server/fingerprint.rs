//! A request's fingerprint: method, path and query, and its body (canonical for JSON and forms).

use crate::fingerprint::Fingerprint;
use http::header::CONTENT_TYPE;
use http::request::Parts;
use sha2::{Digest, Sha256};

/// The request's fingerprint: method, path and query, body. A JSON body (`application/json`,
/// `…+json`) counts by its canonical form (object keys sorted, whitespace insignificant, as a
/// tool's arguments are fingerprinted), a form body (`application/x-www-form-urlencoded`) by its
/// decoded pairs sorted by name; any other body, or one that does not parse, by its bytes.
pub(super) fn fingerprint(parts: &Parts, body: &[u8]) -> Fingerprint {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    // The media type's essence; its case is not significant.
    let essence = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map_or("", str::trim);
    let json = essence.eq_ignore_ascii_case("application/json")
        || super::body::ends_with_ignore_case(essence, "+json");
    let canonical = if json {
        Fingerprint::of_json_slice(body)
    } else if essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        Some(form_fingerprint(body))
    } else {
        None
    };
    // Bytes keep the first version's tag, so records of byte bodies still match.
    let (tag, body) = match &canonical {
        Some(canonical) => (
            b"idemkit:http:v2:canonical".as_slice(),
            canonical.0.as_slice(),
        ),
        None => (b"idemkit:http:v1".as_slice(), body),
    };
    let mut hasher = Sha256::new();
    for part in [
        tag,
        parts.method.as_str().as_bytes(),
        target.as_bytes(),
        body,
    ] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    Fingerprint(hasher.finalize().into())
}

/// A form body's pairs, percent-decoded and sorted by name (a name given twice keeps its
/// values' order), as a JSON list of pairs.
pub(super) fn form_fingerprint(body: &[u8]) -> Fingerprint {
    let mut pairs: Vec<(String, String)> = body
        .split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let mut halves = pair.splitn(2, |&b| b == b'=');
            let name = form_decode(halves.next().unwrap_or_default());
            (name, form_decode(halves.next().unwrap_or_default()))
        })
        .collect();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    Fingerprint::of_value(&serde_json::json!(pairs))
}

/// `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` a byte.
pub(super) fn form_decode(part: &[u8]) -> String {
    let mut out = Vec::with_capacity(part.len());
    let mut i = 0;
    while i < part.len() {
        match part[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < part.len() => {
                match std::str::from_utf8(&part[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
