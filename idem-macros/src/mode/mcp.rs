//! MCP mode (rmcp's `#[tool]` on the method): its parse stage (the `#[tool(...)]` the attribute
//! finds on the method as written, and the hints a classification implies) and its expansion
//! (`#[tool]` rewritten with those hints and the model-facing description, the wrapper serving
//! `CallToolResult`s, replays and refusals included). Its hooks, by the stage that calls them:
//! `check` (what MCP mode refuses), `key_path` and `fingerprint_except` for the plan (how key
//! paths read a request), `attrs` and `serve` for the expansion, `written_tool_attr` for the
//! fallback.
//!
//! Attributes expand top to bottom, so ours sees the `async fn` as written with `#[tool(...)]`
//! still on it.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, Ident, LitBool, Meta, Token, Type};

use crate::ast::{Func, McpTool, Role, Tool};
use crate::attr::{Args, KeyArg, Kind};
use crate::ctxt::Ctxt;
use crate::plan::{Plan, Private};

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

// The plan stage's hooks: how key paths read a request, and what its fingerprint leaves out.

/// `req.customer_id` for `req: Parameters<Req>` reads the request's field: `req.0.customer_id`.
pub(crate) fn key_path(tool: &Tool, root: &Ident, fields: &[Ident]) -> Option<TokenStream> {
    tool.mcp.as_ref()?;
    if fields.is_empty() {
        return None;
    }
    let param = tool.params.iter().find(|p| match &p.role {
        Role::Named(ident) => ident == root,
        _ => false,
    })?;
    if !is_parameters(&param.arg.ty) {
        return None;
    }
    let zero = syn::Index {
        index: 0,
        span: root.span(),
    };
    Some(quote!(#root.#zero #(.#fields)*))
}

/// The request's fields that are key fields are left out of its fingerprint (MCP mode only, so
/// other tools' fingerprints do not change): `req.customer_id` excludes `customer_id` from `req`.
pub(crate) fn fingerprint_except(tool: &Tool, key: &KeyArg, ident: &Ident) -> Vec<String> {
    if tool.mcp.is_none() {
        return Vec::new();
    }
    key.paths
        .iter()
        .filter(|p| p.root == *ident && p.fields.len() == 1)
        .map(|p| p.key_name())
        .collect()
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

/// `#[tool(..., annotations(...))]` with the derived hints (and any consistent hand-written one).
fn tool_attr(ours: &[Option<bool>; 4], tool: &Tool, mcp: &McpTool) -> TokenStream {
    let attr = &tool.item.attrs[mcp.index];
    let path = attr.path();
    let mut entries: Vec<TokenStream> = mcp.title.iter().map(ToTokens::to_token_stream).collect();
    for (i, hint) in HINTS.iter().enumerate() {
        let written = mcp
            .hints
            .iter()
            .find(|(n, ..)| n == hint)
            .map(|(_, v, _)| *v);
        if let Some(value) = ours[i].or(written) {
            let ident = Ident::new(hint, Span::call_site());
            entries.push(quote!(#ident = #value));
        }
    }
    let others = &mcp.others;
    // rmcp would send the whole doc comment; the model gets it without rustdoc's sections.
    let text = crate::describe::description(&tool.item.attrs);
    let written = mcp.others.iter().any(|m| m.path().is_ident("description"));
    let description = (!written && !text.is_empty()).then(|| quote!(description = #text,));
    quote!(#[#path(#(#others,)* #description annotations(#(#entries),*))])
}

/// `#[tool(...)]` as written, minus the annotation entries idemkit reported as unknown (rmcp
/// would refuse them and drop the method): what the fallback emits, so that the router still
/// compiles and one mistake gives one error.
pub(crate) fn written_tool_attr(tool: &Tool, mcp: &McpTool) -> TokenStream {
    let path = tool.item.attrs[mcp.index].path();
    let mut entries: Vec<TokenStream> = mcp.title.iter().map(ToTokens::to_token_stream).collect();
    entries.extend(mcp.hints.iter().map(|(_, _, written)| written.clone()));
    let others = &mcp.others;
    quote!(#[#path(#(#others,)* annotations(#(#entries),*))])
}

/// The outer attributes with `#[tool]` rewritten.
pub(crate) fn attrs(
    hints: &[Option<bool>; 4],
    tool: &Tool,
    attrs: Vec<TokenStream>,
) -> Vec<TokenStream> {
    let Some(mcp) = &tool.mcp else { return attrs };
    let mut attrs = attrs;
    attrs[mcp.index] = tool_attr(hints, tool, mcp);
    attrs
}

/// The return type of a method rmcp's router serves: rmcp's tool result (the wrapper's, and the
/// fallback's).
pub(crate) fn output(private: &Private) -> TokenStream {
    quote!(#private::mcp::ToolOutput)
}

/// The wrapper's return type and body in MCP mode: the result as rmcp's `CallToolResult`.
pub(crate) fn serve(tool: &Tool, plan: &Plan, body: TokenStream) -> (TokenStream, TokenStream) {
    let (private, ok, err) = (&plan.private, &plan.ok, &plan.err);
    let key_fields: Vec<String> = plan.keys.iter().map(|k| k.name.clone()).collect();
    let output = output(private);
    // How the error is seen as a `std::error::Error` (anyhow's and boxed errors are not one),
    // picked where `E` is concrete; at `E`'s span, so an error type that fits none is reported there.
    let as_error = Ident::new("__idemkit_as_error", Span::mixed_site());
    let check = quote_spanned! {err.span()=>
        let #as_error = {
            #[allow(unused_imports)]
            use #private::mcp::{ViaAnyhow as _, ViaBoxed as _, ViaError as _, ViaMissing as _};
            (&&#private::mcp::ErrorProbe::<#err>::new()).error_view()
        };
    };
    let result = Ident::new("__idemkit_result", Span::mixed_site());
    let info = Ident::new("__idemkit_info", Span::mixed_site());
    let body = match tool.kind {
        Kind::SideEffect => quote! {
            #check
            let (#result, #info) = #private::mcp::observe(async { #body }).await;
            #private::mcp::side_effect_output::<#ok, #err>(#result, #info, &[#(#key_fields),*], #as_error)
        },
        Kind::ReadOnly => quote! {
            #check
            let #result = { #body };
            #private::mcp::read_only_output::<#ok, #err>(#result, #as_error)
        },
    };
    (output, body)
}

/// MCP mode: the knobs that need it, and hand-written hints that contradict the attribute.
pub(crate) fn check(cx: &Ctxt, args: &Args, tool: &Tool) {
    for (ident, _) in [&args.destructive, &args.open_world].into_iter().flatten() {
        // A `json` tool is served to MCP by `idemkit::mcp::JsonToolsServer`, with these hints.
        if tool.mcp.is_none() && args.json.is_none() {
            let hint = if ident == "destructive" {
                "destructiveHint"
            } else {
                "openWorldHint"
            };
            cx.error(
                ident.span(),
                format!(
                    "`{ident}` sets an MCP tool's `{hint}`: it applies with rmcp's `#[tool]` written below this \
                     attribute, or with `json` (served by `idemkit::mcp::JsonToolsServer`); remove it"
                ),
            );
        } else if tool.kind == Kind::ReadOnly && ident == "destructive" {
            cx.error(
                ident.span(),
                "`destructive` does not apply to #[read_only]: a read-only tool changes nothing; remove it",
            );
        }
    }
    let Some(mcp) = &tool.mcp else { return };
    let ours = derived(tool.kind, args);
    let attribute = tool.kind.attribute();
    for (name, value, tokens) in &mcp.hints {
        let Some(i) = HINTS.iter().position(|h| h == name) else {
            continue;
        };
        let why = match (tool.kind, i, ours[i]) {
            (_, _, Some(ours)) if ours == *value => continue,
            (Kind::SideEffect, 0, _) => {
                "a side-effect tool acts on the world (`readOnlyHint: false`); mark it #[read_only] if it only reads"
                    .to_owned()
            }
            (Kind::SideEffect, 2, _) => {
                "a repeat with the same arguments returns the recorded outcome and does not act again, so the tool \
                 is idempotent (`idempotentHint: true`)"
                    .to_owned()
            }
            (Kind::SideEffect, _, Some(ours)) => {
                let arg = if i == 1 { "destructive" } else { "open_world" };
                format!(
                    "the attribute says `{arg} = {ours}`; set it in one place, `#[side_effect({arg} = ...)]`"
                )
            }
            (Kind::ReadOnly, 0, _) => {
                "a read-only tool changes nothing (`readOnlyHint: true`); use #[side_effect(key = ...)] if it acts on the world"
                    .to_owned()
            }
            (Kind::ReadOnly, 1, _) if *value => "a read-only tool destroys nothing".to_owned(),
            (Kind::ReadOnly, 2, _) if !*value => {
                "reading again changes nothing, so a read-only tool is idempotent".to_owned()
            }
            (Kind::ReadOnly, 3, Some(ours)) => {
                format!("the attribute says `open_world = {ours}`; set it in one place, `#[read_only(open_world = ...)]`")
            }
            _ => continue,
        };
        cx.error_spanned(
            tokens,
            format!(
                "`{name} = {value}` contradicts {attribute}: {why}. idemkit derives the tool's annotations from its \
                 attribute; remove this hint"
            ),
        );
    }
}
