//! What a model is told a tool does: its doc comment's summary and body, as prose. Rustdoc's
//! sections for Rust readers (`# Errors`, `# Panics`, `# Examples`, `# Safety`) are left out,
//! and intra-doc links keep only their text (`[`Receipt`]` → `Receipt`, `[the docs](crate::x)` →
//! `the docs`): a model cannot follow a Rust path, and pedantic clippy requires `# Errors` on
//! every public tool.

use syn::{Attribute, Meta};

/// The rustdoc sections a model is not shown.
const RUST_SECTIONS: [&str; 4] = ["errors", "panics", "examples", "safety"];

/// The doc comment's lines, the one space after `///` dropped.
pub(crate) fn doc_lines(attrs: &[Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .flat_map(|doc| {
            // `split`, not `lines`: an empty `///` is a paragraph break, one empty line.
            doc.split('\n')
                .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end().to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The model-facing description of a tool whose doc comment is `attrs`.
pub(crate) fn description(attrs: &[Attribute]) -> String {
    model_text(&doc_lines(attrs))
}

/// The heading's title, when `line` is a Markdown ATX heading (`# Errors`, `## Notes`).
fn heading(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    let hashes = trimmed.len() - trimmed.trim_start_matches('#').len();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &trimmed[hashes..];
    (rest.is_empty() || rest.starts_with(' ')).then(|| rest.trim().trim_end_matches('#').trim())
}

/// Whether `line` opens or closes a fenced code block.
fn fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// `lines` without the Rust readers' sections and link syntax, blank runs collapsed, trimmed.
pub(crate) fn model_text(lines: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut in_code = false;
    let mut rust_code = false;
    let mut skipping = false;
    for line in lines {
        if fence(line) {
            if !in_code {
                let info = line.trim_start().trim_start_matches(['`', '~']).trim();
                rust_code = info.is_empty() || info.split(',').any(|w| w.trim() == "rust");
            }
            in_code = !in_code;
            if !skipping {
                out.push(line.clone());
            }
            continue;
        }
        if in_code {
            // A doctest's hidden lines (`# use ...;`) are not shown to readers either.
            let hidden = rust_code && (line.trim() == "#" || line.trim_start().starts_with("# "));
            if !skipping && !hidden {
                out.push(line.clone());
            }
            continue;
        }
        if let Some(title) = heading(line) {
            skipping = RUST_SECTIONS.contains(&title.to_ascii_lowercase().as_str());
            if skipping {
                continue;
            }
        }
        if skipping || link_definition(line) {
            continue;
        }
        out.push(unlink(line));
    }
    let mut text = String::new();
    let mut blank = false;
    for line in out {
        if line.trim().is_empty() {
            blank = true;
            continue;
        }
        if !text.is_empty() {
            text.push_str(if blank { "\n\n" } else { "\n" });
        }
        blank = false;
        text.push_str(&line);
    }
    text
}

/// `[name]: target`, a reference link's definition.
fn link_definition(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with('[') && t.find("]:").is_some_and(|i| !t[1..i].contains(']'))
}

/// Whether `text` is a Rust path (`Foo`, `crate::Foo::bar`, `Vec::new()`, `macro@x`).
fn rust_path(text: &str) -> bool {
    let text = text
        .trim_end_matches("()")
        .trim_end_matches('!')
        .rsplit('@')
        .next()
        .unwrap_or("");
    !text.is_empty()
        && text.split("::").all(|seg| {
            let mut chars = seg.chars();
            chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
                && chars.all(|c| c.is_alphanumeric() || c == '_')
        })
}

/// A line with its links' syntax dropped: `[text](target)` and `[text][ref]` → `text`,
/// `` [`Path`] `` → `Path`, `[Path]` → `Path`. Other brackets (`items[0]`, `[1, 2]`) stay.
fn unlink(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(open) = rest.find('[') {
        let before = &rest[..open];
        out.push_str(before);
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let inner = &after[..close];
        let tail = &after[close + 1..];
        let glued = before
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        let target_end = |open: char, close: char| {
            tail.strip_prefix(open)
                .and_then(|t| t.find(close).map(|i| i + 2))
        };
        let text = inner
            .strip_prefix('`')
            .and_then(|t| t.strip_suffix('`'))
            .unwrap_or(inner);
        if !inner.contains('[')
            && let Some(skip) = target_end('(', ')').or_else(|| target_end('[', ']'))
        {
            out.push_str(text);
            rest = &tail[skip..];
        } else if !glued
            && !inner.contains('[')
            && (inner.starts_with('`') || rust_path(inner))
            && rust_path(text)
        {
            out.push_str(text);
            rest = tail;
        } else {
            out.push('[');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::{model_text, unlink};

    fn text(doc: &str) -> String {
        let lines: Vec<String> = doc.lines().map(str::to_owned).collect();
        model_text(&lines)
    }

    #[test]
    fn rustdoc_sections_are_left_out() {
        let doc = "Refunds an order once.\n\nThe amount is in cents.\n\n# Errors\nWhen the order does not exist.\n\n# Panics\nNever.\n\n## Limits\nAt most 500 euros.\n\n# Examples\n```\n# use x::y;\nrefund(1).await?;\n# Safety\n```\n\n# Safety\nNone.";
        assert_eq!(
            text(doc),
            "Refunds an order once.\n\nThe amount is in cents.\n\n## Limits\nAt most 500 euros."
        );
    }

    #[test]
    fn headings_inside_code_are_code() {
        let doc = "Runs a script.\n\n```sh\n# Errors are logged\nrun\n```";
        assert_eq!(
            text(doc),
            "Runs a script.\n\n```sh\n# Errors are logged\nrun\n```"
        );
    }

    #[test]
    fn links_keep_their_text() {
        assert_eq!(unlink("Returns a [`Receipt`]."), "Returns a Receipt.");
        assert_eq!(
            unlink("See [the policy](crate::policy) first."),
            "See the policy first."
        );
        assert_eq!(unlink("See [the policy][policy]."), "See the policy.");
        assert_eq!(
            unlink("Calls [`Store::claim()`] and [Idem]."),
            "Calls Store::claim() and Idem."
        );
        assert_eq!(
            unlink("items[0] and [1, 2] and [a b]"),
            "items[0] and [1, 2] and [a b]"
        );
        assert_eq!(
            text("A [`Receipt`].\n\n[policy]: crate::policy"),
            "A Receipt."
        );
    }

    #[test]
    fn a_doc_without_sections_is_unchanged() {
        assert_eq!(
            text("Charges a customer.\nOnce per period."),
            "Charges a customer.\nOnce per period."
        );
        assert_eq!(text(""), "");
    }
}
