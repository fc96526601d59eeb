//! The canonical text of a *plain* JSON text, made by copying it in one pass: a request body of
//! an HTTP API is nearly always plain, and parsing it into a tree only to write the same strings
//! and integers back out was most of its fingerprint's time.
//!
//! Plain: no escape in any string, no key that starts with `$` (serde_json's private keys start
//! so; what `Value` makes of them depends on its features), integers of at most 18 digits and no
//! `-0`, no floats, at most [`DEPTH`] levels of nesting, UTF-8. Each such part's canonical text is
//! the text itself (serde_json writes back exactly these strings and integers); objects are
//! sorted by key, a key given twice keeping its last value, as the tree path does. Anything else
//! answers `None` and goes the tree path ([`super::json`]), which decides what the text is, so
//! this path never needs to refuse a text the tree path takes or take one it refuses: the tests
//! compare the two on every text they generate.

/// Deeper than this goes the tree path (serde_json's own limit is 128).
const DEPTH: usize = 64;

/// `f` of the canonical text of `text` when `text` is plain; `None` when it is not. The text is
/// put together in this thread's scratch buffers (a body's fingerprint then allocates nothing).
pub(super) fn with_canonical<R>(text: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    use std::cell::RefCell;
    /// Past this, a buffer is not kept: an outlier body does not pin its size per thread.
    const KEPT: usize = 64 * 1024;
    thread_local! {
        static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::new()) };
    }
    let mut f = Some(f);
    let mut run = |scratch: &mut Scratch| {
        let written = canonical(text, scratch);
        let answer = written.map(|()| (f.take().expect("called once"))(&scratch.out));
        if scratch.out.capacity() > KEPT || scratch.object.capacity() > KEPT {
            *scratch = Scratch::new();
        }
        answer
    };
    match SCRATCH.try_with(|scratch| scratch.try_borrow_mut().ok().map(|mut s| run(&mut s))) {
        Ok(Some(answer)) => answer,
        // No scratch buffers (busy, or this thread's are being torn down): fresh ones.
        _ => run(&mut Scratch::new()),
    }
}

/// The buffers a canonical text is put together in.
struct Scratch {
    /// The canonical text.
    out: Vec<u8>,
    /// The entries of the objects being read, innermost last (a stack: each object's above the
    /// one it is in).
    entries: Vec<Entry>,
    /// Where an object's sorted text is put together before it replaces its entries' values.
    object: Vec<u8>,
}

impl Scratch {
    const fn new() -> Self {
        Scratch {
            out: Vec::new(),
            entries: Vec::new(),
            object: Vec::new(),
        }
    }
}

/// Writes the canonical text of `text` into `scratch.out` when `text` is plain; `None` (and the
/// scratch in any state) when it is not.
fn canonical(text: &[u8], scratch: &mut Scratch) -> Option<()> {
    scratch.out.clear();
    scratch.entries.clear();
    let mut copier = Copier {
        text,
        at: 0,
        entries: &mut scratch.entries,
        object: &mut scratch.object,
    };
    copier.value(&mut scratch.out, 0)?;
    copier.skip_whitespace();
    (copier.at == text.len()).then_some(())
}

/// One object's entry: its key (in `text`, between its quotes) and its value's canonical text
/// (in `out`).
#[derive(Clone, Copy)]
struct Entry {
    key: (usize, usize),
    value: (usize, usize),
}

struct Copier<'t, 's> {
    text: &'t [u8],
    at: usize,
    entries: &'s mut Vec<Entry>,
    object: &'s mut Vec<u8>,
}

impl Copier<'_, '_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .unwrap_or(rest.len());
    }

    /// Consumes `byte` after whitespace, or answers `None`.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_whitespace();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn value(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        self.skip_whitespace();
        match self.peek()? {
            b'{' => self.object_value(out, depth + 1),
            b'[' => self.array(out, depth + 1),
            b'"' => {
                let (start, end) = self.string()?;
                out.extend_from_slice(&self.text[start..end]);
                Some(())
            }
            b'-' | b'0'..=b'9' => self.integer(out),
            b't' => self.literal(out, b"true"),
            b'f' => self.literal(out, b"false"),
            b'n' => self.literal(out, b"null"),
            _ => None,
        }
    }

    fn literal(&mut self, out: &mut Vec<u8>, word: &[u8]) -> Option<()> {
        self.text[self.at..].starts_with(word).then_some(())?;
        self.at += word.len();
        out.extend_from_slice(word);
        Some(())
    }

    /// A string with no escape and no control character: where its text starts and ends,
    /// quotes included.
    fn string(&mut self) -> Option<(usize, usize)> {
        let start = self.at;
        let rest = &self.text[start + 1..];
        let end = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[end] != b'"' {
            return None;
        }
        // Copied as it is: it must be UTF-8, as serde_json requires. (Outside strings only ASCII
        // is taken.)
        let content = &rest[..end];
        if !content.is_ascii() {
            std::str::from_utf8(content).ok()?;
        }
        self.at = start + end + 2;
        Some((start, self.at))
    }

    /// An integer of 1 to 18 digits (within `i64` and `u64` alike), no leading zero, not `-0`,
    /// not followed by a fraction or an exponent.
    fn integer(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let digits = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        let count = self.at - digits;
        let first = *self.text.get(digits)?;
        if count == 0 || count > 18 || (first == b'0' && (count > 1 || digits > start)) {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return None;
        }
        out.extend_from_slice(&self.text[start..self.at]);
        Some(())
    }

    fn array(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        if depth > DEPTH {
            return None;
        }
        self.at += 1;
        out.push(b'[');
        self.skip_whitespace();
        if self.peek()? == b']' {
            self.at += 1;
            out.push(b']');
            return Some(());
        }
        loop {
            self.value(out, depth)?;
            self.skip_whitespace();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    out.push(b',');
                }
                b']' => {
                    self.at += 1;
                    out.push(b']');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An object: its entries' values written to `out` as they come, then replaced by the
    /// object's text, sorted by key.
    fn object_value(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        if depth > DEPTH {
            return None;
        }
        self.at += 1;
        let base = self.entries.len();
        let start = out.len();
        self.skip_whitespace();
        if self.peek()? == b'}' {
            self.at += 1;
            out.extend_from_slice(b"{}");
            return Some(());
        }
        loop {
            self.skip_whitespace();
            if self.peek()? != b'"' {
                return None;
            }
            let (open, close) = self.string()?;
            let key = (open + 1, close - 1);
            if self.text.get(key.0) == Some(&b'$') {
                return None;
            }
            self.expect(b':')?;
            let from = out.len();
            self.value(out, depth)?;
            self.entries.push(Entry {
                key,
                value: (from, out.len()),
            });
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    break;
                }
                _ => return None,
            }
        }
        let text = self.text;
        let key = |e: &Entry| &text[e.key.0..e.key.1];
        // Stable, so of a key given twice the last stays last: the one written. (Keys hold no
        // escape, so their texts compare as their strings do.)
        self.entries[base..].sort_by(|a, b| key(a).cmp(key(b)));
        self.object.clear();
        self.object.push(b'{');
        let entries = &self.entries[base..];
        for (i, entry) in entries.iter().enumerate() {
            if entries
                .get(i + 1)
                .is_some_and(|next| key(next) == key(entry))
            {
                continue;
            }
            if self.object.len() > 1 {
                self.object.push(b',');
            }
            self.object.push(b'"');
            self.object.extend_from_slice(key(entry));
            self.object.extend_from_slice(b"\":");
            self.object
                .extend_from_slice(&out[entry.value.0..entry.value.1]);
        }
        self.object.push(b'}');
        self.entries.truncate(base);
        out.truncate(start);
        out.extend_from_slice(self.object);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::with_canonical;

    fn copied(text: &str) -> Option<String> {
        with_canonical(text.as_bytes(), |out| {
            String::from_utf8(out.to_vec()).unwrap()
        })
    }

    /// What an API's body is like takes this path, and comes out canonical.
    #[test]
    fn plain_texts_are_copied_in_canonical_form() {
        let cases = [
            (
                r#"{"customer":"cus_1","amount_cents":4200}"#,
                r#"{"amount_cents":4200,"customer":"cus_1"}"#,
            ),
            (
                " { \"b\" : [ 1 , { \"z\" : null , \"a\" : true } ] , \"a\" : -17 }\n",
                r#"{"a":-17,"b":[1,{"a":true,"z":null}]}"#,
            ),
            (
                r#"{"a":1,"b":2,"a":{"y":[],"x":{}}}"#,
                r#"{"a":{"x":{},"y":[]},"b":2}"#,
            ),
            // A key that another begins: the shorter first, whatever follows it (` ` and `!`
            // sort before the quote that would end it).
            (r#"{"a!":1,"a b":2,"a":3}"#, r#"{"a":3,"a b":2,"a!":1}"#),
            (
                r#"["日本語 😀","é",0,false]"#,
                r#"["日本語 😀","é",0,false]"#,
            ),
            ("999999999999999999", "999999999999999999"),
        ];
        for (text, want) in cases {
            assert_eq!(copied(text).as_deref(), Some(want), "{text}");
        }
    }

    /// What it does not copy goes the tree path.
    #[test]
    fn other_texts_are_left_to_the_tree_path() {
        for text in [
            r#"{"a":"\n"}"#,
            r#"{"\u00e9":1}"#,
            r#"{"$serde_json::private::Number":"1"}"#,
            "1.5",
            "1e3",
            "-0",
            "0123",
            "1234567890123456789",
            "[1,]",
            "{\"a\":1}x",
            "\"tab\there\"",
            "",
            "[1,\u{e9}]",
        ] {
            assert_eq!(copied(text), None, "{text}");
        }
        // Bytes that are not UTF-8, in a string, in a key, outside any string.
        for bytes in [
            &b"\"\xff\""[..],
            b"{\"\xc3\":1}",
            b"[1,\xff]",
            b"\"\xe6\x97\"",
        ] {
            assert_eq!(with_canonical(bytes, |_| ()), None, "{bytes:?}");
        }
        let deep = format!("{}1{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(copied(&deep), None);
        let deep_enough = format!("{}1{}", "[".repeat(64), "]".repeat(64));
        assert!(copied(&deep_enough).is_some());
    }
}
