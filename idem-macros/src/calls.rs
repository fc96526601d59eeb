//! The calls a body's tokens make, found as a syntax tree walk would find them: what C4 looks
//! for (`minted`), and the calls through which a body hands its key on (`handed`, S20).
//!
//! The body is kept as tokens (`ast::Func`), so this is a scan of them rather than a walk of a
//! syntax tree: a call is a path followed by parentheses (`uuid::Uuid::new_v4()`,
//! `rand::random::<u64>()`), a macro call a path followed by `!`. It looks where a syntax tree
//! walk would: everywhere in the body (closures and items inside it too), and inside a macro's
//! arguments only when they are expressions (`format!("{}", Uuid::new_v4())`), not inside other
//! macro input (`tracing::info!(id = %Uuid::new_v4())`, a `macro_rules!`), nor attributes.

use proc_macro2::{Delimiter, Ident, Spacing, TokenStream, TokenTree};
use syn::Token;
use syn::parse::Parser;
use syn::punctuated::Punctuated;

/// A place in the body that calls something.
pub(crate) enum Site<'a> {
    /// `a::b::c(...)`: the path's segments (generic arguments skipped).
    Call(&'a [&'a Ident]),
    /// `name!(...)` (or `macro_rules! name { ... }`): the macro's path's segments.
    Macro(&'a [&'a Ident]),
}

/// What `pick` makes of each call site in `tokens`, where it makes something, in order. `pick`
/// is handed the site and its tokens (the path to the arguments' group, for an error's span).
/// A macro call that `pick` takes is not looked into.
pub(crate) fn find<T>(
    tokens: TokenStream,
    pick: &mut impl FnMut(Site<'_>, &[TokenTree]) -> Option<T>,
) -> Vec<T> {
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
                    found.extend(find(group.stream(), pick));
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
                        if let Some(picked) = pick(Site::Macro(&segments), &tokens[start..=input]) {
                            found.push(picked);
                            continue;
                        }
                        let inside = find(args.stream(), pick);
                        if !inside.is_empty() && are_expressions(args.stream()) {
                            found.extend(inside);
                        }
                    }
                    Some(TokenTree::Group(args)) if args.delimiter() == Delimiter::Parenthesis => {
                        if let Some(picked) = pick(Site::Call(&segments), &tokens[start..=end]) {
                            found.push(picked);
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
