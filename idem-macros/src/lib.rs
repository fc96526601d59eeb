//! Attribute macros of idemkit (placeholders until the attributes land).

use proc_macro::TokenStream;

/// Marks an `async fn` as a tool with a side effect, keyed by the named fields.
#[proc_macro_attribute]
pub fn side_effect(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}

/// Marks an `async fn` as a read-only tool: retried freely, no key, no store.
#[proc_macro_attribute]
pub fn read_only(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
