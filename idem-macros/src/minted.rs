//! C4: a key minted in the body (`Uuid::new_v4()`, `nanoid!()`), found in the body's tokens.
//!
//! The body is kept as tokens (`ast::Func`), so this is a scan of them rather than a walk of a
//! syntax tree: a call is a path followed by parentheses, and the path's last two segments name
//! what it mints (`uuid::Uuid::new_v4()`, `rand::random::<u64>()`). It looks where a syntax tree
//! walk would: everywhere in the body (closures and items inside it too), and inside a macro's
//! arguments only when they are expressions (`format!("{}", Uuid::new_v4())`), not inside other
//! macro input (`tracing::info!(id = %Uuid::new_v4())`, a `macro_rules!`), nor attributes.

use proc_macro2::{Delimiter, Ident, Spacing, TokenStream, TokenTree};
use syn::Token;
use syn::parse::Parser;
use syn::punctuated::Punctuated;

use crate::ctxt::Ctxt;

/// Calls that mint a fresh identifier: inside the body they run once per attempt.
const MINTS: &[(&str, &str)] = &[
    ("Uuid", "new_v4"),
    ("Uuid", "new_v7"),
    ("Uuid", "now_v7"),
    ("Uuid", "now_v6"),
    ("Uuid", "now_v1"),
    ("IdempotencyKey", "random"),
    ("IdempotencyKey", "new"),
    ("IdempotencyKey", "new_v4"),
    ("OperationId", "new"),
    ("OperationId", "random"),
    ("Ulid", "new"),
    ("Ulid", "generate"),
    ("rand", "random"),
    ("nanoid", "nanoid"),
];

/// Records an error at every key minted in `body`.
pub(crate) fn check(cx: &Ctxt, body: &TokenStream) {
    for mint in find(body.clone()) {
        let message = match &mint.kind {
            Kind::Call(path) => format!(
                "`{path}()` mints a new identifier on every attempt, and a fresh key per attempt dedupes nothing: \
                 a retry after a lost response would act again. Take the key derived once from the key fields \
                 (add a `key: &IdempotencyKey` parameter), or key on an `OperationId` from `idem.operation(\"...\")`"
            ),
            Kind::Nanoid => "`nanoid!()` mints a new identifier on every attempt, and a fresh key per attempt dedupes nothing; \
                 take the key derived once from the key fields (add a `key: &IdempotencyKey` parameter)"
                .to_owned(),
        };
        cx.error_spanned(mint.tokens, message);
    }
}

/// One minting call: its tokens (for the error's span) and what it is.
struct Mint {
    tokens: TokenStream,
    kind: Kind,
}

enum Kind {
    /// A call of this path, as written without spaces (`uuid::Uuid::new_v4`).
    Call(String),
    /// `nanoid!(...)`.
    Nanoid,
}

/// Every minting call in `tokens`, in order.
fn find(tokens: TokenStream) -> Vec<Mint> {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(group) => {
                // `#[...]` and `#![...]`: an attribute's input is not code the attempt runs.
                let attribute = group.delimiter() == Delimiter::Bracket
                    && i > 0
                    && (is_punct(&tokens[i - 1], '#')
                        || (is_punct(&tokens[i - 1], '!')
                            && i > 1
                            && is_punct(&tokens[i - 2], '#')));
                if !attribute {
                    found.extend(find(group.stream()));
                }
                i += 1;
            }
            TokenTree::Ident(_) => {
                // A leading `::` belongs to the path (`::uuid::Uuid::new_v4()`).
                let start = if i >= 2 && is_path_sep(&tokens[i - 2], &tokens[i - 1]) {
                    i - 2
                } else {
                    i
                };
                let (segments, end) = path(&tokens, i);
                i = end;
                let last = *segments.last().expect("a path has a segment");
                match tokens.get(end) {
                    // A macro call: `name!(...)`, or `macro_rules! name { ... }`; not a keyword
                    // before a negation (`if !cached { ... }`: the block is code, scanned below).
                    Some(bang)
                        if is_punct(bang, '!') && !NEGATED_AFTER.iter().any(|k| last == k) =>
                    {
                        let input = match tokens.get(end + 1) {
                            Some(TokenTree::Ident(_))
                                if segments.len() == 1 && last == "macro_rules" =>
                            {
                                end + 2
                            }
                            _ => end + 1,
                        };
                        let Some(TokenTree::Group(args)) = tokens.get(input) else {
                            continue;
                        };
                        i = input + 1;
                        if last == "nanoid" {
                            found.push(Mint {
                                tokens: tokens[start..=input].iter().cloned().collect(),
                                kind: Kind::Nanoid,
                            });
                            continue;
                        }
                        let inside = find(args.stream());
                        if !inside.is_empty() && are_expressions(args.stream()) {
                            found.extend(inside);
                        }
                    }
                    Some(TokenTree::Group(args)) if args.delimiter() == Delimiter::Parenthesis => {
                        if let [.., ty, f] = segments.as_slice()
                            && let f = f.to_string()
                            && MINTS.iter().any(|(t, m)| f == *m && ty == t)
                        {
                            let written: TokenStream = tokens[start..end].iter().cloned().collect();
                            found.push(Mint {
                                tokens: tokens[start..=end].iter().cloned().collect(),
                                kind: Kind::Call(written.to_string().replace(' ', "")),
                            });
                        }
                        // The arguments are scanned as the next token.
                    }
                    _ => {}
                }
            }
            TokenTree::Punct(_) | TokenTree::Literal(_) => i += 1,
        }
    }
    found
}

/// Keywords a `!` may follow as a negation, not as a macro call (`if !done`, `return !ok`).
const NEGATED_AFTER: &[&str] = &["if", "while", "match", "return", "break", "in", "yield"];

/// The path starting at the identifier `tokens[i]`: its segments (generic arguments skipped,
/// `random::<u64>` is `random`) and the index just past it. The segments stay identifiers: most
/// paths are never compared, and each comparison turns one into text.
fn path(tokens: &[TokenTree], mut i: usize) -> (Vec<&Ident>, usize) {
    let mut segments = Vec::new();
    while let Some(TokenTree::Ident(ident)) = tokens.get(i) {
        segments.push(ident);
        i += 1;
        // `::<...>`, turbofish arguments.
        if is_sep_at(tokens, i) && matches!(tokens.get(i + 2), Some(t) if is_punct(t, '<')) {
            i = past_generics(tokens, i + 2);
        }
        if is_sep_at(tokens, i) && matches!(tokens.get(i + 2), Some(TokenTree::Ident(_))) {
            i += 2;
        } else {
            break;
        }
    }
    (segments, i)
}

/// The index just past the `<...>` that opens at `tokens[open]` (`->` inside is no bracket).
fn past_generics(tokens: &[TokenTree], open: usize) -> usize {
    let mut depth = 0usize;
    let mut i = open;
    while let Some(t) = tokens.get(i) {
        if is_punct(t, '<') {
            depth += 1;
        } else if is_punct(t, '>') && !(i > 0 && is_joint(&tokens[i - 1], '-')) {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    i
}

/// Whether a macro's input is a list of expressions, as `format!`'s and `vec!`'s are.
fn are_expressions(input: TokenStream) -> bool {
    Punctuated::<syn::Expr, Token![,]>::parse_terminated
        .parse2(input)
        .is_ok()
}

fn is_punct(t: &TokenTree, c: char) -> bool {
    matches!(t, TokenTree::Punct(p) if p.as_char() == c)
}

fn is_joint(t: &TokenTree, c: char) -> bool {
    matches!(t, TokenTree::Punct(p) if p.as_char() == c && p.spacing() == Spacing::Joint)
}

/// `::` as two tokens.
fn is_path_sep(first: &TokenTree, second: &TokenTree) -> bool {
    is_joint(first, ':') && is_punct(second, ':')
}

fn is_sep_at(tokens: &[TokenTree], i: usize) -> bool {
    matches!((tokens.get(i), tokens.get(i + 1)), (Some(a), Some(b)) if is_path_sep(a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn shown(body: TokenStream) -> Vec<String> {
        find(body)
            .into_iter()
            .map(|m| match m.kind {
                Kind::Call(path) => path,
                Kind::Nanoid => "nanoid!".to_owned(),
            })
            .collect()
    }

    #[test]
    fn c4_finds_minting_calls_where_a_syntax_tree_walk_would() {
        let body = quote! {
            let a = uuid::Uuid::new_v4();
            let b = ::uuid::Uuid::now_v7();
            let c = rand::random::<u64>();
            let d = format!("{}-{}", a, Ulid::new());
            let e = items.iter().map(|_| IdempotencyKey::random()).collect::<Vec<_>>();
            fn inner() -> String { nanoid::nanoid() }
            let f = nanoid!(10);
            let g = vec![OperationId::new(), other(Uuid::new_v4())];
            if !cached { let h = Uuid::new_v7(); }
            while !(done) { rand::random::<u8>(); }
        };
        assert_eq!(
            shown(body),
            [
                "uuid::Uuid::new_v4",
                "::uuid::Uuid::now_v7",
                "rand::random::<u64>",
                "Ulid::new",
                "IdempotencyKey::random",
                "nanoid::nanoid",
                "nanoid!",
                "OperationId::new",
                "Uuid::new_v4",
                "Uuid::new_v7",
                "rand::random::<u8>",
            ]
        );
    }

    #[test]
    fn c4_leaves_alone_what_a_syntax_tree_walk_would() {
        let body = quote! {
            // Not calls: a path as a value, a method of that name, a qualified path's last segment.
            let make = uuid::Uuid::new_v4;
            let a = generator.new_v4();
            let b = <Uuid>::new_v4();
            // Not minting: other types' `new`, a type's generics.
            let c = Vec::<Uuid>::new();
            let d = HashMap::<String, Box<dyn Fn() -> Uuid>>::new();
            // Macro input that is not expressions, and attributes.
            tracing::info!(id = %Uuid::new_v4(), "made");
            macro_rules! fresh { () => { Uuid::new_v4() } }
            #[fixture(Uuid::new_v4())]
            let e = 1;
            let f = "Uuid::new_v4()";
        };
        assert!(shown(body).is_empty());
    }
}
