//! C4: a key minted in the body (`Uuid::new_v4()`, `nanoid!()`), found among the calls its
//! tokens make (`calls`): a call whose path's last two segments name what it mints
//! (`uuid::Uuid::new_v4()`, `rand::random::<u64>()`), or `nanoid!(...)`.

use proc_macro2::TokenStream;

use crate::calls::Site;
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
    crate::calls::find(tokens, &mut |site, tokens| {
        let kind = match site {
            Site::Macro([.., name]) if *name == "nanoid" => Kind::Nanoid,
            Site::Call([.., ty, f]) => {
                let f = f.to_string();
                if !MINTS.iter().any(|(t, m)| f == *m && ty == t) {
                    return None;
                }
                // The path as written, without its arguments.
                let written: TokenStream = tokens[..tokens.len() - 1].iter().cloned().collect();
                Kind::Call(written.to_string().replace(' ', ""))
            }
            Site::Macro(_) | Site::Call(_) => return None,
        };
        Some(Mint {
            tokens: tokens.iter().cloned().collect(),
            kind,
        })
    })
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
