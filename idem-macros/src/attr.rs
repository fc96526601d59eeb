//! Parsing of the attributes' arguments: `key = "..."`, `key(...)`, `name = "..."` and the knobs.
//!
//! Parsing recovers: an unknown or malformed argument is recorded in the [`Ctxt`] and skipped, so
//! every mistake in one attribute is reported at once and the rest still expands.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprPath, Ident, LitBool, LitInt, LitStr, Path, Token};

use crate::ctxt::Ctxt;

/// Which attribute is expanding.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    SideEffect,
    ReadOnly,
}

impl Kind {
    pub fn attribute(self) -> &'static str {
        match self {
            Kind::SideEffect => "#[side_effect]",
            Kind::ReadOnly => "#[read_only]",
        }
    }
}

/// Every argument either attribute understands; `valid` decides which apply to which attribute.
pub(crate) const ARGUMENTS: &[&str] = &[
    "key",
    "name",
    "max_attempts",
    "retry",
    "lease",
    "ttl",
    "in_flight_wait",
    "idem",
    "crate",
    "tenant_required",
    "destructive",
    "open_world",
    "json",
    "rig",
    "verify",
    "resend",
    "previous",
];

/// The arguments of one `#[side_effect(...)]` or `#[read_only(...)]`, as written.
#[derive(Default)]
pub(crate) struct Args {
    pub key: Option<KeyArg>,
    /// `previous = "a, b"`: the key derivation the tool had before its key changed; a call also
    /// finds its operation under the key it derives.
    pub previous: Option<KeyArg>,
    pub name: Option<LitStr>,
    pub max_attempts: Option<(Ident, u32)>,
    pub retry: Option<(Ident, Expr)>,
    pub lease: Option<(Ident, Millis)>,
    pub ttl: Option<(Ident, Millis)>,
    pub in_flight_wait: Option<(Ident, Millis)>,
    pub idem: Option<(Ident, Expr)>,
    pub krate: Option<Path>,
    /// `tenant_required = true`: the tool never runs without a tenant (S18).
    pub tenant_required: Option<(Ident, LitBool)>,
    /// MCP tools only: `destructiveHint`.
    pub destructive: Option<(Ident, LitBool)>,
    /// MCP tools only: `openWorldHint`.
    pub open_world: Option<(Ident, LitBool)>,
    /// `json` (or `json = true`): callable by name with JSON arguments (`JsonTools`).
    pub json: Option<Ident>,
    /// `rig`: the attribute is on the `call` of a rig tool impl; the wrapper serves rig's
    /// `Result<ToolOutput, ToolExecutionError>`.
    pub rig: Option<Ident>,
    /// `verify = path`: the function asked whether an attempt of unknown outcome took effect
    /// (S19).
    pub verify: Option<(Ident, ExprPath)>,
    /// `resend = true | false`: whether an attempt of unknown outcome may be sent again (S20;
    /// default: iff the tool takes the `&IdempotencyKey`).
    pub resend: Option<(Ident, LitBool)>,
}

/// A duration written as `"30s"`, in milliseconds.
#[derive(Clone, Copy)]
pub(crate) struct Millis(pub u64);

/// `key = "a, b.c"` or `key(a, b.c)`.
pub(crate) struct KeyArg {
    /// The whole argument, for errors about the argument itself (C6).
    pub tokens: TokenStream,
    /// Where an empty list is reported: the string, or the parentheses.
    pub list_span: Span,
    pub paths: Vec<KeyPath>,
    /// The string form did not parse (reported already): no paths, but not an empty list.
    pub unreadable: bool,
}

/// An opt-in normalisation of a text key field (keys are byte-exact without one).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Normalize {
    /// `nfc(name)`: Unicode NFC.
    Nfc,
    /// `nfc_fold(name)`: NFC, trimmed, lower case.
    NfcFold,
}

impl Normalize {
    /// Its name, which is also the runtime's function (`idemkit::normalize::nfc`).
    pub fn name(self) -> &'static str {
        match self {
            Normalize::Nfc => "nfc",
            Normalize::NfcFold => "nfc_fold",
        }
    }
}

/// One key field as written: a root (a parameter, a binding, or `self`) and field accesses,
/// maybe inside a normalisation (`nfc(name)`).
pub(crate) struct KeyPath {
    pub root: Ident,
    pub fields: Vec<Ident>,
    pub normalize: Option<Normalize>,
    /// Where errors about this field point: the string in the string form (stable Rust cannot
    /// point inside it), the very name in the list form.
    pub span: Span,
}

impl KeyPath {
    /// The field's name in the key: the last segment of its path.
    pub fn key_name(&self) -> String {
        self.fields.last().unwrap_or(&self.root).unraw().to_string()
    }

    /// The path as written, `args.customer_id` (`nfc(args.name)` with a normalisation).
    pub fn display(&self) -> String {
        let mut s = self.root.unraw().to_string();
        for f in &self.fields {
            s.push('.');
            s.push_str(&f.unraw().to_string());
        }
        match self.normalize {
            Some(n) => format!("{}({s})", n.name()),
            None => s,
        }
    }
}

/// Parses the arguments, recording every problem in `cx`.
pub(crate) fn parse(cx: &Ctxt, tokens: TokenStream) -> Args {
    let mut args = Args::default();
    let parser = |input: ParseStream| {
        while !input.is_empty() {
            let ident = input.call(Ident::parse_any)?;
            argument(cx, &mut args, &ident, input)?;
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(())
    };
    if let Err(e) = parser.parse2(tokens) {
        cx.syn_error(e);
    }
    args
}

fn argument(cx: &Ctxt, args: &mut Args, ident: &Ident, input: ParseStream) -> syn::Result<()> {
    let name = ident.to_string();
    let once = |taken: bool| {
        if taken {
            cx.error(
                ident.span(),
                format!("`{name}` is given twice; give each argument once"),
            );
        }
    };
    match name.as_str() {
        "key" => {
            once(args.key.is_some());
            let key = key_arg(cx, ident, input)?;
            args.key.get_or_insert(key);
        }
        "previous" => {
            once(args.previous.is_some());
            let previous = key_arg(cx, ident, input)?;
            args.previous.get_or_insert(previous);
        }
        "name" => {
            once(args.name.is_some());
            input.parse::<Token![=]>()?;
            let lit: LitStr = input.parse()?;
            if lit.value().trim().is_empty() {
                cx.error(lit.span(), "a tool's name cannot be empty: it is part of every key; write e.g. `name = \"payments.charge\"`");
            }
            args.name.get_or_insert(lit);
        }
        "max_attempts" => {
            once(args.max_attempts.is_some());
            input.parse::<Token![=]>()?;
            let lit: LitInt = input.parse()?;
            match lit.base10_parse::<u32>() {
                Ok(n) if n >= 1 => {
                    args.max_attempts.get_or_insert((ident.clone(), n));
                }
                _ => cx.error(
                    lit.span(),
                    "`max_attempts` counts every attempt, the first included: write a whole number of at least 1, e.g. `max_attempts = 5`",
                ),
            }
        }
        "lease" | "ttl" | "in_flight_wait" => {
            let slot = match name.as_str() {
                "lease" => &mut args.lease,
                "ttl" => &mut args.ttl,
                _ => &mut args.in_flight_wait,
            };
            once(slot.is_some());
            input.parse::<Token![=]>()?;
            let lit: LitStr = input.parse()?;
            match parse_duration(&lit.value()) {
                Some(ms) if ms == 0 && name != "in_flight_wait" => cx.error(
                    lit.span(),
                    format!("`{name}` must be longer than zero, e.g. `{name} = \"30s\"`"),
                ),
                Some(ms) => {
                    slot.get_or_insert((ident.clone(), Millis(ms)));
                }
                None => cx.error(
                    lit.span(),
                    format!(
                        "cannot read {:?} as a duration: write numbers with units ms, s, m, h or d, e.g. `{name} = \"30s\"` or `\"1h30m\"`",
                        lit.value()
                    ),
                ),
            }
        }
        "idem" | "retry" => {
            let slot = if name == "idem" {
                &mut args.idem
            } else {
                &mut args.retry
            };
            once(slot.is_some());
            input.parse::<Token![=]>()?;
            let expr: Expr = input.parse()?;
            slot.get_or_insert((ident.clone(), expr));
        }
        "tenant_required" => {
            once(args.tenant_required.is_some());
            input.parse::<Token![=]>()?;
            let lit: LitBool = input.parse()?;
            args.tenant_required.get_or_insert((ident.clone(), lit));
        }
        "destructive" | "open_world" => {
            let slot = if name == "destructive" {
                &mut args.destructive
            } else {
                &mut args.open_world
            };
            once(slot.is_some());
            input.parse::<Token![=]>()?;
            let value: LitBool = input.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    format!("write `{name} = true` or `{name} = false`"),
                )
            })?;
            slot.get_or_insert((ident.clone(), value));
        }
        "json" => {
            once(args.json.is_some());
            // A flag; `json = true` / `json = false` read as the flag present or absent.
            let on = if input.peek(Token![=]) {
                input.parse::<Token![=]>()?;
                input
                    .parse::<LitBool>()
                    .map_err(|e| syn::Error::new(e.span(), "write `json`, or `json = true`"))?
                    .value
            } else {
                true
            };
            if on {
                args.json.get_or_insert(ident.clone());
            }
        }
        "rig" => {
            once(args.rig.is_some());
            args.rig.get_or_insert(ident.clone());
        }
        "verify" => {
            once(args.verify.is_some());
            if let Some(path) = verify_arg(cx, ident, input)? {
                args.verify.get_or_insert((ident.clone(), path));
            }
        }
        "resend" => {
            once(args.resend.is_some());
            if let Some(value) = resend_arg(cx, ident, input)? {
                args.resend.get_or_insert((ident.clone(), value));
            }
        }
        "crate" => {
            once(args.krate.is_some());
            input.parse::<Token![=]>()?;
            let path = if input.peek(LitStr) {
                input.parse::<LitStr>()?.parse()?
            } else {
                input.call(Path::parse_mod_style)?
            };
            args.krate.get_or_insert(path);
        }
        _ => {
            let alias = match name.as_str() {
                "retries" | "max_retries" | "attempts" | "retry_count" => Some("max_attempts"),
                "runtime" | "store" | "idemkit" => Some("idem"),
                "wait" | "timeout" | "in_flight" => Some("in_flight_wait"),
                "expiry" | "expires" | "retention" => Some("ttl"),
                "keys" | "key_fields" | "fields" => Some("key"),
                _ => None,
            };
            let hint =
                match alias.or_else(|| crate::suggest::closest(&name, ARGUMENTS.iter().copied())) {
                    Some(close) => format!("did you mean `{close}`? "),
                    None => String::new(),
                };
            cx.error(
                ident.span(),
                format!(
                    "unknown argument `{name}`; {hint}the arguments are: {}",
                    ARGUMENTS.join(", ")
                ),
            );
            // Skip its value, so the arguments after it are still read.
            while !input.is_empty() && !input.peek(Token![,]) {
                input.parse::<TokenTree>()?;
            }
        }
    }
    Ok(())
}

/// `verify = path::to::check` (a function's path, `Self::was_charged` for a method). A
/// malformed value is recorded and skipped, so the arguments after it are still read.
fn verify_arg(cx: &Ctxt, ident: &Ident, input: ParseStream) -> syn::Result<Option<ExprPath>> {
    const HOW: &str = "write `verify = check`, the path of an `async fn` that takes the tool's parameters and answers \
         `Result<idemkit::Verified<T>, E>` (`verify = Self::check` for a method)";
    if !input.peek(Token![=]) {
        cx.error(ident.span(), format!("`verify` needs a function: {HOW}"));
        return Ok(None);
    }
    input.parse::<Token![=]>()?;
    let fork = input.fork();
    match fork.parse::<ExprPath>() {
        Ok(path) if fork.is_empty() || fork.peek(Token![,]) => {
            input.parse::<ExprPath>()?;
            Ok(Some(path))
        }
        _ => {
            let value: TokenStream = skip_value(input)?;
            let shown = value.to_string();
            let hint = match syn::parse2::<LitStr>(value.clone()) {
                Ok(lit) => format!("; without the quotes: `verify = {}`", lit.value()),
                Err(_) => String::new(),
            };
            cx.error_spanned(
                &value,
                format!("cannot read `{shown}` as a function's path: {HOW}{hint}"),
            );
            Ok(None)
        }
    }
}

/// `resend = true` or `resend = false`; any other value is recorded (at it) and skipped.
fn resend_arg(cx: &Ctxt, ident: &Ident, input: ParseStream) -> syn::Result<Option<LitBool>> {
    const WHAT: &str = "`resend` says whether an attempt whose outcome is unknown may be sent again: \
         `resend = true` when the provider deduplicates by the key, `resend = false` when it cannot \
         (default: re-sent iff the tool takes the `&IdempotencyKey`)";
    if !input.peek(Token![=]) {
        cx.error(
            ident.span(),
            format!("write `resend = true` or `resend = false`; {WHAT}"),
        );
        return Ok(None);
    }
    input.parse::<Token![=]>()?;
    let value = skip_value(input)?;
    if let Ok(value) = syn::parse2::<LitBool>(value.clone()) {
        return Ok(Some(value));
    }
    cx.error_spanned(
        &value,
        format!("`resend` is `true` or `false`, not `{value}`; {WHAT}"),
    );
    Ok(None)
}

/// The tokens up to the next comma, consumed.
fn skip_value(input: ParseStream) -> syn::Result<TokenStream> {
    let mut value = TokenStream::new();
    while !input.is_empty() && !input.peek(Token![,]) {
        value.extend([input.parse::<TokenTree>()?]);
    }
    if value.is_empty() {
        return Err(input.error("a value is missing after `=`"));
    }
    Ok(value)
}

fn key_arg(cx: &Ctxt, ident: &Ident, input: ParseStream) -> syn::Result<KeyArg> {
    let mut tokens = ident.to_token_stream();
    if input.peek(Token![=]) {
        let eq: Token![=] = input.parse()?;
        let lit: LitStr = input.parse()?;
        eq.to_tokens(&mut tokens);
        lit.to_tokens(&mut tokens);
        let span = lit.span();
        let paths = match lit.parse_with(Punctuated::<KeyPath, Token![,]>::parse_terminated) {
            Ok(list) => list.into_iter().map(|p| KeyPath { span, ..p }).collect(),
            Err(e) => {
                cx.error(
                    span,
                    format!(
                        "cannot read the key fields {:?}: {e}; write a comma-separated list of parameter names or paths, e.g. `{ident} = \"customer_id, args.period\"`",
                        lit.value()
                    ),
                );
                Vec::new()
            }
        };
        Ok(KeyArg {
            tokens,
            list_span: span,
            unreadable: paths.is_empty() && !lit.value().trim().is_empty(),
            paths,
        })
    } else if input.peek(syn::token::Paren) {
        let content;
        let parens = syn::parenthesized!(content in input);
        let list = Punctuated::<KeyPath, Token![,]>::parse_terminated(&content)?;
        let group =
            proc_macro2::Group::new(proc_macro2::Delimiter::Parenthesis, list.to_token_stream());
        let mut group = group;
        group.set_span(parens.span.join());
        tokens.extend([TokenTree::Group(group)]);
        Ok(KeyArg {
            tokens,
            list_span: parens.span.join(),
            unreadable: false,
            paths: list.into_iter().collect(),
        })
    } else {
        Err(syn::Error::new(
            ident.span(),
            format!(
                "write the key fields as `{ident} = \"customer_id, period\"` or `{ident}(customer_id, period)`"
            ),
        ))
    }
}

impl syn::parse::Parse for KeyPath {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(Ident) && input.peek2(syn::token::Paren) {
            let modifier: Ident = input.parse()?;
            let normalize = match modifier.to_string().as_str() {
                "nfc" => Normalize::Nfc,
                "nfc_fold" => Normalize::NfcFold,
                other => {
                    return Err(syn::Error::new(
                        modifier.span(),
                        format!(
                            "unknown key normalisation `{other}(..)`: write `nfc(field)` (Unicode NFC) or \
                             `nfc_fold(field)` (NFC, trimmed, lower case); keys are byte-exact without one"
                        ),
                    ));
                }
            };
            let content;
            syn::parenthesized!(content in input);
            let mut inner: KeyPath = content.parse()?;
            if inner.normalize.is_some() || !content.is_empty() {
                return Err(
                    content.error("write one field inside a normalisation, e.g. `nfc(name)`")
                );
            }
            inner.normalize = Some(normalize);
            return Ok(inner);
        }
        let root = if input.peek(Token![self]) {
            input.call(Ident::parse_any)?
        } else {
            input.parse()?
        };
        let mut fields = Vec::new();
        while input.peek(Token![.]) {
            input.parse::<Token![.]>()?;
            fields.push(input.parse::<Ident>()?);
        }
        let span = fields.last().unwrap_or(&root).span();
        Ok(KeyPath {
            root,
            fields,
            normalize: None,
            span,
        })
    }
}

impl ToTokens for KeyPath {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        self.root.to_tokens(tokens);
        for f in &self.fields {
            Token![.](f.span()).to_tokens(tokens);
            f.to_tokens(tokens);
        }
    }
}

/// `"250ms"`, `"30s"`, `"5m"`, `"24h"`, `"7d"`, `"1h30m"` → milliseconds.
pub(crate) fn parse_duration(text: &str) -> Option<u64> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else {
            match rest.chars().next()? {
                's' => (1_000, 1),
                'm' => (60_000, 1),
                'h' => (3_600_000, 1),
                'd' => (86_400_000, 1),
                _ => return None,
            }
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
        rest = rest[len..].trim_start();
    }
    Some(total)
}
