//! MCP mode's expansion: rmcp's `#[tool]` rewritten with the annotations the classification
//! implies, and the wrapper serving `CallToolResult`s (replays and refusals included); rig
//! mode's: the wrapper serving rig's `Result<ToolOutput, ToolExecutionError>`.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, Type};

use crate::ast::{Kind, McpTool, Tool};
use crate::attr::{Args, Private};
use crate::rmcp::{HINTS, derived};

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
pub(crate) fn attrs(args: &Args, tool: &Tool, attrs: Vec<TokenStream>) -> Vec<TokenStream> {
    let Some(mcp) = &tool.mcp else { return attrs };
    let mut attrs = attrs;
    attrs[mcp.index] = tool_attr(tool.kind, args, tool, mcp);
    attrs
}

/// The wrapper's return type and body in MCP mode: the result as rmcp's `CallToolResult`.
pub(crate) fn serve(
    private: &Private,
    tool: &Tool,
    ok: &Type,
    err: &Type,
    key_fields: &[String],
    body: TokenStream,
) -> (TokenStream, TokenStream) {
    let output = quote!(#private::mcp::ToolOutput);
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

/// The wrapper's return type and body in rig mode: the result as rig's
/// `Result<ToolOutput, ToolExecutionError>`, which the impl's `type Output` and `type Error` name.
/// A pinned `name = "..."` must equal the tool's `NAME` (checked when the impl is compiled).
pub(crate) fn serve_rig(
    private: &Private,
    args: &Args,
    tool: &Tool,
    ok: &Type,
    err: &Type,
    key_fields: &[String],
    body: TokenStream,
) -> (TokenStream, TokenStream) {
    let output = match &tool.item.sig.output {
        // At the written return type, so a trait whose types are not rig's envelope is reported there.
        syn::ReturnType::Type(_, ty) => spanning(quote!(#private::rig::RigOutput), ty),
        syn::ReturnType::Default => quote!(#private::rig::RigOutput),
    };
    let fail = Ident::new("__idemkit_fail_with", Span::mixed_site());
    let check = quote_spanned! {err.span()=>
        let #fail = {
            #[allow(unused_imports)]
            use #private::rig::{ViaAnyhow as _, ViaBoxed as _, ViaError as _, ViaMissing as _};
            (&&#private::rig::ErrorProbe::<#err>::new()).fail_with()
        };
    };
    // The impl's declared types, named at the return type: a wrong one says what to declare.
    let envelope = spanning(
        quote!(#private::rig::assert_envelope::<
            <Self as #private::rig::Tool>::Output,
            <Self as #private::rig::Tool>::Error,
        >();),
        match &tool.item.sig.output {
            syn::ReturnType::Type(_, ty) => ty,
            syn::ReturnType::Default => ok,
        },
    );
    let same_name = args.name.as_ref().map(|lit| {
        let message = format!(
            "idemkit: `name = {:?}` differs from the rig tool's `NAME`; the model calls the tool by `NAME`, \
             so pin that one name (or drop `name`: the key then takes `NAME`)",
            lit.value()
        );
        // An array length, so evaluated when the impl is type-checked (`cargo check` reports it); an
        // inline `const { }` would be evaluated only if `call` were ever instantiated. In a generic
        // impl `Self` names the impl's parameters, which rustc accepts here with a future-compat lint.
        quote_spanned! {lit.span()=>
            #[allow(const_evaluatable_unchecked)]
            let _ = [(); {
                ::core::assert!(#private::rig::same_name(<Self as #private::rig::Tool>::NAME, #lit), #message);
                0
            }];
        }
    });
    let result = Ident::new("__idemkit_result", Span::mixed_site());
    let info = Ident::new("__idemkit_info", Span::mixed_site());
    let body = match tool.kind {
        Kind::SideEffect => quote! {
            #check
            #envelope
            #same_name
            let (#result, #info) = #private::rig::observe(async { #body }).await;
            #private::rig::side_effect_output::<#ok, #err>(#result, #info, &[#(#key_fields),*], #fail)
        },
        Kind::ReadOnly => quote! {
            #check
            #envelope
            #same_name
            let #result = { #body };
            #private::rig::read_only_output::<#ok, #err>(#result, #fail)
        },
    };
    (output, body)
}

/// `tokens` spanning `written`: the first token at its first, the last at its last, so rustc
/// underlines the whole written type (a proc macro on stable cannot join spans).
fn spanning(tokens: TokenStream, written: &Type) -> TokenStream {
    let written = written.to_token_stream();
    let first = written.clone().into_iter().next().map(|t| t.span());
    let last = written.into_iter().last().map(|t| t.span());
    let (Some(first), Some(last)) = (first, last) else {
        return tokens;
    };
    let mut tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let n = tokens.len();
    for (i, token) in tokens.iter_mut().enumerate() {
        // The path's tokens are punctuation and identifiers (`crate = path` included): no groups.
        token.set_span(if i + 1 == n { last } else { first });
    }
    tokens.into_iter().collect()
}
