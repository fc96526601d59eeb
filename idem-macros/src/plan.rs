//! The plan the expansion follows, built once by `lower` from a tool that passed every check:
//! the tool's name, its key fields as paths at the user's spans, the arguments fingerprinted, the
//! output and error types.

use proc_macro2::{Span, TokenStream};
use syn::{Ident, Type};

use crate::attr::Normalize;

/// What the expansion needs, once everything checked out.
pub(crate) struct Plan {
    /// The tool's name (part of every key), when the macro knows it.
    pub name: String,
    /// The name as the expansion reads it: the literal, or a rig tool's `NAME` when the
    /// attribute does not pin one (the macro cannot see the impl's constant).
    pub name_expr: TokenStream,
    /// Whether the tool is listed in the registry (`idemkit::tools()`): every tool whose name
    /// is a literal, so not a rig tool named by its `NAME` alone.
    pub registered: bool,
    pub keys: Vec<KeyField>,
    /// The arguments fingerprinted: every parameter or binding that is not a whole key field,
    /// sorted by name.
    pub fingerprint: Vec<FingerprintArg>,
    pub ok: Type,
    pub err: Type,
    /// `json`: the parameters as the fields of its arguments struct, in order.
    pub json: Option<Vec<JsonParam>>,
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
    /// the host put in force (`idemkit::operation_scope`).
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
