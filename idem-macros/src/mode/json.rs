//! JSON mode (`json` on a free function, feature `json`): the arguments struct a JSON call is
//! read into (its schema derived), the call of the function with its fields, and the entry
//! `JsonTools` (and `idemkit::mcp::JsonToolsServer`) find it by. The dispatch itself is the
//! runtime's (`idem_runtime::json`). Its check hook (`check`) says what JSON mode refuses.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Ident;

use crate::ast::{self, Kind, Role, Tool};
use crate::attr::Args;
use crate::ctxt::Ctxt;
use crate::plan::{JsonPlan, Plan};

/// `json`: the arguments struct a JSON call is read into (its schema derived), the call of this
/// very function with its fields, and the entry `JsonTools` finds it by. The dispatch itself is the
/// runtime's (`idem_runtime::json`).
pub(crate) fn entry(tool: &Tool, plan: &Plan, json: &JsonPlan) -> TokenStream {
    let (private, params) = (&plan.private, &json.params);
    let args = Ident::new("__IdemkitJsonArgs", Span::call_site());
    let serde_crate = format!("{}::serde", private).replace(' ', "");
    let schemars_crate = format!("{}::schemars", private).replace(' ', "");
    let from_json = || params.iter().filter(|p| !p.host);
    let fields = from_json().map(|p| {
        let (ident, held) = (&p.ident, &p.held);
        quote!(#ident: #held)
    });
    let idents: Vec<&Ident> = from_json().map(|p| &p.ident).collect();
    let (ok, err, name) = (&plan.ok, &plan.err, &plan.name);
    // The host's operation, looked up before the call; refused (as the tool's error) without one.
    let lookup = plan.scoped_operation(&quote!(#name));
    let host = params.iter().filter(|p| p.host).map(|p| {
        let ident = &p.ident;
        quote! {
            let #ident = match #lookup {
                ::core::result::Result::Ok(id) => id,
                ::core::result::Result::Err(e) => {
                    return ::core::result::Result::Err(::core::convert::From::from(e));
                }
            };
        }
    });
    let pass = params.iter().map(|p| {
        let ident = &p.ident;
        if p.lent {
            quote!(&#ident)
        } else {
            quote!(#ident)
        }
    });
    let function = &tool.item.sig.ident;
    let kind = match tool.kind {
        Kind::SideEffect => quote!(SideEffect),
        Kind::ReadOnly => quote!(ReadOnly),
    };
    let description = crate::describe::description(&tool.item.attrs);
    let hint = |flag: &Option<syn::LitBool>| match flag {
        Some(b) => quote!(::core::option::Option::Some(#b)),
        None => quote!(::core::option::Option::None),
    };
    let (destructive, open_world) = (hint(&json.destructive), hint(&json.open_world));
    quote! {
        #[derive(#private::serde::Deserialize, #private::schemars::JsonSchema)]
        #[serde(crate = #serde_crate, deny_unknown_fields)]
        #[schemars(crate = #schemars_crate)]
        struct #args { #(#fields),* }
        impl #private::json::JsonArgs for #args {
            type Ok = #ok;
            type Err = #err;
            fn call(self) -> impl ::core::future::Future<
                Output = ::core::result::Result<Self::Ok, Self::Err>,
            > + ::core::marker::Send {
                let #args { #(#idents),* } = self;
                async move {
                    #(#host)*
                    #function(#(#pass),*).await
                }
            }
            fn describe(err: &Self::Err) -> #private::json::Described<'_> {
                #[allow(unused_imports)]
                use #private::json::{DescribeChain as _, DescribeDebug as _, DescribeDisplay as _};
                (&&#private::json::Describe(err)).describe()
            }
        }
        #private::inventory::submit! {
            #private::json::JsonEntry::new::<#args>(
                #name, #private::ToolKind::#kind, #description, #destructive, #open_world,
            )
        }
    }
}

/// `json`: the feature is on, and every argument can be read from a JSON object by name into a
/// free function's call (checked only when asked for: other tools keep any signature).
pub(crate) fn check(cx: &Ctxt, args: &Args, tool: &Tool) {
    let Some(flag) = &args.json else { return };
    if !cfg!(feature = "json") {
        cx.error(
            flag.span(),
            "`json` needs idemkit's `json` feature: `idemkit = { version = \"...\", features = [\"json\"] }`",
        );
        return;
    }
    if let Some(r) = &tool.receiver {
        cx.error_spanned(
            r,
            "a tool called from JSON (`json`) is a free `async fn`: the dispatcher calls it by name and has no `self` \
             to call a method on; make it a free function that reaches its client another way (a static, or \
             `idem = ...` for the runtime), or remove `json`",
        );
    }
    let generics = &tool.item.sig.generics;
    if let Some(param) = generics
        .params
        .iter()
        .find(|p| !matches!(p, syn::GenericParam::Lifetime(_)))
    {
        cx.error_spanned(
            param,
            "a tool called from JSON (`json`) cannot be generic: the dispatcher must know the one type each argument \
             is read into; make the parameter a concrete type, or remove `json`",
        );
    }
    for p in &tool.params {
        match &p.role {
            Role::InjectedKey => {}
            Role::Pattern { .. } => cx.error_spanned(
                &p.arg.pat,
                "a tool called from JSON (`json`) takes each argument by name: the JSON object's properties are the \
                 parameters' names; name this parameter (e.g. `req: ChargeReq`) and key on its fields (`req.customer_id`)",
            ),
            Role::Named(ident) => {
                if let ast::JsonField::No(why) = ast::json_field(&p.arg.ty) {
                    cx.error_spanned(
                        &p.arg.ty,
                        format!("`{ident}` cannot come from a JSON call (`json`): {why}; or remove `json`"),
                    );
                }
            }
        }
    }
}
