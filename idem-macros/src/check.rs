//! Every semantic check (C1, C2, C4–C7, C9 of the contract), apart from code generation: each
//! failure is recorded in the `Ctxt`; nothing is built here (that is `lower`). What a mode refuses
//! is its own check hook (`mode::mcp::check`, `mode::json::check`, `mode::rig::check`), called
//! from here in a fixed order.
//!
//! C3 (a key field that is not `KeyPart`), C8 (the error or output type lacks a trait), C10 (a
//! `verify` function whose signature does not fit) and a misspelt field inside a struct
//! (`args.custmer_id`) are left to rustc: the expansion touches each at the user's span, so
//! rustc's own error, with the `#[diagnostic::on_unimplemented]` text of the trait it names,
//! points at the right token.

use std::collections::BTreeMap;

use proc_macro2::Span;
use quote::{ToTokens, quote};
use syn::ext::IdentExt;
use syn::{Ident, Type};

use crate::ast::{self, Kind, Role, Tool};
use crate::attr::{Args, KeyPath};
use crate::ctxt::Ctxt;
use crate::mode::mcp::boxed_by_tool;
use crate::suggest::closest;

/// Runs every check, recording each failure in `cx`.
pub(crate) fn check(cx: &Ctxt, args: &Args, tool: &Tool) {
    if tool.item.sig.asyncness.is_none() && boxed_by_tool(&tool.item.sig) {
        // Below rmcp's `#[tool]`: every other check would misread rmcp's output (no `#[tool]` to
        // take `destructive`, a boxed future for a result), so the order is the one error.
        signature(cx, tool);
        return;
    }
    arguments(cx, args, tool.kind);
    crate::mode::mcp::check(cx, args, tool);
    signature(cx, tool);
    output(cx, tool);
    crate::mode::json::check(cx, args, tool);
    crate::mode::rig::check(cx, args, tool);
    if tool.kind == Kind::SideEffect {
        crate::minted::check(cx, &tool.item.body);
        if let Some(key) = &args.key {
            key_paths(cx, tool, key, Which::Key);
        }
        previous(cx, args, tool);
        impl_trait_arguments(cx, args, tool);
    }
}

/// An `impl Trait` argument that is fingerprinted must say it is `Serialize`: rustc's own advice
/// names a path from inside serde's derive (issue 16).
fn impl_trait_arguments(cx: &Ctxt, args: &Args, tool: &Tool) {
    let whole_key = |ident: &Ident| {
        args.key.as_ref().is_some_and(|k| {
            k.paths
                .iter()
                .any(|p| p.fields.is_empty() && p.root == *ident)
        })
    };
    for p in &tool.params {
        let Role::Named(ident) = &p.role else {
            continue;
        };
        let ty = match &*p.arg.ty {
            Type::Reference(r) => &*r.elem,
            ty => ty,
        };
        let Type::ImplTrait(it) = ty else { continue };
        let serialize = it.bounds.iter().any(|b| {
            matches!(b, syn::TypeParamBound::Trait(t)
                if t.path.segments.last().is_some_and(|s| s.ident == "Serialize"))
        });
        if !serialize && !whole_key(ident) {
            let written = p
                .arg
                .ty
                .to_token_stream()
                .to_string()
                .replace(" <", "<")
                .replace("< ", "<")
                .replace(" >", ">")
                .replace("& ", "&");
            cx.error_spanned(
                &p.arg.ty,
                format!(
                    "`{ident}: {written}` cannot be fingerprinted: the arguments that are not key fields must be \
                     `serde::Serialize`, so that a retry is told apart from a key reused for another operation; add \
                     `+ serde::Serialize` to the bounds, take a concrete type (e.g. `&str`), or make it a key field"
                ),
            );
        }
    }
}

/// C1, C6, C9 (empty key list), and the knobs that do not apply to the attribute.
fn arguments(cx: &Ctxt, args: &Args, kind: Kind) {
    if let (Some((_, lease)), Some((ttl_ident, ttl))) = (&args.lease, &args.ttl)
        && ttl.0 < lease.0
    {
        cx.error(
            ttl_ident.span(),
            format!(
                "`ttl` ({} ms) is shorter than `lease` ({} ms): a running record would expire before its lease, \
                 and another call could run the operation again; make the ttl at least the lease",
                ttl.0, lease.0
            ),
        );
    }
    match kind {
        Kind::SideEffect => match &args.key {
            None => cx.error(
                Span::call_site(),
                "#[side_effect] needs a key: name the fields that identify the operation, \
                 e.g. `#[side_effect(key = \"customer_id, period\")]`; the key is derived from them once, \
                 before the first attempt, and every retry reuses it",
            ),
            Some(key) if key.paths.is_empty() && !key.unreadable => cx.error(
                key.list_span,
                "the key list is empty: name at least one field that identifies the operation, \
                 e.g. `key = \"customer_id, period\"`; an operation with no natural identity can key on an \
                 `OperationId` from `idem.operation(\"...\")`",
            ),
            Some(_) => {}
        },
        Kind::ReadOnly => {
            if let Some(key) = &args.key {
                cx.error_spanned(
                    &key.tokens,
                    "read-only tools need no key: they may run any number of times, so nothing is recorded; \
                     remove `key`, or use #[side_effect(key = ...)] if the tool acts on the world",
                );
            }
            if let Some(previous) = &args.previous {
                cx.error_spanned(
                    &previous.tokens,
                    "read-only tools have no key, so no previous key: remove `previous`",
                );
            }
            if let Some((ident, path)) = &args.verify {
                cx.error_spanned(
                    quote!(#ident = #path),
                    "read-only tools need no verification: a read changes nothing, so an attempt whose answer was \
                     lost is simply read again; remove `verify`, or use #[side_effect(key = ..., verify = ...)] if \
                     the tool acts on the world",
                );
            }
            if let Some((ident, _)) = &args.resend {
                cx.error(
                    ident.span(),
                    "`resend` does not apply to #[read_only]: a read changes nothing, so it is always sent again \
                     when its answer is lost; remove it",
                );
            }
            for ident in [&args.lease, &args.ttl, &args.in_flight_wait]
                .into_iter()
                .flatten()
                .map(|(ident, _)| ident)
                .chain(args.tenant_required.as_ref().map(|(ident, _)| ident))
            {
                cx.error(
                    ident.span(),
                    format!(
                        "`{ident}` does not apply to #[read_only]: read-only tools keep no record in the store; remove it"
                    ),
                );
            }
        }
    }
}

/// C5, the receiver, the parameters.
fn signature(cx: &Ctxt, tool: &Tool) {
    let sig = &tool.item.sig;
    let attribute = tool.kind.attribute();
    if sig.asyncness.is_none() && boxed_by_tool(sig) {
        let fn_token = &sig.fn_token;
        let ident = &sig.ident;
        cx.error_spanned(
            quote!(#fn_token #ident),
            format!(
                "write {attribute} above rmcp's `#[tool]`, not below it: attributes expand top to bottom, and `#[tool]` \
                 has already made `{ident}` a boxed future, so {attribute} can neither wrap it nor derive its annotations. \
                 Write `{attribute}` first, then `#[tool(...)]`, then `async fn {ident}(...)`"
            ),
        );
    } else if sig.asyncness.is_none() {
        let fn_token = &sig.fn_token;
        let ident = &sig.ident;
        cx.error_spanned(
            quote!(#fn_token #ident),
            format!(
                "{attribute} goes on an `async fn`: each attempt is awaited, with backoff between attempts; \
                 write `async fn {ident}(...)`"
            ),
        );
    }
    if let Some(r) = &tool.receiver {
        let shared = match (&r.reference, &r.colon_token) {
            (Some(_), _) => r.mutability.is_none(),
            (None, Some(_)) => matches!(&*r.ty, Type::Reference(t) if t.mutability.is_none()),
            (None, None) => false,
        };
        if !shared {
            cx.error_spanned(
                r,
                format!(
                    "{attribute} methods take `&self`: every attempt gets the receiver anew, and only a shared \
                     reference can be handed to several attempts; use `&self` (with interior mutability if needed)"
                ),
            );
        }
    }
    let mut injected = 0;
    for p in &tool.params {
        match &p.role {
            Role::InjectedKey => {
                injected += 1;
                if tool.kind == Kind::ReadOnly {
                    cx.error_spanned(
                        &p.arg,
                        "read-only tools need no key, and get none: remove this `&IdempotencyKey` parameter",
                    );
                } else if injected > 1 {
                    cx.error_spanned(
                        &p.arg,
                        "the key is injected once: keep a single `key: &IdempotencyKey` parameter",
                    );
                }
            }
            Role::Named(ident)
                if tool.kind == Kind::SideEffect && names_the_key(ident, &p.arg.ty) =>
            {
                // C4's neighbour: a key the caller passes is a key the caller can mint per call.
                let ty = p.arg.ty.to_token_stream().to_string().replace("& ", "&");
                let ident = ident.unraw();
                let rename = if ty.ends_with("IdempotencyKey") {
                    ""
                } else {
                    ", or rename this parameter (e.g. `object_key`) if it is not the idempotency key"
                };
                cx.error_spanned(
                    &p.arg,
                    format!(
                        "`{ident}: {ty}` would be a key the caller passes in, which a caller can mint anew per call \
                         (a fresh key per call dedupes nothing); the key is derived from the key fields and injected: \
                         write `{ident}: &IdempotencyKey` to receive it{rename}"
                    ),
                );
            }
            Role::Named(_) | Role::Pattern { .. } => {
                if let Type::Reference(r) = &*p.arg.ty
                    && r.mutability.is_some()
                {
                    let context = matches!(&*r.elem, Type::Path(t)
                        if t.path.segments.last().is_some_and(|s| s.ident == "ToolContext"));
                    cx.error_spanned(
                        &p.arg.ty,
                        if context {
                            "a tool's arguments are handed to every attempt, which rig's `&mut ToolContext` cannot be; \
                             implement rig's context-free `PortableTool` (its `call(&self, args)`) instead of `Tool`"
                        } else {
                            "a tool's arguments are handed to every attempt, which a `&mut` cannot be; \
                             take it by value (it is cloned per attempt) or by shared reference"
                        },
                    );
                }
            }
        }
    }
}

/// A parameter that claims to be the key without being the injected `&IdempotencyKey`: named
/// `key`, or of type `IdempotencyKey` by value.
fn names_the_key(ident: &syn::Ident, ty: &Type) -> bool {
    let by_value = matches!(ty, Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == "IdempotencyKey"));
    ident.unraw() == "key" || by_value
}

/// C7: the return type is `Result<T, E>`.
fn output(cx: &Ctxt, tool: &Tool) {
    let sig = &tool.item.sig;
    if ast::result_types(&sig.output).is_some() {
        return;
    }
    if boxed_by_tool(sig) {
        // Reported once, as the order of the attributes (see `signature`).
        return;
    }
    let attribute = tool.kind.attribute();
    let what = match tool.kind {
        Kind::SideEffect => {
            "returns `Result<T, E>`: `T: Serialize + DeserializeOwned` (the outcome is stored and replayed), \
             `E: idemkit::Classify + From<idemkit::Error>` (which failures to retry, and the runtime's own errors)"
        }
        Kind::ReadOnly => {
            "returns `Result<T, E>` with `E: idemkit::Classify` (which failures to retry)"
        }
    };
    match &sig.output {
        syn::ReturnType::Default => cx.error(
            sig.paren_token.span.close(),
            format!("a {attribute} tool {what}; add `-> Result<T, E>`"),
        ),
        syn::ReturnType::Type(_, ty) => {
            cx.error_spanned(
                ty,
                format!(
                    "a {attribute} tool {what}; wrap the value in `Result<_, YourError>` (a one-argument alias such \
                     as `anyhow::Result<T>` works too)"
                ),
            );
        }
    }
}

/// Which list of key fields is checked: the key, or the previous derivation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Key,
    Previous,
}

/// `previous = "..."`: a derivation the tool can still make (its fields are parameters), other
/// than the key itself; only on #[side_effect].
fn previous(cx: &Ctxt, args: &Args, tool: &Tool) {
    let Some(previous) = &args.previous else {
        return;
    };
    if previous.paths.is_empty() {
        if !previous.unreadable {
            cx.error(
                previous.list_span,
                "the previous key list is empty: name the key fields the tool had before its key changed, \
                 e.g. `previous = \"customer_id\"`, or remove `previous`",
            );
        }
        return;
    }
    if let Some(key) = &args.key {
        let shown =
            |k: &crate::attr::KeyArg| k.paths.iter().map(KeyPath::display).collect::<Vec<_>>();
        if !key.paths.is_empty() && shown(key) == shown(previous) {
            cx.error(
                previous.list_span,
                format!(
                    "`previous` is the key itself (`{}`): it names the derivation the tool had before its key \
                     changed, so that a call still finds operations made under that key; write the key fields as \
                     they were (e.g. `previous = \"customer_id\"` after adding `purpose` to the key), or remove \
                     `previous` if the key did not change",
                    shown(key).join(", ")
                ),
            );
            return;
        }
    }
    key_paths(cx, tool, previous, Which::Previous);
}

/// C2, C9: each key path starts at a parameter, a binding or `self`, once, under a name of its own.
fn key_paths(cx: &Ctxt, tool: &Tool, key: &crate::attr::KeyArg, which: Which) {
    // Names a key path may start at, and whether each is a parameter (vs a binding).
    let mut roots: BTreeMap<String, Ident> = BTreeMap::new();
    for p in &tool.params {
        match &p.role {
            Role::Named(ident) => {
                roots.insert(ident.unraw().to_string(), ident.clone());
            }
            Role::Pattern { bindings, .. } => {
                for b in bindings {
                    roots.insert(b.unraw().to_string(), b.clone());
                }
            }
            Role::InjectedKey => {}
        }
    }
    let injected_name = tool.injected_key().and_then(|p| match &*p.arg.pat {
        syn::Pat::Ident(pi) => Some(pi.ident.unraw().to_string()),
        _ => None,
    });

    let mut seen_paths: BTreeMap<String, ()> = BTreeMap::new();
    let mut seen_names: BTreeMap<String, String> = BTreeMap::new();
    for path in &key.paths {
        let shown = path.display();
        if seen_paths.insert(shown.clone(), ()).is_some() {
            cx.error(
                path.span,
                format!("key field `{shown}` is named twice; name each field once"),
            );
            continue;
        }
        let name = path.key_name();
        if let Some(other) = seen_names.insert(name.clone(), shown.clone()) {
            cx.error(
                path.span,
                format!(
                    "key fields `{other}` and `{shown}` would both be called `{name}` in the key (a field is named \
                     by the last segment of its path), so they could be swapped without changing it; key on one of them"
                ),
            );
            continue;
        }
        let root = path.root.unraw().to_string();
        if root == "self" {
            if tool.receiver.is_none() {
                cx.error(
                    path.span,
                    format!(
                        "key field `{shown}` starts at `self`, but `{}` takes no `self`",
                        tool.item.sig.ident
                    ),
                );
                continue;
            }
        } else if Some(&root) == injected_name.as_ref() {
            cx.error(
                path.span,
                format!("key field `{shown}` names the injected key itself; the key is made from the fields, not of itself"),
            );
            continue;
        } else if !roots.contains_key(&root) {
            unknown_root(cx, tool, path, &root, &roots, which);
            continue;
        }
    }
}

/// C2: names the field, suggests the closest name.
fn unknown_root(
    cx: &Ctxt,
    tool: &Tool,
    path: &KeyPath,
    root: &str,
    roots: &BTreeMap<String, Ident>,
    which: Which,
) {
    let shown = path.display();
    let mut candidates: Vec<&str> = roots.keys().map(String::as_str).collect();
    if tool.receiver.is_some() {
        candidates.push("self");
    }
    let hint = match closest(root, candidates.iter().copied()) {
        Some(close) => {
            let mut fixed = close.to_owned();
            for f in &path.fields {
                fixed.push('.');
                fixed.push_str(&f.unraw().to_string());
            }
            format!("did you mean `{fixed}`?")
        }
        None if candidates.is_empty() => "the function has no parameter to key on".to_owned(),
        None => format!(
            "key fields start at one of: {}",
            candidates
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let message = match which {
        Which::Key => format!(
            "unknown key field `{shown}`: `{root}` is not a parameter of `{}`; {hint}",
            tool.item.sig.ident
        ),
        Which::Previous => format!(
            "`previous` names `{shown}`, but `{root}` is not a parameter of `{}`: the previous key is derived from \
             this call's arguments, so each of its fields must be one; {hint} If the field is gone from the tool, \
             the previous key cannot be derived: keep the parameter until records made under that key have \
             expired, or remove `previous`",
            tool.item.sig.ident
        ),
    };
    cx.error(path.span, message);
}
