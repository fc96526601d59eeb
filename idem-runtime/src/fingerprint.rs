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
    args: serde_json::Map<String, Value>,
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
            .insert(name.to_owned(), serde_json::to_value(value)?);
        Ok(self)
    }

    /// The fingerprint of the arguments added so far.
    pub fn finish(self) -> Fingerprint {
        Fingerprint::of_value(&Value::Object(self.args))
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
                sha.update(
                    serde_json::to_string(k)
                        .expect("a string serializes")
                        .as_bytes(),
                );
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
        scalar => write_scalar(sha, scalar),
    }
}

fn write_scalar(sha: &mut Sha256, value: &Value) {
    let text = serde_json::to_string(value).expect("a JSON scalar serializes");
    sha.update(text.as_bytes());
}
