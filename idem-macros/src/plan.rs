//! The plan the expansion follows, built once by `lower` from the arguments and a tool that
//! passed every check: where the runtime is (the `__private` path), the mode the tool is served
//! in, the tool's name, its key fields as paths at the user's spans, the arguments fingerprinted,
//! the output and error types, the knobs of its `Tool`. The stages after it (`expand`,
//! `register`, `settle`, and the modes' hooks they call) read the plan, never the arguments.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use syn::{Expr, Ident, LitBool, LitStr, Type};

use crate::attr::{Args, Millis, Normalize};

/// What the expansion needs, once everything checked out.
pub(crate) struct Plan {
    /// Where generated code reaches the runtime.
    pub private: Private,
    /// Who the wrapper serves: Rust callers, rmcp's router, or rig.
    pub mode: Mode,
    /// The knobs of the tool's `Tool::new(name)`, as the attribute wrote them.
    pub knobs: Knobs,
    /// The tool's name (part of every key), when the macro knows it.
    pub name: String,
    /// The name as the expansion reads it: the literal, or a rig tool's `NAME` when the
    /// attribute does not pin one (the macro cannot see the impl's constant).
    pub name_expr: TokenStream,
    /// Whether the tool is listed in the registry (`idemkit::registry::tools()`): every tool whose name
    /// is a literal, so not a rig tool named by its `NAME` alone.
    pub registered: bool,
    pub keys: Vec<KeyField>,
    /// The arguments fingerprinted: every parameter or binding that is not a whole key field,
    /// sorted by name.
    pub fingerprint: Vec<FingerprintArg>,
    pub ok: Type,
    pub err: Type,
    /// `json`: callable by name with JSON arguments.
    pub json: Option<JsonPlan>,
    /// S20: whether an attempt whose outcome is unknown may be sent again: `resend = ...` as
    /// written, else whether the tool passes the key on: it takes the `&IdempotencyKey`, or its
    /// body sends it with `.send_idempotent()` or reads it with `current_key()` (`handed`).
    pub resend: bool,
    /// `verify = path` (S19).
    pub verify: Option<VerifyPlan>,
    /// `tenant_required = true` (S18).
    pub tenant_required: bool,
    /// `previous = "..."`: the previous derivation.
    pub previous: Option<Previous>,
}

/// Who the wrapper serves; each mode's hooks (`mode`) are called by the stages.
pub(crate) enum Mode {
    /// Rust callers: the signature as written.
    Plain,
    /// rmcp's router (`#[tool]` on the method, `mode::mcp`): the MCP hints the classification
    /// implies, in `mode::mcp::HINTS`'s order, `None` where it says nothing.
    Mcp { hints: [Option<bool>; 4] },
    /// rig (`rig` on a tool's `call`, `mode::rig`): the name pinned with `name = "..."`, which
    /// must equal the impl's `NAME`.
    Rig { pinned: Option<LitStr> },
}

/// The knobs of `Tool::new(name)`: the keyword as written (its span names the method) and the
/// value.
pub(crate) struct Knobs {
    /// `idem = expr`: the runtime to use.
    pub idem: Option<(Ident, Expr)>,
    pub retry: Option<(Ident, Expr)>,
    pub max_attempts: Option<u32>,
    pub lease: Option<Millis>,
    pub ttl: Option<Millis>,
    pub in_flight_wait: Option<Millis>,
}

/// A tool marked `json` (`mode::json`).
pub(crate) struct JsonPlan {
    /// The parameters as the fields of its arguments struct, in order.
    pub params: Vec<JsonParam>,
    /// MCP's `destructiveHint` and `openWorldHint` as written, for `JsonToolsServer`.
    pub destructive: Option<LitBool>,
    pub open_world: Option<LitBool>,
}

/// The key derivation a tool had before its key changed (`previous = "..."`): its key fields,
/// and the arguments it fingerprinted (every one that is not one of its whole key fields).
pub(crate) struct Previous {
    pub keys: Vec<KeyField>,
    pub fingerprint: Vec<FingerprintArg>,
}

/// How the verify function is called: with the tool's parameters, in order.
pub(crate) struct VerifyPlan {
    pub path: syn::ExprPath,
    /// The types the tool's parameters have, in order (`self` first): the signature the function
    /// must have. The key's borrow is left to inference (the key is lent per attempt), and an
    /// `impl Trait` type is `_`.
    pub types: Vec<TokenStream>,
    /// What each parameter is called with.
    pub args: Vec<VerifyArg>,
    /// C10's message: the signature to write.
    pub signature: String,
}

/// One argument of the verify call.
pub(crate) enum VerifyArg {
    /// `self`.
    Receiver,
    /// The attempt's key, lent.
    Key,
    /// A parameter: copied when `Copy` as written, else cloned per attempt (at its type's span).
    Param {
        ident: Ident,
        copy: bool,
        span: Span,
    },
}

/// A parameter read from a JSON call.
pub(crate) struct JsonParam {
    pub ident: Ident,
    /// The type its arguments struct holds, at the user's span.
    pub held: Type,
    /// Lent to the call (`&held`), or moved.
    pub lent: bool,
    /// An `OperationId` of a side-effect tool: not read from JSON, but the id of the operation
    /// the host put in force (`idemkit::scope::operation_scope`).
    pub host: bool,
}

pub(crate) struct KeyField {
    /// Its name in the key: the last segment of its path.
    pub name: String,
    /// The path, as tokens at the user's spans.
    pub path: TokenStream,
    /// Where a type error about it points.
    pub span: Span,
    /// Normalised first (`nfc(name)`), or byte-exact.
    pub normalize: Option<Normalize>,
}

pub(crate) struct FingerprintArg {
    pub name: String,
    pub ident: Ident,
    pub span: Span,
    /// Its fields that are key fields, left out (MCP requests only, see `mode::mcp`).
    pub except: Vec<String>,
}

/// `::idemkit::__private`, or `<crate = ...>::__private`: where generated code reaches the
/// runtime, held as separate tokens.
///
/// An expansion names it a dozen times. `quote!` appends single tokens to its output without a
/// call into the compiler, but splicing a `TokenStream` in costs two (one hands over the tokens
/// gathered so far, the other the stream): spliced as tokens, the path costs neither.
pub(crate) struct Private(Vec<TokenTree>);

impl Private {
    /// The path for these arguments (`crate = ...`, else `::idemkit`): built once per expansion,
    /// by `lower` into the plan, or by `fallback`.
    pub fn of(args: &Args) -> Self {
        let path = match &args.krate {
            Some(path) => quote::quote!(#path::__private),
            None => quote::quote!(::idemkit::__private),
        };
        Private(path.into_iter().collect())
    }
}

impl ToTokens for Private {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        tokens.extend(self.0.iter().cloned());
    }
}

impl std::fmt::Display for Private {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().cloned().collect::<TokenStream>().fmt(f)
    }
}

impl Plan {
    /// The id of the operation the host put in force, in the tool's runtime (`idem = ...`, else
    /// the one in force), as an awaited `Result<OperationId, idemkit::Error>`.
    pub fn scoped_operation(&self, name: &TokenStream) -> TokenStream {
        let private = &self.private;
        match &self.knobs.idem {
            Some((_, expr)) => quote!(#private::Idem::scoped_operation(&#expr, #name).await),
            None => quote!(#private::scoped_operation(#name).await),
        }
    }
}
