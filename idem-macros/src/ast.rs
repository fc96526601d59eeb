//! A typed model of the annotated function: which parameter is the injected key, which are
//! plain names, which destructure, and what the return type says. No judgement here: that is
//! `check`'s job.

pub(crate) use crate::attr::Kind;
use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream};
use syn::visit::Visit;

use syn::{
    Attribute, FnArg, GenericArgument, Ident, Meta, Pat, PatType, PathArguments, Receiver,
    ReturnType, Signature, Type, Visibility,
};

/// The annotated function as written: attributes, visibility and signature parsed, the body kept
/// as tokens.
///
/// The attribute needs no more of the body than its tokens: to hand them to each attempt, and to
/// scan them for the names they mention and for keys minted in them (C4). Parsing a body into
/// syn's expression tree, walking and printing it, was a sixth of the macro's run on the
/// one-line bodies of `benches/build_cost.sh` and half of it on bodies of a dozen lines (it grows
/// with the body, the rest does not); and a body that does not parse is better reported by the
/// compiler, at the offending token, than by the attribute. tracing's and tokio's attributes keep
/// the body as tokens for the same reasons.
pub(crate) struct Func {
    /// Outer attributes, then the body's inner ones (`#![...]`), as syn's `ItemFn` keeps them.
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub sig: Signature,
    /// The body's statements: the tokens inside its braces, after its inner attributes.
    pub body: TokenStream,
}

impl Parse for Func {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse()?;
        let content;
        syn::braced!(content in input);
        attrs.extend(content.call(Attribute::parse_inner)?);
        let body = content.parse()?;
        Ok(Func {
            attrs,
            vis,
            sig,
            body,
        })
    }
}

/// rmcp's `#[tool(...)]` on the method, as written (read by `mode::mcp::find`).
pub(crate) struct McpTool {
    /// Where it sits among the method's attributes.
    pub index: usize,
    /// Its arguments other than `annotations(...)`.
    pub others: Vec<Meta>,
    /// `annotations(title = ...)`, kept as written.
    pub title: Option<Meta>,
    /// Hand-written hints: name, value, and the tokens to point at.
    pub hints: Vec<(String, bool, TokenStream)>,
    /// `#[tool(name = "...")]`: the MCP name, which is also the default name in the key.
    pub name: Option<String>,
}

/// The annotated function.
pub(crate) struct Tool {
    pub kind: Kind,
    pub item: Func,
    pub receiver: Option<Receiver>,
    pub params: Vec<Param>,
    /// rmcp's `#[tool]` on the method, when there is one (MCP mode, see `mode::mcp`).
    pub mcp: Option<McpTool>,
}

/// One parameter other than `self`.
pub(crate) struct Param {
    pub arg: PatType,
    pub role: Role,
}

pub(crate) enum Role {
    /// `key: &IdempotencyKey`: supplied by the wrapper, absent from the callers' signature.
    InjectedKey,
    /// `customer_id: &str`, maybe `mut`: keeps its name in the callers' signature.
    Named(Ident),
    /// A destructuring pattern (`Parameters(ChargeReq { customer_id, .. })`): the callers'
    /// signature names it `fresh`; the body destructures it as written.
    Pattern { fresh: Ident, bindings: Vec<Ident> },
}

impl Param {
    /// The name the parameter has in the wrapper's signature (none for the injected key).
    pub fn outer_ident(&self) -> Option<&Ident> {
        match &self.role {
            Role::InjectedKey => None,
            Role::Named(ident) => Some(ident),
            Role::Pattern { fresh, .. } => Some(fresh),
        }
    }
}

impl Tool {
    pub fn new(kind: Kind, item: Func, mcp: Option<McpTool>) -> Self {
        let mut receiver = None;
        let mut params = Vec::new();
        for (index, arg) in item.sig.inputs.iter().enumerate() {
            match arg {
                FnArg::Receiver(r) => receiver = Some(r.clone()),
                FnArg::Typed(pt) => {
                    let role = if is_key_type(&pt.ty) {
                        Role::InjectedKey
                    } else {
                        match &*pt.pat {
                            Pat::Ident(pi) if pi.subpat.is_none() => Role::Named(pi.ident.clone()),
                            pat => Role::Pattern {
                                fresh: Ident::new(
                                    &format!("__idemkit_arg{index}"),
                                    Span::mixed_site(),
                                ),
                                bindings: bindings(pat),
                            },
                        }
                    };
                    params.push(Param {
                        arg: pt.clone(),
                        role,
                    });
                }
            }
        }
        Tool {
            kind,
            item,
            receiver,
            params,
            mcp,
        }
    }

    /// Whether `p` is the operation the host names (an MCP tool method's `OperationId`
    /// parameter): not in the signature rmcp's router sees, bound from
    /// `idemkit::scope::operation_scope` when the call starts.
    pub fn host_operation(&self, p: &Param) -> bool {
        self.mcp.is_some()
            && self.kind == Kind::SideEffect
            && matches!(p.role, Role::Named(_))
            && !matches!(peel(&p.arg.ty), Type::Reference(_))
            && is_operation_type(&p.arg.ty)
    }

    pub fn injected_key(&self) -> Option<&Param> {
        self.params
            .iter()
            .find(|p| matches!(p.role, Role::InjectedKey))
    }
}

/// `&IdempotencyKey`, `&'a idemkit::IdempotencyKey`: the type of the injected key.
pub(crate) fn is_key_type(ty: &Type) -> bool {
    match peel(ty) {
        Type::Reference(r) if r.mutability.is_none() => match peel(&r.elem) {
            Type::Path(p) if p.qself.is_none() => p
                .path
                .segments
                .last()
                .is_some_and(|s| s.ident == "IdempotencyKey" && s.arguments.is_empty()),
            _ => false,
        },
        _ => false,
    }
}

/// `OperationId` or `&OperationId` (any path ending so): in a tool a model calls (`json`), the
/// operation the host names (`idemkit::scope::operation_scope`), never a property the model sends.
pub(crate) fn is_operation_type(ty: &Type) -> bool {
    let ty = match peel(ty) {
        Type::Reference(r) if r.mutability.is_none() => peel(&r.elem),
        other => other,
    };
    matches!(ty, Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == "OperationId" && s.arguments.is_empty()))
}

/// The written key type without its reference (`&'a IdempotencyKey` → `IdempotencyKey`): the
/// wrapper binds the key with the user's own path, so their import of it stays used.
pub(crate) fn key_referent(ty: &Type) -> &Type {
    match peel(ty) {
        Type::Reference(r) => &r.elem,
        other => other,
    }
}

fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Paren(p) => peel(&p.elem),
        Type::Group(g) => peel(&g.elem),
        other => other,
    }
}

/// `Result<T, E>` (any path whose last segment is `Result` with two type arguments) → `(T, E)`.
/// `Result<T, E>` → `T` and `E`; a one-argument alias (`anyhow::Result<T>`, `io::Result<T>`, a
/// crate's own `Result<T>`) → `T` and no `E`: the alias's error type is then named through the
/// runtime's `ToolResult` trait, which the compiler resolves.
pub(crate) fn result_types(output: &ReturnType) -> Option<(&Type, Option<&Type>)> {
    let ReturnType::Type(_, ty) = output else {
        return None;
    };
    let Type::Path(p) = peel(ty) else { return None };
    let last = p.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    });
    match (types.next(), types.next(), types.next()) {
        (Some(t), Some(e), None) if args.args.len() == 2 => Some((t, Some(e))),
        (Some(t), None, None) if args.args.len() == 1 => Some((t, None)),
        _ => None,
    }
}

/// The names a pattern binds, in order.
fn bindings(pat: &Pat) -> Vec<Ident> {
    struct Bindings(Vec<Ident>);
    impl<'ast> Visit<'ast> for Bindings {
        fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
            self.0.push(p.ident.clone());
            syn::visit::visit_pat_ident(self, p);
        }
        fn visit_pat_or(&mut self, p: &'ast syn::PatOr) {
            // Every alternative binds the same names.
            if let Some(first) = p.cases.first() {
                self.visit_pat(first);
            }
        }
        // Paths, types and expressions inside a pattern bind nothing.
        fn visit_expr(&mut self, _: &'ast syn::Expr) {}
        fn visit_type(&mut self, _: &'ast Type) {}
    }
    let mut b = Bindings(Vec::new());
    b.visit_pat(pat);
    b.0
}

/// How a parameter's value arrives from a JSON call (`json` on the tool): the type its
/// arguments struct holds, and whether the tool borrows it from there.
pub(crate) enum JsonField {
    /// Deserialized as written, moved into the call.
    Owned(Type),
    /// Deserialized as an owned type (`&str` → `String`, `&[T]` → `Vec<T>`, `&T` → `T`) and
    /// lent to the call.
    Lent(Type),
    /// Cannot be read from JSON: `impl Trait`, `&mut`, or a borrow inside the type.
    No(&'static str),
}

/// The way `ty` arrives from a JSON call.
pub(crate) fn json_field(ty: &Type) -> JsonField {
    use quote::quote_spanned;
    use syn::spanned::Spanned;
    let (held, lent) = match peel(ty) {
        Type::ImplTrait(_) => {
            return JsonField::No("an `impl Trait` argument has no one type to read JSON into");
        }
        Type::Reference(r) if r.mutability.is_some() => {
            return JsonField::No("a JSON call owns its arguments and has nothing to lend mutably");
        }
        Type::Reference(r) => {
            let held: Type = match peel(&r.elem) {
                Type::Path(p) if p.qself.is_none() && p.path.is_ident("str") => {
                    syn::parse_quote_spanned!(r.elem.span()=> ::std::string::String)
                }
                Type::Slice(s) => {
                    let elem = &s.elem;
                    syn::parse2(quote_spanned!(r.elem.span()=> ::std::vec::Vec<#elem>))
                        .expect("a Vec type parses")
                }
                elem => elem.clone(),
            };
            (held, true)
        }
        other => (other.clone(), false),
    };
    if borrows(&held) {
        return JsonField::No(
            "it borrows, and a JSON call's arguments are owned: take an owned type (`String`, `Vec<T>`, `T`)",
        );
    }
    if lent {
        JsonField::Lent(held)
    } else {
        JsonField::Owned(held)
    }
}

/// Whether a type holds a reference, a lifetime or an `impl Trait` anywhere inside.
fn borrows(ty: &Type) -> bool {
    struct Borrows(bool);
    impl<'ast> Visit<'ast> for Borrows {
        fn visit_type_reference(&mut self, _: &'ast syn::TypeReference) {
            self.0 = true;
        }
        fn visit_lifetime(&mut self, _: &'ast syn::Lifetime) {
            self.0 = true;
        }
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut b = Borrows(false);
    b.visit_type(ty);
    b.0
}

/// Whether `ty` is `Copy` by its spelling alone: `&T`, or a primitive number, `bool` or `char`
/// named by its bare name (a type alias or a path is not looked through).
pub(crate) fn copy_as_written(ty: &syn::Type) -> bool {
    const PRIMITIVES: [&str; 16] = [
        "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
        "f32", "f64", "bool", "char",
    ];
    match ty {
        syn::Type::Reference(r) => r.mutability.is_none(),
        syn::Type::Paren(p) => copy_as_written(&p.elem),
        syn::Type::Group(g) => copy_as_written(&g.elem),
        syn::Type::Path(p) if p.qself.is_none() => p
            .path
            .get_ident()
            .is_some_and(|ident| PRIMITIVES.iter().any(|prim| ident == prim)),
        _ => false,
    }
}

/// Whether `ty` can be named in an item nested in the function (a `static`).
pub(crate) fn nameable_in_static(ty: &syn::Type, generics: &syn::Generics) -> bool {
    use syn::visit::Visit;
    struct Nameable<'g> {
        ok: bool,
        generics: &'g syn::Generics,
    }
    impl<'ast> Visit<'ast> for Nameable<'_> {
        fn visit_lifetime(&mut self, l: &'ast syn::Lifetime) {
            if l.ident != "static" && l.ident != "_" {
                self.ok = false;
            }
        }
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.ok = false;
        }
        fn visit_type_macro(&mut self, _: &'ast syn::TypeMacro) {
            self.ok = false;
        }
        fn visit_ident(&mut self, i: &'ast Ident) {
            let generic = self.generics.params.iter().any(|p| match p {
                syn::GenericParam::Type(t) => t.ident == *i,
                syn::GenericParam::Const(c) => c.ident == *i,
                syn::GenericParam::Lifetime(_) => false,
            });
            if generic || i == "Self" {
                self.ok = false;
            }
        }
    }
    let mut v = Nameable { ok: true, generics };
    v.visit_type(ty);
    v.ok
}
