//! MCP mode: `#[side_effect]` / `#[read_only]` written above rmcp's `#[tool]` on a tool method.
//!
//! Attributes expand top to bottom, so ours sees the `async fn` as written with `#[tool(...)]`
//! still on it. It then (1) rewrites that attribute so the tool's annotations are the ones the
//! classification implies, refusing a hand-written hint that contradicts them, (2) reads key paths
//! into `req: Parameters<Req>` as fields of the request (`req.customer_id` → `req.0.customer_id`),
//! and (3) wraps the wrapper so the method serves MCP results (`__private::mcp::ToolOutput`),
//! replays and refusals included. `#[classified_tools]` on the impl block checks that every
//! `#[tool]` method is classified.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, Ident, ItemFn, LitBool, Meta, Token, Type};

use crate::ast::{Kind, Role, Tool};
use crate::attr::Args;
use crate::ctxt::Ctxt;

/// The annotation hints, in rmcp's spelling (`#[tool(annotations(read_only_hint = ..))]`).
const HINTS: [&str; 4] = [
    "read_only_hint",
    "destructive_hint",
    "idempotent_hint",
    "open_world_hint",
];

/// rmcp's `#[tool(...)]` on the method, as written.
pub(crate) struct McpTool {
    /// Where it sits among the method's attributes.
    index: usize,
    /// Its arguments other than `annotations(...)`.
    others: Vec<Meta>,
    /// `annotations(title = ...)`, kept as written.
    title: Option<Meta>,
    /// Hand-written hints: name, value, and the tokens to point at.
    hints: Vec<(String, bool, TokenStream)>,
    /// `#[tool(name = "...")]`: the MCP name, which is also the default name in the key.
    pub name: Option<String>,
}

/// Whether an attribute is rmcp's `#[tool]` (by its last segment, as `#[tool_router]` finds it).
fn is_tool(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "tool")
}

/// Finds and reads `#[tool(...)]` among the function's attributes.
pub(crate) fn find(cx: &Ctxt, kind: Kind, func: &ItemFn) -> Option<McpTool> {
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
            // rmcp reports what it does not know; keep it.
            tool.hints.push((name, false, meta.to_token_stream()));
        }
    }
}

/// The hints the classification implies, `None` where it says nothing.
fn derived(kind: Kind, args: &Args) -> [Option<bool>; 4] {
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

/// Every check of MCP mode: the knobs that need it, and hand-written hints that contradict the
/// attribute.
pub(crate) fn check(cx: &Ctxt, args: &Args, tool: &Tool) {
    for (ident, _) in [&args.destructive, &args.open_world].into_iter().flatten() {
        if tool.mcp.is_none() {
            let hint = if ident == "destructive" {
                "destructiveHint"
            } else {
                "openWorldHint"
            };
            cx.error(
                ident.span(),
                format!(
                    "`{ident}` sets an MCP tool's `{hint}`: it applies with rmcp's `#[tool]` written below this \
                     attribute; remove it"
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

/// `#[tool(..., annotations(...))]` with the derived hints (and any consistent hand-written one).
fn tool_attr(kind: Kind, args: &Args, tool: &Tool, mcp: &McpTool) -> TokenStream {
    let attr = &tool.item.attrs[mcp.index];
    let path = attr.path();
    let ours = derived(kind, args);
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
    quote!(#[#path(#(#others,)* annotations(#(#entries),*))])
}

/// The outer attributes with `#[tool]` rewritten.
pub(crate) fn attrs(args: &Args, tool: &Tool, attrs: Vec<TokenStream>) -> Vec<TokenStream> {
    let Some(mcp) = &tool.mcp else { return attrs };
    let mut attrs = attrs;
    attrs[mcp.index] = tool_attr(tool.kind, args, tool, mcp);
    attrs
}

/// The wrapper's return type and body in MCP mode: the result as rmcp's `CallToolResult`.
pub(crate) fn serve(
    private: &TokenStream,
    tool: &Tool,
    ok: &Type,
    err: &Type,
    key_fields: &[String],
    body: TokenStream,
) -> (TokenStream, TokenStream) {
    let output = quote!(#private::mcp::ToolOutput);
    let check = quote_spanned!(err.span()=> #private::mcp::assert_tool_error::<#err>(););
    let result = Ident::new("__idemkit_result", Span::mixed_site());
    let info = Ident::new("__idemkit_info", Span::mixed_site());
    let body = match tool.kind {
        Kind::SideEffect => quote! {
            #check
            let (#result, #info) = #private::mcp::observe(async { #body }).await;
            #private::mcp::side_effect_output::<#ok, #err>(#result, #info, &[#(#key_fields),*])
        },
        Kind::ReadOnly => quote! {
            #check
            let #result = { #body };
            #private::mcp::read_only_output::<#ok, #err>(#result)
        },
    };
    (output, body)
}

/// On any error, what keeps rmcp's router compiling: the method serves `ToolOutput`, and the
/// body as written is type-checked in a future that is never run.
pub(crate) fn fallback(
    private: &TokenStream,
    tool: &Tool,
    sig: &mut syn::Signature,
    key: Option<TokenStream>,
    stmts: TokenStream,
) -> TokenStream {
    if tool.mcp.is_none() {
        if cfg!(feature = "rmcp") && boxed_by_tool(sig) {
            // Below `#[tool]`: the router still takes this method; keep it a tool that compiles.
            let boxed = match &sig.output {
                syn::ReturnType::Type(_, ty) => ty.to_token_stream(),
                syn::ReturnType::Default => quote!(()),
            };
            sig.output = syn::parse_quote! {
                -> ::core::pin::Pin<::std::boxed::Box<dyn ::core::future::Future<Output = #private::mcp::ToolOutput> + ::core::marker::Send + '_>>
            };
            return quote! {
                #[allow(unreachable_code, unused_variables, clippy::let_underscore_future)]
                #key
                let _: #boxed = { #stmts };
                ::core::unreachable!("idemkit: a tool whose attribute has errors does not compile")
            };
        }
        return quote!(#key #stmts);
    }
    let output = match &sig.output {
        syn::ReturnType::Type(_, ty) => ty.to_token_stream(),
        syn::ReturnType::Default => quote!(()),
    };
    sig.output = syn::parse_quote!(-> #private::mcp::ToolOutput);
    quote! {
        #[allow(unreachable_code, unused_variables, clippy::let_underscore_future)]
        let _ = async move {
            if false {
                let __idemkit_fake_return: #output = loop {};
                return __idemkit_fake_return;
            }
            #key
            #stmts
        };
        ::core::unreachable!("idemkit: a tool whose attribute has errors does not compile")
    }
}

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

/// `Parameters<T>` (any path ending so), the request wrapper of rmcp.
fn is_parameters(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == "Parameters"))
}

/// The request's fields that are key fields are left out of its fingerprint (MCP mode only, so
/// other tools' fingerprints do not change): `req.customer_id` excludes `customer_id` from `req`.
pub(crate) fn fingerprint_except(tool: &Tool, args: &Args, ident: &Ident) -> Vec<String> {
    if tool.mcp.is_none() {
        return Vec::new();
    }
    let Some(key) = &args.key else {
        return Vec::new();
    };
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

/// `#[classified_tools]`: every `#[tool]` method of the impl block is `#[side_effect]` or
/// `#[read_only]`.
#[cfg_attr(not(feature = "rmcp"), allow(dead_code))]
pub(crate) fn classified_tools(args: TokenStream, item: TokenStream) -> TokenStream {
    let cx = Ctxt::default();
    if !args.is_empty() {
        cx.error_spanned(&args, "#[classified_tools] takes no arguments");
    }
    match syn::parse2::<syn::ItemImpl>(item.clone()) {
        Ok(block) => {
            for item in &block.items {
                let syn::ImplItem::Fn(f) = item else { continue };
                let Some(tool) = f.attrs.iter().find(|a| is_tool(a)) else {
                    continue;
                };
                let classified = f.attrs.iter().any(|a| {
                    a.path()
                        .segments
                        .last()
                        .is_some_and(|s| s.ident == "side_effect" || s.ident == "read_only")
                });
                if !classified {
                    let name = &f.sig.ident;
                    cx.error_spanned(
                        tool,
                        format!(
                            "MCP tool `{name}` is not classified: mark it `#[side_effect(key = \"...\")]` if it acts on \
                             the world (charges, sends, writes; it gets an idempotency key and its outcome is recorded), \
                             or `#[read_only]` if it only reads and may be retried freely; write that attribute above `#[tool]`"
                        ),
                    );
                }
            }
        }
        Err(e) => cx.syn_error(syn::Error::new(
            e.span(),
            format!("#[classified_tools] goes on an impl block of MCP tools (with rmcp's #[tool_router]): {e}"),
        )),
    }
    let errors = cx.finish().map(|e| e.to_compile_error());
    quote!(#item #errors)
}
