//! Fingerprints of the arguments that are not key fields.
//!
//! Two calls with the same key must be the same operation: the fingerprint (SHA-256 of the
//! arguments' canonical JSON, object keys sorted at every depth) tells a retry from a key reused
//! for something else, which is refused as [`Error::KeyReuse`](crate::Error::KeyReuse).

use std::fmt;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 of the canonical JSON of a call's other arguments.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of any serializable value, via its canonical JSON.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        let value = serde_json::to_value(value)?;
        Ok(Self::of_value(&value))
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
    // finished, so no map is built.
    args: Vec<(String, Value)>,
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
        self.args
            .push((name.to_owned(), serde_json::to_value(value)?));
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
            write_json(&mut sha, name);
            sha.update(b":");
            write_canonical(&mut sha, value);
        }
        sha.update(b"}");
        Fingerprint(sha.finalize().into())
    }
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
        scalar => write_json(sha, scalar),
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
