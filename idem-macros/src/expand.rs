//! Code generation: the wrapper that keeps the written signature (minus the injected key) and runs
//! the original body, moved into the attempt closure, through the runtime.
//!
//! Everything the expansion names is reached through `::idemkit::__private` (or the `crate = ...`
//! path), never through a crate the user may have renamed or never named.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, Ident, Pat};

use crate::ast::copy_as_written;
use crate::ast::{Kind, Param, Role, Tool};
use crate::plan::{Plan, Private, VerifyArg, VerifyPlan};

/// The internal local every attempt's key arrives in; invisible to the body (mixed-site hygiene).
fn key_local() -> Ident {
    Ident::new("__idemkit_key", Span::mixed_site())
}

pub(crate) fn tool(tool: &Tool, plan: &Plan) -> TokenStream {
    let private = &plan.private;
    let attrs = plan.mode.attrs(tool, outer_attrs(&tool.item.attrs));
    let vis = &tool.item.vis;
    let mut sig = outer_signature(tool);
    let mut register = if plan.registered {
        crate::register::registration(tool, plan)
    } else {
        TokenStream::new()
    };
    if let Some(json) = &plan.json {
        register.extend(crate::mode::json::entry(tool, plan, json));
    }
    let mut settings = settings(plan);
    // S28: the arguments a tool with `verify` keeps with its record, for the settler.
    let kept = Ident::new("__idemkit_kept", Span::mixed_site());
    let keep = crate::settle::keep(tool, plan, &kept);
    if tool.kind == Kind::SideEffect {
        // Always: a `Tool` built without it re-sends, and S20's default depends on the signature.
        let resend = plan.resend;
        settings.extend(quote!(.resend(#resend)));
        if plan.verify.is_some() {
            settings.extend(quote!(.with_verify()));
        }
        if let Some((_, setting)) = &keep {
            settings.extend(setting.clone());
        }
    }
    let keep = keep.map(|(statement, _)| statement);
    let (per_attempt, attempt) = attempt(private, tool);
    let call = Ident::new("__idemkit_call", Span::mixed_site());
    let (ok, err) = (&plan.ok, &plan.err);
    let name = &plan.name_expr;

    let checks = type_checks(private, tool.kind, ok, err);
    let runner = runner(private, tool.kind, ok, err);
    let body = match tool.kind {
        Kind::SideEffect => {
            let key = key_local();
            let destructure = tool.params.iter().filter_map(|p| match &p.role {
                Role::Pattern { fresh, bindings } if !bindings.is_empty() => {
                    let pat = &p.arg.pat;
                    let copy =
                        quote_spanned!(p.arg.ty.span()=> #private::PerAttempt::again(&#fresh));
                    Some(quote! {
                        // Its bindings, for the key and the fingerprint.
                        #[allow(unused_variables, unused_mut)]
                        let #pat = #copy;
                    })
                }
                _ => None,
            });
            let hasher = Ident::new("__idemkit_hasher", Span::mixed_site());
            let n_fields = plan.keys.len();
            let previous = plan
                .previous
                .as_ref()
                .map(|p| previous_lookup(private, name, &hasher, &call, p));
            // C3: each value is borrowed at the user's span, so a non-`KeyPart` type is reported there.
            let key_fields = plan.keys.iter().map(|k| key_field(private, &hasher, k));
            let fingerprint = plan.fingerprint.iter().map(fingerprint_arg);
            let args_local = Ident::new("__idemkit_args", Span::mixed_site());
            let verify = plan
                .verify
                .as_ref()
                .map(|v| verify_step(private, v, &call, ok, err));

            // An MCP tool's `OperationId`: the operation the host named, refused without one.
            let lookup = plan.scoped_operation(name);
            let host = tool
                .params
                .iter()
                .filter(|p| tool.host_operation(p))
                .map(|p| {
                    let (pat, ty) = (&p.arg.pat, &p.arg.ty);
                    quote! {
                        let #pat: #ty = match #lookup {
                            ::core::result::Result::Ok(id) => id,
                            ::core::result::Result::Err(e) => {
                                return ::core::result::Result::Err(::core::convert::From::from(e));
                            }
                        };
                    }
                });
            quote! {
                #register
                #(#host)*
                #(#destructure)*
                // The key is derived here, once, before the first attempt.
                let #key = {
                    let mut #hasher = #private::KeyHasher::new(#name, #n_fields);
                    #(#key_fields)*
                    #hasher.finish_in_place()
                };
                let #args_local = #private::Arguments::new() #(#fingerprint)* .finish();
                #keep
                #checks
                let mut #call = #runner.side_effect(#settings, #key, #args_local);
                #previous
                while let ::core::option::Option::Some(#key) = #call.attempt().await {
                    #verify
                    #(#per_attempt)*
                    #call.run(#attempt).await;
                }
                #call.end()
            }
        }
        Kind::ReadOnly => quote! {
            #register
            #checks
            let mut #call = #runner.read_only(#settings);
            while #call.attempt().await.is_some() {
                #(#per_attempt)*
                #call.ended(#attempt.await);
            }
            #call.end()
        },
    };
    let (output, body) = plan.mode.serve(tool, plan, body);
    if let Some(output) = output {
        sig = replace_output(sig, output);
    }
    quote! {
        #(#attrs)*
        #vis #sig {
            #body
        }
    }
}

/// `previous = "..."`: the key and fingerprint the previous derivation makes of this call's
/// arguments, handed to the call, which looks its operation up under them before claiming its own
/// key.
fn previous_lookup(
    private: &Private,
    name: &TokenStream,
    hasher: &Ident,
    call: &Ident,
    previous: &crate::plan::Previous,
) -> TokenStream {
    let n_fields = previous.keys.len();
    let local = Ident::new("__idemkit_previous_key", Span::mixed_site());
    let fields = previous.keys.iter().map(|k| key_field(private, hasher, k));
    let fingerprint = previous.fingerprint.iter().map(fingerprint_arg);
    quote! {
        let #local = {
            let mut #hasher = #private::KeyHasher::new(#name, #n_fields);
            #(#fields)*
            #hasher.finish_in_place()
        };
        #call.previous(
            #local,
            #private::Arguments::new() #(#fingerprint)* .finish(),
        );
    }
}

/// One key field hashed: borrowed at the user's span (C3), normalised first where asked.
fn key_field(private: &Private, hasher: &Ident, k: &crate::plan::KeyField) -> TokenStream {
    let (field, path) = (&k.name, &k.path);
    let value = match k.normalize {
        None => quote_spanned!(k.span=> &#path),
        Some(n) => {
            let f = Ident::new(n.name(), Span::call_site());
            quote_spanned!(k.span=> &#private::normalize::#f(#private::KeyText::key_text(&#path)))
        }
    };
    quote!(#hasher.field(#field, #value);)
}

/// One fingerprinted argument: `.arg(name, &value)`, without its key fields where it has some.
fn fingerprint_arg(f: &crate::plan::FingerprintArg) -> TokenStream {
    let (arg, ident) = (&f.name, &f.ident);
    let value = quote_spanned!(f.span=> &#ident);
    match f.except.as_slice() {
        [] => quote!(.arg(#arg, #value)),
        except => quote!(.arg_except(#arg, #value, &[#(#except),*])),
    }
}

/// `sig` (as tokens) with another return type; the written `->` keeps its span, so that rustc's
/// errors about the return type (a trait expecting another) point at the user's signature.
fn replace_output(sig: TokenStream, output: TokenStream) -> TokenStream {
    let mut sig: syn::Signature = syn::parse2(sig).expect("a signature reparses");
    let arrow = match &sig.output {
        syn::ReturnType::Type(arrow, _) => *arrow,
        syn::ReturnType::Default => Default::default(),
    };
    sig.output = syn::ReturnType::Type(arrow, Box::new(syn::parse_quote!(#output)));
    sig.into_token_stream()
}

/// Outer attributes as written; inner ones (`#![allow(...)]` in the body) become outer ones.
pub(crate) fn outer_attrs(attrs: &[Attribute]) -> Vec<TokenStream> {
    attrs
        .iter()
        .map(|a| {
            let meta = &a.meta;
            let pound = &a.pound_token;
            quote!(#pound[#meta])
        })
        .collect()
}

/// The signature callers see: as written, minus the injected key, with destructuring patterns
/// given a plain name and `mut`/`ref` dropped (they belong to the body, which rebinds).
fn outer_signature(tool: &Tool) -> TokenStream {
    let mut sig = tool.item.sig.clone();
    let mut params = tool.params.iter();
    sig.inputs = sig
        .inputs
        .into_iter()
        .filter_map(|arg| match arg {
            FnArg::Receiver(r) => Some(FnArg::Receiver(r)),
            FnArg::Typed(mut pt) => {
                let param = params.next().expect("one model entry per parameter");
                if tool.host_operation(param) {
                    return None;
                }
                let ident = param.outer_ident()?.clone();
                pt.pat = Box::new(Pat::Ident(syn::PatIdent {
                    attrs: Vec::new(),
                    by_ref: None,
                    mutability: None,
                    ident,
                    subpat: None,
                }));
                Some(FnArg::Typed(pt))
            }
        })
        .collect();
    sig.into_token_stream()
}

/// What runs once per attempt, awaited in place by the call's loop: the statements that hand
/// every argument anew (cloned, unless `Copy` as written), and the original body in an
/// `async move` block (so that its `return` and `?` end the attempt, not the call).
fn attempt(private: &Private, tool: &Tool) -> (Vec<TokenStream>, TokenStream) {
    // The body's statements, not its block: a block as the tail of the `async move` block would
    // be linted as unnecessary braces when it holds one expression (issue 16). Kept as written
    // (`ast::Func`), and scanned once for the names it mentions.
    let stmts = &tool.item.body;
    let mentioned = Mentions::of(stmts);
    let per_attempt = tool
        .params
        .iter()
        .filter(|p| match &p.role {
            // Rebound by name inside the attempt (`let mut note = note;`), or used by the body.
            Role::Named(ident) => rebind(p).is_some() || mentioned.has(&ident.to_string()),
            Role::InjectedKey | Role::Pattern { .. } => true,
        })
        .filter_map(|p| per_attempt_clone(private, p))
        .collect();
    let rebind = tool.params.iter().filter_map(rebind);
    let key = key_local();
    let injected = tool.injected_key().map(|p| {
        let pat = &p.arg.pat;
        let ty = crate::ast::key_referent(&p.arg.ty);
        quote!(let #pat: &#ty = &#key;)
    });
    let output = written_output(&tool.item.sig);
    let pin_output = fake_return(private, &output);
    let body = quote! {
        #pin_output
        #(#rebind)*
        #injected
        #stmts
    };
    (per_attempt, quote!(async move { #body }))
}

/// The return type as written (`()` when none is).
pub(crate) fn written_output(sig: &syn::Signature) -> TokenStream {
    match &sig.output {
        syn::ReturnType::Type(_, ty) => ty.to_token_stream(),
        syn::ReturnType::Default => quote!(()),
    }
}

/// The "fake return edge" (tracing-attributes) an attempt's body starts with: pins its block's
/// output to `output` before the body is checked, so `?` and `.into()` in the body infer as they
/// do in the function. A call of a function that is never run, rather than tracing's
/// `let r: T = loop {}; return r;`: no diverging code, so no lints to allow, and less for the
/// compiler to check per tool (200 tools: 0.12 G of 8.9 G compiler instructions, by cachegrind).
pub(crate) fn fake_return(private: &Private, output: &TokenStream) -> TokenStream {
    quote! {
        if false {
            return #private::fake_return::<#output>();
        }
    }
}

/// `let note = PerAttempt::again(&note);`, spanned at the parameter's type, so an argument that
/// is not `Clone` is reported there. None for a named argument whose type is `Copy` as written
/// (a shared reference, a number, `bool`, `char`): the `async move` block copies it, and the
/// compiler has one call less to check per argument and attempt loop.
fn per_attempt_clone(private: &Private, p: &Param) -> Option<TokenStream> {
    match &p.role {
        Role::InjectedKey => None,
        Role::Pattern { bindings, .. } if bindings.is_empty() => None,
        Role::Named(_) if copy_as_written(&p.arg.ty) => None,
        Role::Named(ident) | Role::Pattern { fresh: ident, .. } => {
            let again = quote_spanned!(p.arg.ty.span()=> #private::PerAttempt::again(&#ident));
            Some(quote!(let #ident = #again;))
        }
    }
}

/// What tokens may refer to: a local `name` is mentioned by an identifier of that name, or by a
/// literal containing it (`format!("{name}")` captures it from inside a string). An argument the
/// body cannot refer to is not handed to each attempt (no clone per attempt, no capture).
struct Mentions {
    idents: std::collections::HashSet<String>,
    literals: Vec<String>,
}

impl Mentions {
    /// Every identifier in `tokens`, and every literal's text (a format string's inline
    /// arguments, `"{note}"`, name parameters too).
    fn of(tokens: &TokenStream) -> Self {
        fn scan(tokens: &TokenStream, m: &mut Mentions) {
            for tree in tokens.clone() {
                match tree {
                    proc_macro2::TokenTree::Ident(ident) => {
                        m.idents.insert(ident.to_string());
                    }
                    proc_macro2::TokenTree::Literal(lit) => m.literals.push(lit.to_string()),
                    proc_macro2::TokenTree::Group(group) => scan(&group.stream(), m),
                    proc_macro2::TokenTree::Punct(_) => {}
                }
            }
        }
        let mut m = Mentions {
            idents: Default::default(),
            literals: Vec::new(),
        };
        scan(tokens, &mut m);
        m
    }

    /// Whether the tokens mention `name`.
    fn has(&self, name: &str) -> bool {
        self.idents.contains(name) || self.literals.iter().any(|l| l.contains(name))
    }
}

/// Inside the attempt, the parameter as written: `let mut note = note;`, or the destructuring.
fn rebind(p: &Param) -> Option<TokenStream> {
    let pat = &p.arg.pat;
    match &p.role {
        Role::InjectedKey => None,
        Role::Pattern { bindings, .. } if bindings.is_empty() => None,
        Role::Pattern { fresh, .. } => Some(quote!(let #pat = #fresh;)),
        Role::Named(ident) => match &**pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.mutability.is_none() => None,
            _ => Some(quote!(let #pat = #ident;)),
        },
    }
}

/// S19: when the call hands out a verification rather than an attempt, the verify function is
/// asked, with the tool's arguments as the body gets them (`self` first, the key lent, owned
/// arguments cloned), and the loop goes on to the call's next step.
///
/// C10: the function is looked at through `VerifyProbe` (autoref specialization, as the runner):
/// a `Verifier` when it is an `async fn` of the tool's parameters answering
/// `Result<Verified<T>, E>`, else a `Misfit` that is never run. A trait of the tool's own, with
/// the signature to write as its `on_unimplemented` message, is asserted of it at the path, so a
/// signature that does not fit is one error there, and the call itself adds none.
fn verify_step(
    private: &Private,
    verify: &VerifyPlan,
    call: &Ident,
    ok: &syn::Type,
    err: &syn::Type,
) -> TokenStream {
    let key = key_local();
    let path = &verify.path;
    let span = path.span();
    let types = &verify.types;
    let args = verify.args.iter().map(|a| match a {
        VerifyArg::Receiver => quote!(self),
        VerifyArg::Key => quote!(&#key),
        VerifyArg::Param {
            ident, copy: true, ..
        } => quote!(#ident),
        VerifyArg::Param { ident, span, .. } => {
            quote_spanned!(*span=> #private::PerAttempt::again(&#ident))
        }
    });
    let message = format!("`verify` must be `{}`", verify.signature);
    let probe = quote_spanned! {span=>
        (&#private::VerifyProbe::<_, (#(#types,)*), #ok, #err>::new(#path)).verify_fit()
    };
    // The assertion's argument spans the path, first token to last, in the path's own context
    // (a local of the expansion's context would widen it to the whole attribute), so rustc
    // underlines the path and nothing else.
    let last = path
        .to_token_stream()
        .into_iter()
        .last()
        .map_or(span, |t| t.span());
    let verifier = Ident::new("__idemkit_verify", last);
    let fits = quote_spanned!(span=> __idemkit_verify_fits(&#verifier););
    let fits_fn = quote_spanned!(span=> fn __idemkit_verify_fits<V: __IdemkitVerifyFn>(_: &V) {});
    quote! {
        if #call.verifying() {
            #[diagnostic::on_unimplemented(
                message = #message,
                label = "does not fit the tool's parameters and result",
                note = "a `verify` function takes the tool's parameters, in the same order and of the same types (the `&IdempotencyKey` too where the tool takes it, `self` first for a method), and answers whether the attempt took effect: `Verified::Applied(outcome)`, `Verified::NotApplied` or `Verified::Unknown`"
            )]
            trait __IdemkitVerifyFn {}
            #[diagnostic::do_not_recommend]
            impl<F, A, T, E> __IdemkitVerifyFn for #private::Verifier<F, A, T, E> {}
            #fits_fn
            #[allow(unused_imports)]
            use #private::{VerifyFits as _, VerifyMisfits as _};
            let #verifier = #probe;
            #fits
            // Why a verification failed is kept (the record's note, the span): the error's
            // `Display`, else its `Debug` (autoref specialization, as the probe).
            #[allow(unused_imports)]
            use #private::{DescribeByDisplay as _, DescribeByDebug as _, DescribeNot as _};
            #call.describe_errors((&&&#private::Describe::<#err>::new()).describer());
            #call.verify(#verifier.call((#(#args,)*))).await;
            continue;
        }
    }
}

/// `Tool::new(name)` with the knobs of the attribute.
fn settings(plan: &Plan) -> TokenStream {
    let (private, name, knobs) = (&plan.private, &plan.name_expr, &plan.knobs);
    let mut tool = quote!(#private::Tool::new(#name));
    if let Some((kw, expr)) = &knobs.idem {
        let method = format_ident!("idem", span = kw.span());
        tool.extend(quote!(.#method(&#expr)));
    }
    if let Some((kw, expr)) = &knobs.retry {
        let method = format_ident!("retry", span = kw.span());
        tool.extend(quote!(.#method(#expr)));
    }
    if let Some(n) = &knobs.max_attempts {
        tool.extend(quote!(.max_attempts(#n)));
    }
    if plan.tenant_required {
        tool.extend(quote!(.tenant_required()));
    }
    for (method, value) in [
        ("lease", &knobs.lease),
        ("ttl", &knobs.ttl),
        ("in_flight_wait", &knobs.in_flight_wait),
    ] {
        if let Some(ms) = value {
            let method = format_ident!("{method}");
            let ms = ms.0;
            tool.extend(quote!(.#method(::core::time::Duration::from_millis(#ms))));
        }
    }
    tool
}

/// C8: `T` and `E` named at the user's spans, so an unmet bound is reported there, once, with
/// the trait's own `on_unimplemented` text.
fn type_checks(private: &Private, kind: Kind, ok: &syn::Type, err: &syn::Type) -> TokenStream {
    let classify = quote_spanned!(err.span()=> #private::assert_classify::<#err>(););
    match kind {
        Kind::SideEffect => {
            let output = quote_spanned!(ok.span()=> #private::assert_output::<#ok>(););
            let from = quote_spanned!(err.span()=> #private::assert_from_error::<#err>(););
            quote!(#output #classify #from)
        }
        Kind::ReadOnly => classify,
    }
}

/// The runner, picked by autoref specialization: the real one when the types pass the checks,
/// else one that is never run, so the call does not repeat the checks' errors at the attribute.
fn runner(private: &Private, kind: Kind, ok: &syn::Type, err: &syn::Type) -> TokenStream {
    let (checked, unchecked, method) = match kind {
        Kind::SideEffect => (
            quote!(SideEffectChecked),
            quote!(SideEffectUnchecked),
            quote!(side_effect_runner),
        ),
        Kind::ReadOnly => (
            quote!(ReadOnlyChecked),
            quote!(ReadOnlyUnchecked),
            quote!(read_only_runner),
        ),
    };
    quote! {
        {
            #[allow(unused_imports)]
            use #private::{#checked as _, #unchecked as _};
            (&#private::Probe::<#ok, #err>::new()).#method()
        }
    }
}
