//! rig mode (`rig` on the `call` of a rig `PortableTool` impl): the wrapper serving rig's
//! `Result<ToolOutput, ToolExecutionError>`, and the checks of the impl's declared types and
//! `NAME` it emits. Its check hook (`check`) says what rig mode refuses.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, LitStr, Type};

use crate::ast::{Kind, Tool};
use crate::attr::Args;
use crate::ctxt::Ctxt;
use crate::plan::{Plan, Private};

/// The return type of a rig tool's `call`: rig's `Result<ToolOutput, ToolExecutionError>` (the
/// wrapper's, and the fallback's).
pub(crate) fn output(private: &Private) -> TokenStream {
    quote!(#private::rig::RigOutput)
}

/// The wrapper's return type and body in rig mode: the result as rig's
/// `Result<ToolOutput, ToolExecutionError>`, which the impl's `type Output` and `type Error` name.
/// A pinned `name = "..."` must equal the tool's `NAME` (checked when the impl is compiled).
pub(crate) fn serve(
    tool: &Tool,
    plan: &Plan,
    pinned: Option<&LitStr>,
    body: TokenStream,
) -> (TokenStream, TokenStream) {
    let (private, ok, err) = (&plan.private, &plan.ok, &plan.err);
    let key_fields: Vec<String> = plan.keys.iter().map(|k| k.name.clone()).collect();
    let output = match &tool.item.sig.output {
        // At the written return type, so a trait whose types are not rig's envelope is reported there.
        syn::ReturnType::Type(_, ty) => spanning(output(private), ty),
        syn::ReturnType::Default => output(private),
    };
    let fail = Ident::new("__idemkit_fail_with", Span::mixed_site());
    let check = quote_spanned! {err.span()=>
        let #fail = {
            #[allow(unused_imports)]
            use #private::rig::{ViaAnyhow as _, ViaBoxed as _, ViaError as _};
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
    let same_name = pinned.map(|lit| {
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

/// rig mode: the feature is on, and the attribute is on a method (a tool impl's `call`) that is
/// not also an MCP tool or a JSON-registered function.
pub(crate) fn check(cx: &Ctxt, args: &Args, tool: &Tool) {
    let Some(flag) = &args.rig else { return };
    if !cfg!(feature = "rig") {
        cx.error(
            flag.span(),
            "`rig` needs idemkit's `rig` feature: `idemkit = { version = \"...\", features = [\"rig\"] }`",
        );
        return;
    }
    if tool.receiver.is_none() {
        cx.error(
            flag.span(),
            "`rig` goes on the `call` method of a rig tool: `impl PortableTool for Charge { ... async fn call(&self, \
             args: ChargeArgs) -> Result<T, E> }`; this function has no `self`",
        );
    }
    if tool.mcp.is_some() {
        cx.error(
            flag.span(),
            "`rig` and rmcp's `#[tool]` on one method: a method serves either rig or MCP; remove one",
        );
    }
    if let Some(json) = &args.json {
        cx.error(
            json.span(),
            "`json` registers a free function for `JsonTools`; a rig tool is declared to rig by its own impl: remove `json`",
        );
    }
}
