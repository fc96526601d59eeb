//! S28, one verify per tool: what a tool with `verify = path` keeps with its record (its
//! arguments, as JSON) and registers for a settler (its verify, asked from those arguments), so
//! that a settler finds the tool's own verify by the tool's name and the host lists nothing.
//!
//! Only where the settler can call the verify without the caller: a free function (no `self`),
//! whose parameters' and result's types can be named outside it (no generics, no lifetime but
//! `'static`, no `impl Trait`). Whether the arguments serialize, deserialize and the verify
//! future is `Send` is picked by the runtime's probes (autoref specialization): a tool that fails
//! any of these keeps nothing and registers none, and its records are settled as before (a verify
//! listed by hand, or an operator).

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Ident, Type};

use crate::ast::{Kind, Role, Tool};
use crate::plan::Plan;

/// How one of the verify function's arguments comes back in the settler.
enum Form {
    /// The record's key, lent.
    Key(TokenStream),
    /// A parameter owned as written: decoded as its own type, moved in.
    Owned { ident: Ident, ty: Type },
    /// A parameter borrowed (`&T`): decoded as an owned form (`String` for `str`, `Vec<X>` for
    /// `[X]`, else `T`), lent.
    Borrowed { ident: Ident, referent: Type },
}

/// The forms of the verify's arguments, where the settler can call it (see the module docs).
fn forms(tool: &Tool, plan: &Plan) -> Option<Vec<Form>> {
    let verify = plan.verify.as_ref()?;
    if tool.kind != Kind::SideEffect || !plan.registered || tool.receiver.is_some() {
        return None;
    }
    // A path through `Self`, a qualified or generic one: not nameable outside the function.
    let path = &verify.path;
    if path.qself.is_some()
        || path
            .path
            .segments
            .iter()
            .any(|s| s.ident == "Self" || !s.arguments.is_none())
    {
        return None;
    }
    let generics = &tool.item.sig.generics;
    let nameable = |ty: &Type| crate::ast::nameable_in_static(ty, generics) && !borrows(ty);
    if !nameable(&plan.ok) || !nameable(&plan.err) {
        return None;
    }
    let mut forms = Vec::new();
    for p in &tool.params {
        let ident = match &p.role {
            Role::InjectedKey => {
                let referent = crate::ast::key_referent(&p.arg.ty);
                forms.push(Form::Key(quote!(&#referent)));
                continue;
            }
            Role::Named(ident) | Role::Pattern { fresh: ident, .. } => ident.clone(),
        };
        match &*p.arg.ty {
            Type::Reference(r) if r.mutability.is_none() && nameable(&r.elem) => {
                forms.push(Form::Borrowed {
                    ident,
                    referent: (*r.elem).clone(),
                });
            }
            ty if nameable(ty) => forms.push(Form::Owned {
                ident,
                ty: ty.clone(),
            }),
            _ => return None,
        }
    }
    Some(forms)
}

/// Whether `ty` holds a lifetime other than `'static` (an elided one in a reference included):
/// the settler's decoded arguments own everything.
fn borrows(ty: &Type) -> bool {
    use syn::visit::Visit;
    struct Borrows(bool);
    impl<'ast> Visit<'ast> for Borrows {
        fn visit_lifetime(&mut self, l: &'ast syn::Lifetime) {
            if l.ident != "static" {
                self.0 = true;
            }
        }
        fn visit_type_reference(&mut self, r: &'ast syn::TypeReference) {
            if r.lifetime.as_ref().is_none_or(|l| l.ident != "static") {
                self.0 = true;
            }
            syn::visit::visit_type_reference(self, r);
        }
    }
    let mut v = Borrows(false);
    v.visit_type(ty);
    v.0
}

/// The owned type a borrowed parameter's value is decoded as.
fn owned_form(referent: &Type) -> TokenStream {
    match referent {
        Type::Path(p) if p.qself.is_none() && p.path.is_ident("str") => {
            quote!(::std::string::String)
        }
        Type::Slice(s) => {
            let elem = &s.elem;
            quote!(::std::vec::Vec<#elem>)
        }
        ty => quote!(#ty),
    }
}

fn local(i: usize) -> Ident {
    Ident::new(&format!("__idemkit_arg{i}"), Span::mixed_site())
}

/// The call's side: the arguments kept with its record (`Option<Vec<u8>>` in `kept`), as the
/// statement that computes them and the setting that hands them to the claim; nothing for a
/// tool whose verify the settler cannot call.
pub(crate) fn keep(tool: &Tool, plan: &Plan, kept: &Ident) -> Option<(TokenStream, TokenStream)> {
    let private = &plan.private;
    let forms = forms(tool, plan)?;
    let mut owned = Vec::new();
    let mut values = Vec::new();
    for form in &forms {
        match form {
            Form::Key(_) => {}
            Form::Owned { ident, ty } => {
                owned.push(quote!(#ty));
                values.push(quote!(&#ident));
            }
            Form::Borrowed { ident, referent } => {
                owned.push(owned_form(referent));
                values.push(quote!(#ident));
            }
        }
    }
    let statement = quote! {
        let #kept: ::core::option::Option<::std::vec::Vec<u8>> = {
            #[allow(unused_imports)]
            use #private::{KeepsArguments as _, KeepsNothing as _};
            (&#private::KeepArguments::<(#(#owned,)*), _>::new(&(#(#values,)*))).kept()
        };
    };
    let setting = quote!(.keep_arguments(::core::option::Option::as_deref(&#kept)));
    Some((statement, setting))
}

/// The registration's `settle_verify`: the tool's verify asked from the arguments a call kept,
/// or none.
pub(crate) fn registered(tool: &Tool, plan: &Plan) -> TokenStream {
    let private = &plan.private;
    let signature = quote!(fn() -> ::core::option::Option<#private::StoredVerify>);
    let none = quote!((|| ::core::option::Option::None) as #signature);
    let (Some(forms), Some(verify)) = (forms(tool, plan), plan.verify.as_ref()) else {
        return none;
    };
    let (ok, err, path) = (&plan.ok, &plan.err, &verify.path);
    let key = Ident::new("__idemkit_key", Span::mixed_site());
    let mut owned = Vec::new();
    let mut locals = Vec::new();
    let mut types = Vec::new();
    let mut passed = Vec::new();
    for (i, form) in forms.iter().enumerate() {
        match form {
            Form::Key(ty) => {
                types.push(ty.clone());
                passed.push(quote!(&#key));
            }
            Form::Owned { ty, .. } => {
                let local = local(i);
                owned.push(quote!(#ty));
                types.push(quote!(#ty));
                passed.push(quote!(#local));
                locals.push(local);
            }
            Form::Borrowed { referent, .. } => {
                let local = local(i);
                owned.push(owned_form(referent));
                types.push(quote!(&#referent));
                passed.push(quote!(::core::borrow::Borrow::borrow(&#local)));
                locals.push(local);
            }
        }
    }
    let args = Ident::new("__idemkit_args", Span::mixed_site());
    let verifier = Ident::new("__idemkit_verifier", Span::mixed_site());
    let describe = Ident::new("__idemkit_describe", Span::mixed_site());
    quote! {{
        fn __idemkit_settle_verify() -> ::core::option::Option<#private::StoredVerify> {
            #[allow(unused_variables)]
            async fn __idemkit_settle_call(
                #args: (#(#owned,)*),
                #key: #private::IdempotencyKey,
            ) -> #private::VerifyAnswer {
                let (#(#locals,)*) = #args;
                #[allow(unused_imports)]
                use #private::{VerifyFits as _, VerifyMisfits as _};
                let #verifier =
                    (&#private::VerifyProbe::<_, (#(#types,)*), #ok, #err>::new(#path)).verify_fit();
                #[allow(unused_imports)]
                use #private::{DescribeByDisplay as _, DescribeByDebug as _, DescribeNot as _};
                let #describe = (&&&#private::Describe::<#err>::new()).describer();
                #private::settle_answer(#verifier.call((#(#passed,)*)).await, #describe)
            }
            #[allow(unused_imports)]
            use #private::{SettleFits as _, SettleMisfits as _};
            (&#private::SettleProbe::<(#(#owned,)*), _>::new(__idemkit_settle_call)).settle_verify()
        }
        __idemkit_settle_verify as #signature
    }}
}
