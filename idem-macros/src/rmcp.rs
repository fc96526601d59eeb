//! rmcp's `#[tool(...)]` read from the method it sits on (MCP mode's parse stage), and the hints
//! a classification implies. See `check` for what MCP mode refuses, `lower` for how key paths
//! read a request, `serve` for the wrapper that serves MCP results.
//!
//! Attributes expand top to bottom, so ours sees the `async fn` as written with `#[tool(...)]`
//! still on it.

use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, Ident, LitBool, Meta, Token, Type};

use crate::ast::{Func, McpTool};
use crate::attr::{Args, Kind};
use crate::ctxt::Ctxt;

/// The annotation hints, in rmcp's spelling (`#[tool(annotations(read_only_hint = ..))]`).
pub(crate) const HINTS: [&str; 4] = [
    "read_only_hint",
    "destructive_hint",
    "idempotent_hint",
    "open_world_hint",
];

/// Whether an attribute is rmcp's `#[tool]` (by its last segment, as `#[tool_router]` finds it).
pub(crate) fn is_tool(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "tool")
}

/// Finds and reads `#[tool(...)]` among the function's attributes.
pub(crate) fn find(cx: &Ctxt, kind: Kind, func: &Func) -> Option<McpTool> {
    let index = func.attrs.iter().position(is_tool)?;
    if !cfg!(feature = "rmcp") {
        cx.error_spanned(
            &func.attrs[index],
            format!(
                "{} on an MCP tool needs idemkit's `rmcp` feature: `idemkit = {{ version = \"...\", features = [\"rmcp\"] }}`",
                kind.attribute()
            ),
        );
        return None;
    }
    let attr = &func.attrs[index];
    let metas = match &attr.meta {
        Meta::Path(_) => Punctuated::new(),
        Meta::List(list) => {
            match list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated) {
                Ok(metas) => metas,
                Err(e) => {
                    cx.syn_error(e);
                    return None;
                }
            }
        }
        Meta::NameValue(nv) => {
            cx.error_spanned(nv, "write `#[tool]` or `#[tool(...)]`");
            return None;
        }
    };
    let mut tool = McpTool {
        index,
        others: Vec::new(),
        title: None,
        hints: Vec::new(),
        name: None,
    };
    for meta in metas {
        if meta.path().is_ident("annotations") {
            annotations(cx, &meta, &mut tool);
            continue;
        }
        if let Meta::NameValue(nv) = &meta
            && nv.path.is_ident("name")
            && let Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
        {
            tool.name = Some(s.value());
        }
        tool.others.push(meta);
    }
    Some(tool)
}

/// `annotations(title = "...", read_only_hint = true, ...)`.
fn annotations(cx: &Ctxt, meta: &Meta, tool: &mut McpTool) {
    let Meta::List(list) = meta else {
        cx.error_spanned(
            meta,
            "write the annotations as `annotations(title = \"...\")`; idemkit derives the hints from the attribute",
        );
        return;
    };
    let inner = match list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated) {
        Ok(inner) => inner,
        Err(e) => return cx.syn_error(e),
    };
    for meta in inner {
        let name = meta
            .path()
            .get_ident()
            .map(Ident::to_string)
            .unwrap_or_default();
        if name == "title" {
            tool.title = Some(meta);
        } else if HINTS.contains(&name.as_str()) {
            let value = match &meta {
                Meta::NameValue(nv) => match &nv.value {
                    Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Bool(b),
                        ..
                    }) => Some(b.value),
                    _ => None,
                },
                _ => None,
            };
            match value {
                Some(value) => tool.hints.push((name, value, meta.to_token_stream())),
                None => cx.error_spanned(
                    &meta,
                    format!("write `{name} = true` or `{name} = false`, so that idemkit can check it against the attribute"),
                ),
            }
        } else {
            // rmcp refuses it too, but then drops the whole method, which adds errors of its own
            // (the router's missing method, unused imports): reported here, and left out of the
            // `#[tool]` the fallback emits, it is the only error.
            let known = std::iter::once("title").chain(HINTS);
            let hint = crate::suggest::closest(&name, known)
                .map(|c| format!("did you mean `{c}`? "))
                .unwrap_or_default();
            cx.error_spanned(
                meta.path(),
                format!(
                    "`{name}` is not an MCP tool annotation; {hint}`annotations(...)` takes `title` and the hints {}, which idemkit derives from the attribute",
                    HINTS.map(|h| format!("`{h}`")).join(", ")
                ),
            );
        }
    }
}

/// The hints the classification implies, `None` where it says nothing.
pub(crate) fn derived(kind: Kind, args: &Args) -> [Option<bool>; 4] {
    let flag = |a: &Option<(Ident, LitBool)>| a.as_ref().map(|(_, b)| b.value);
    match kind {
        Kind::SideEffect => [
            Some(false),
            flag(&args.destructive),
            Some(true),
            flag(&args.open_world),
        ],
        Kind::ReadOnly => [Some(true), None, None, flag(&args.open_world)],
    }
}

/// `Parameters<T>` (any path ending so), the request wrapper of rmcp.
pub(crate) fn is_parameters(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == "Parameters"))
}

/// What a C5 error says when rmcp's `#[tool]` expanded first (it made the `async fn` a boxed
/// future).
pub(crate) fn boxed_by_tool(sig: &syn::Signature) -> bool {
    let syn::ReturnType::Type(_, ty) = &sig.output else {
        return false;
    };
    let text = ty.to_token_stream().to_string();
    sig.asyncness.is_none() && text.contains("Pin") && text.contains("Future")
}
