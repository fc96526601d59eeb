//! On any error: the item as written (minus the injected key, bound to a placeholder inside the
//! body, so the body still type-checks), next to the errors, so one mistake gives one error and
//! editors keep working; in MCP mode, a method rmcp's router still accepts.

use proc_macro2::TokenStream;
use quote::quote;
use syn::FnArg;

use crate::ast::Tool;
use crate::attr::Args;
use crate::expand::{fake_return, outer_attrs, written_output};
use crate::mode::mcp::boxed_by_tool;
use crate::plan::Private;

/// The item as written, minus the injected key parameter (bound to a placeholder inside the
/// body, so the body still type-checks): what is emitted next to the errors.
pub(crate) fn fallback(args: &Args, tool: &Tool) -> TokenStream {
    let private = Private::of(args);
    let mut attrs = outer_attrs(&tool.item.attrs);
    if let Some(mcp) = &tool.mcp {
        attrs[mcp.index] = crate::mode::mcp::written_tool_attr(tool, mcp);
    }
    let vis = &tool.item.vis;
    let mut sig = tool.item.sig.clone();
    sig.inputs = sig
        .inputs
        .into_iter()
        .filter(|arg| !matches!(arg, FnArg::Typed(pt) if crate::ast::is_key_type(&pt.ty)))
        .collect();
    let key = tool.injected_key().map(|p| {
        let pat = &p.arg.pat;
        let ty = crate::ast::key_referent(&p.arg.ty);
        quote! {
            let #pat: &#ty = &#private::IdempotencyKey::from_uuid(#private::uuid::Uuid::nil());
        }
    });
    let rig = args.rig.is_some() && cfg!(feature = "rig");
    let body = mcp(&private, tool, rig, &mut sig, key, tool.item.body.clone());
    // Only the attribute's errors should show: the item as written would add warnings of its own
    // (a parameter the wrapper would have used, now unused).
    quote! {
        #(#attrs)*
        #[allow(unused_variables, unused_mut)]
        #vis #sig {
            #body
        }
    }
}

/// On any error, what keeps rmcp's router (or a rig tool's impl) compiling: the method serves
/// `ToolOutput` (rig's `Result<ToolOutput, ToolExecutionError>`), and the body as written is
/// type-checked in a future that is never run.
fn mcp(
    private: &Private,
    tool: &Tool,
    rig: bool,
    sig: &mut syn::Signature,
    key: Option<TokenStream>,
    stmts: TokenStream,
) -> TokenStream {
    if tool.mcp.is_none() && !rig {
        if cfg!(feature = "rmcp") && boxed_by_tool(sig) {
            // Below `#[tool]`: the router still takes this method; keep it a tool that compiles.
            let boxed = written_output(sig);
            let output = crate::mode::mcp::output(private);
            sig.output = syn::parse_quote! {
                -> ::core::pin::Pin<::std::boxed::Box<dyn ::core::future::Future<Output = #output> + ::core::marker::Send + '_>>
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
    let pin_output = fake_return(private, &written_output(sig));
    let output = if rig {
        crate::mode::rig::output(private)
    } else {
        crate::mode::mcp::output(private)
    };
    sig.output = syn::parse_quote!(-> #output);
    quote! {
        #[allow(unreachable_code, unused_variables, clippy::let_underscore_future)]
        let _ = async move {
            #pin_output
            #key
            #stmts
        };
        ::core::unreachable!("idemkit: a tool whose attribute has errors does not compile")
    }
}
