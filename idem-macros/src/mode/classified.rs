//! `#[classified_tools]`: every rmcp `#[tool]` method of an impl block is `#[side_effect]` or
//! `#[read_only]`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::ctxt::Ctxt;
use crate::mode::mcp::is_tool;

/// `#[classified_tools]`: every `#[tool]` method of the impl block is `#[side_effect]` or
/// `#[read_only]`.
#[cfg_attr(not(feature = "rmcp"), allow(dead_code))]
pub(crate) fn classified_tools(args: TokenStream, item: TokenStream) -> TokenStream {
    let cx = Ctxt::new();
    if !args.is_empty() {
        cx.error_spanned(&args, "#[classified_tools] takes no arguments");
    }
    match syn::parse2::<syn::ItemImpl>(item.clone()) {
        Ok(block) => {
            for item in &block.items {
                let syn::ImplItem::Fn(f) = item else { continue };
                let Some(tool) = f.attrs.iter().find(|a| is_tool(a)) else {
                    continue;
                };
                let classified = f.attrs.iter().any(|a| {
                    a.path()
                        .segments
                        .last()
                        .is_some_and(|s| s.ident == "side_effect" || s.ident == "read_only")
                });
                if !classified {
                    let name = &f.sig.ident;
                    cx.error_spanned(
                        tool,
                        format!(
                            "MCP tool `{name}` is not classified: mark it `#[side_effect(key = \"...\")]` if it acts on \
                             the world (charges, sends, writes; it gets an idempotency key and its outcome is recorded), \
                             or `#[read_only]` if it only reads and may be retried freely; write that attribute above `#[tool]`"
                        ),
                    );
                }
            }
        }
        Err(e) => cx.syn_error(syn::Error::new(
            e.span(),
            format!("#[classified_tools] goes on an impl block of MCP tools (with rmcp's #[tool_router]): {e}"),
        )),
    }
    let errors = cx.check().err().map(|e| e.to_compile_error());
    quote!(#item #errors)
}
