//! What a tool registers in the registry a program can list (`idemkit::registry::tools()`): its
//! `ToolInfo`, with the key fields' and the outcome's type names (for the manifest and the lock)
//! and the verify a settler asks.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::Ident;

use crate::ast::{Kind, Role, Tool};
use crate::plan::{Plan, Private};

/// Registers the tool in the registry a program can list (`idemkit::registry::tools()`).
pub(crate) fn registration(tool: &Tool, plan: &Plan) -> TokenStream {
    let private = &plan.private;
    let name = &plan.name;
    let kind = match tool.kind {
        Kind::SideEffect => quote!(SideEffect),
        Kind::ReadOnly => quote!(ReadOnly),
    };
    let key_fields = plan.keys.iter().map(|k| &k.name);
    let key_types = plan.keys.iter().map(|k| key_type(private, tool, k));
    let previous = plan.previous.as_ref().map_or(&[][..], |p| &p.keys[..]);
    let previous_fields = previous.iter().map(|k| &k.name);
    let previous_types = previous.iter().map(|k| key_type(private, tool, k));
    let description = crate::describe::description(&tool.item.attrs);
    let tenant_required = plan.tenant_required;
    let operation_scoped = tool.kind == Kind::SideEffect
        && tool
            .params
            .iter()
            .any(|p| matches!(p.role, Role::Named(_)) && crate::ast::is_operation_type(&p.arg.ty));
    let (resend, verify) = match tool.kind {
        Kind::SideEffect => (plan.resend, plan.verify.is_some()),
        Kind::ReadOnly => (false, false),
    };
    let (outcome_type, outcome_schema) = outcome_shape(private, tool, &plan.ok);
    let settle_verify = crate::settle::registered(tool, plan);
    quote! {
        #private::inventory::submit! {
            #private::ToolInfo {
                name: #name,
                kind: #private::ToolKind::#kind,
                key_fields: &[#(#key_fields),*],
                key_types: &[#(#key_types),*],
                previous_fields: &[#(#previous_fields),*],
                previous_types: &[#(#previous_types),*],
                tenant_required: #tenant_required,
                operation_scoped: #operation_scoped,
                resend: #resend,
                verify: #verify,
                settle_verify: #settle_verify,
                outcome_type: #outcome_type,
                outcome_schema: #outcome_schema,
                description: #description,
                module_path: ::core::module_path!(),
                file: ::core::file!(),
                line: ::core::line!(),
            }
        }
    }
}

/// A key field's type name, for the manifest (`idemkit::tools_manifest`): a function that names
/// it through the compiler (`type_name` of the field read from the parameter's type), or `"?"`
/// where the registration, a `static`, cannot name the parameter's type (it mentions the
/// function's generics, a named lifetime, `Self` or `impl Trait`; a destructured binding, `self`).
fn key_type(private: &Private, tool: &Tool, field: &crate::plan::KeyField) -> TokenStream {
    let unknown = quote!((|| "?") as fn() -> &'static str);
    if field.normalize.is_some() {
        return quote!((|| "str") as fn() -> &'static str);
    }
    let mut tokens = field.path.clone().into_iter();
    let Some(proc_macro2::TokenTree::Ident(root)) = tokens.next() else {
        return unknown;
    };
    let rest: TokenStream = tokens.collect();
    let Some(param) = tool
        .params
        .iter()
        .find(|p| matches!(&p.role, Role::Named(i) if *i == root))
    else {
        return unknown;
    };
    if !crate::ast::nameable_in_static(&param.arg.ty, &tool.item.sig.generics) {
        return unknown;
    }
    let ty = &param.arg.ty;
    let v = Ident::new("__idemkit_v", Span::mixed_site());
    // `(*v).field`: a field that does not exist is the same error as the key's own (the
    // same type and span), which rustc reports once.
    let read = if rest.is_empty() {
        quote!(#v)
    } else {
        quote!(&(*#v) #rest)
    };
    quote!((|| #private::key_type::<#ty, _>(|#v| #read)) as fn() -> &'static str)
}

/// The outcome type's name and its JSON Schema (where it has one), for the lock
/// (`idemkit::lock`): functions that name `T` through the compiler, or `"?"` and no schema where
/// the registration cannot name it (it mentions the function's generics, `Self`, a named
/// lifetime). The schema is picked by autoref specialisation: `T: JsonSchema` with idemkit's
/// `json` feature, else none.
fn outcome_shape(private: &Private, tool: &Tool, ok: &syn::Type) -> (TokenStream, TokenStream) {
    if !crate::ast::nameable_in_static(ok, &tool.item.sig.generics) {
        return (
            quote!((|| "?") as fn() -> &'static str),
            quote!((|| ::core::option::Option::None) as fn() -> ::core::option::Option<#private::serde_json::Value>),
        );
    }
    let ok = strip_spans(ok);
    (
        quote!((|| ::core::any::type_name::<#ok>()) as fn() -> &'static str),
        quote!((|| {
            #[allow(unused_imports)]
            use #private::{OutcomeSchema as _, OutcomeNoSchema as _};
            (&#private::OutcomeProbe::<#ok>::new()).outcome_schema()
        }) as fn() -> ::core::option::Option<#private::serde_json::Value>),
    )
}

/// `ty` re-spanned at the call site, so that nothing the registration does with it is reported
/// at the user's type (the checks of C8 report there, once).
fn strip_spans(ty: &syn::Type) -> TokenStream {
    fn respan(tokens: TokenStream) -> TokenStream {
        tokens
            .into_iter()
            .map(|tt| match tt {
                proc_macro2::TokenTree::Group(g) => {
                    let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream()));
                    group.set_span(Span::call_site());
                    proc_macro2::TokenTree::Group(group)
                }
                mut tt => {
                    tt.set_span(Span::call_site());
                    tt
                }
            })
            .collect()
    }
    respan(ty.to_token_stream())
}
