//! Lowering: the plan (`plan::Plan`) made from the arguments and a tool that passed every
//! check; a mode's part of it comes from the mode's hooks (`mode::mcp::key_path`,
//! `mode::mcp::derived`).

use quote::{ToTokens, quote};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Ident, Type};

use crate::ast::{self, Kind, Role, Tool};
use crate::attr::{Args, KeyArg, KeyPath};
use crate::plan::{
    FingerprintArg, JsonParam, JsonPlan, KeyField, Knobs, Mode, Plan, Previous, Private, VerifyArg,
    VerifyPlan,
};

/// The plan of a tool that passed every check: the arguments end here.
pub(crate) fn lower(args: Args, tool: &Tool) -> Plan {
    let private = Private::of(&args);
    let (ok, err) = ast::result_types(&tool.item.sig.output)
        .expect("checked: the return type is `Result<T, E>` or a one-argument alias of it");
    let ok = ok.clone();
    let err = match (err, &tool.item.sig.output) {
        (Some(err), _) => err.clone(),
        // `anyhow::Result<T>` and the like: the compiler names the error type.
        (None, syn::ReturnType::Type(_, ret)) => {
            syn::parse_quote_spanned!(ret.span()=> <#ret as #private::ToolResult>::Err)
        }
        (None, syn::ReturnType::Default) => unreachable!("checked: a return type"),
    };
    let (keys, fingerprint) = match (tool.kind, &args.key) {
        (Kind::SideEffect, Some(key)) => key_fields(tool, key),
        _ => (Vec::new(), Vec::new()),
    };
    let previous = match (tool.kind, &args.previous) {
        (Kind::SideEffect, Some(previous)) => {
            let (keys, fingerprint) = key_fields(tool, previous);
            Some(Previous { keys, fingerprint })
        }
        _ => None,
    };
    let name = match &args.name {
        Some(lit) => lit.value(),
        // An MCP tool's name (`#[tool(name = "...")]`) is what clients call it by.
        None => match tool.mcp.as_ref().and_then(|m| m.name.clone()) {
            Some(name) => name,
            None => tool.item.sig.ident.unraw().to_string(),
        },
    };
    let json = args.json.as_ref().map(|_| JsonPlan {
        params: json_params(tool),
        destructive: args.destructive.as_ref().map(|(_, b)| b.clone()),
        open_world: args.open_world.as_ref().map(|(_, b)| b.clone()),
    });

    let by_rig_name = args.rig.is_some() && args.name.is_none();
    let name_expr = if by_rig_name {
        quote!(<Self as #private::rig::Tool>::NAME)
    } else {
        quote!(#name)
    };
    let resend = match &args.resend {
        Some((_, value)) => value.value,
        None => tool.injected_key().is_some() || crate::handed::hands_key_on(&tool.item.body),
    };
    let verify = args
        .verify
        .as_ref()
        .filter(|_| tool.kind == Kind::SideEffect)
        .map(|(_, path)| verify_plan(tool, path));
    let tenant_required = args.tenant_required.as_ref().is_some_and(|(_, b)| b.value);
    let mode = if tool.mcp.is_some() {
        Mode::Mcp {
            hints: crate::mode::mcp::derived(tool.kind, &args),
        }
    } else if args.rig.is_some() {
        Mode::Rig {
            pinned: args.name.clone(),
        }
    } else {
        Mode::Plain
    };
    let knobs = Knobs {
        idem: args.idem,
        retry: args.retry,
        max_attempts: args.max_attempts.map(|(_, n)| n),
        lease: args.lease.map(|(_, ms)| ms),
        ttl: args.ttl.map(|(_, ms)| ms),
        in_flight_wait: args.in_flight_wait.map(|(_, ms)| ms),
    };
    Plan {
        private,
        mode,
        knobs,
        resend,
        verify,
        tenant_required,
        previous,
        registered: !by_rig_name,
        name_expr,
        name,
        keys,
        fingerprint,
        ok,
        err,
        json,
    }
}

/// The named parameters of a tool marked `json` (checked: each one can come from JSON).
fn json_params(tool: &Tool) -> Vec<JsonParam> {
    tool.params
        .iter()
        .filter_map(|p| {
            let Role::Named(ident) = &p.role else {
                return None;
            };
            let (held, lent) = match ast::json_field(&p.arg.ty) {
                ast::JsonField::Owned(ty) => (ty, false),
                ast::JsonField::Lent(ty) => (ty, true),
                ast::JsonField::No(_) => unreachable!("checked: every argument comes from JSON"),
            };
            Some(JsonParam {
                ident: ident.clone(),
                held,
                lent,
                host: tool.kind == crate::ast::Kind::SideEffect
                    && ast::is_operation_type(&p.arg.ty),
            })
        })
        .collect()
}

/// Each key path resolved (to a parameter, a binding or `self`), and the arguments fingerprinted.
fn key_fields(tool: &Tool, key: &KeyArg) -> (Vec<KeyField>, Vec<FingerprintArg>) {
    let mut fields = Vec::new();
    let mut whole: Vec<String> = Vec::new();
    for path in &key.paths {
        let root = path.root.unraw().to_string();
        let name = path.key_name();
        if path.fields.is_empty() {
            whole.push(root.clone());
        }
        fields.push(resolve(tool, path, name));
    }

    let mut fingerprint = Vec::new();
    for p in &tool.params {
        let candidates: Vec<&Ident> = match &p.role {
            Role::Named(ident) => vec![ident],
            Role::Pattern { bindings, .. } => bindings.iter().collect(),
            Role::InjectedKey => Vec::new(),
        };
        for ident in candidates {
            let name = ident.unraw().to_string();
            if !whole.contains(&name) {
                fingerprint.push(FingerprintArg {
                    name,
                    except: crate::mode::mcp::fingerprint_except(tool, key, ident),
                    ident: ident.clone(),
                    span: p.arg.ty.span(),
                });
            }
        }
    }
    // By name, the order of the canonical form: the runtime hashes them as they come.
    fingerprint.sort_by(|a, b| a.name.cmp(&b.name));
    (fields, fingerprint)
}

/// A key path's tokens and the span its type errors point at: the parameter's type for a whole
/// parameter (`amount: f64` → `f64`), else the path as written in the attribute.
fn resolve(tool: &Tool, path: &KeyPath, name: String) -> KeyField {
    let param_ty = tool.params.iter().find_map(|p| match &p.role {
        Role::Named(ident) if path.fields.is_empty() && *ident == path.root => {
            Some(p.arg.ty.span())
        }
        _ => None,
    });
    match param_ty {
        Some(span) => {
            let mut root = path.root.clone();
            root.set_span(span);
            KeyField {
                name,
                path: root.into_token_stream(),
                span,
                normalize: path.normalize,
            }
        }
        None => KeyField {
            name,
            path: crate::mode::mcp::key_path(tool, &path.root, &path.fields)
                .unwrap_or_else(|| path.to_token_stream()),
            span: path.span,
            normalize: path.normalize,
        },
    }
}

/// How the tool's verify function is called, and the signature it must have.
fn verify_plan(tool: &Tool, path: &syn::ExprPath) -> VerifyPlan {
    let mut types = Vec::new();
    let mut args = Vec::new();
    let mut shown = Vec::new();
    if let Some(r) = &tool.receiver {
        types.push(r.ty.to_token_stream());
        args.push(VerifyArg::Receiver);
        shown.push(pretty(r));
    }
    for p in &tool.params {
        let ty = &*p.arg.ty;
        match &p.role {
            Role::InjectedKey => {
                let referent = ast::key_referent(ty);
                types.push(quote!(&#referent));
                args.push(VerifyArg::Key);
            }
            Role::Named(ident) | Role::Pattern { fresh: ident, .. } => {
                types.push(match ty {
                    Type::ImplTrait(_) => quote!(_),
                    ty => ty.to_token_stream(),
                });
                args.push(VerifyArg::Param {
                    ident: ident.clone(),
                    copy: ast::copy_as_written(ty),
                    span: ty.span(),
                });
            }
        }
        let pat = match &*p.arg.pat {
            syn::Pat::Ident(pi) if pi.subpat.is_none() => pi.ident.unraw().to_string(),
            pat => pretty(pat),
        };
        shown.push(format!("{pat}: {}", pretty(ty)));
    }
    let name = path
        .path
        .segments
        .last()
        .map_or_else(|| "check".to_owned(), |s| s.ident.unraw().to_string());
    let signature = format!(
        "async fn {name}({}) -> {}",
        shown.join(", "),
        verified_output(&tool.item.sig.output)
    );
    VerifyPlan {
        path: path.clone(),
        types,
        args,
        signature,
    }
}

/// The written return type with its `T` as `idemkit::Verified<T>`: `Result<Receipt, PayError>`
/// → `Result<idemkit::Verified<Receipt>, PayError>`, `anyhow::Result<u64>` →
/// `anyhow::Result<idemkit::Verified<u64>>`.
fn verified_output(output: &syn::ReturnType) -> String {
    let syn::ReturnType::Type(_, ty) = output else {
        return "Result<idemkit::Verified<T>, E>".to_owned();
    };
    let mut ty = (**ty).clone();
    if let Type::Path(p) = &mut ty
        && let Some(last) = p.path.segments.last_mut()
        && let syn::PathArguments::AngleBracketed(a) = &mut last.arguments
        && let Some(syn::GenericArgument::Type(t)) = a.args.first_mut()
    {
        *t = syn::parse_quote!(idemkit::Verified<#t>);
    }
    pretty(&ty)
}

/// Tokens as a person writes them: `&str`, `Vec<u8>`, `std::string::String`.
fn pretty(tokens: &impl ToTokens) -> String {
    let mut s = tokens.to_token_stream().to_string();
    for (from, to) in [
        ("& ", "&"),
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
        (" ;", ";"),
        (" :: ", "::"),
        (":: ", "::"),
        ("( ", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
    ] {
        s = s.replace(from, to);
    }
    s
}
