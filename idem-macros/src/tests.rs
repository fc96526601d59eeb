//! Snapshots of the expansion, so reviewers can read the generated code (insta + prettyplease), and
//! the rules it is written by.

use quote::quote;

use crate::ast::Kind;

fn pretty(tokens: proc_macro2::TokenStream) -> String {
    let file: syn::File = syn::parse2(tokens).expect("the expansion parses as items");
    prettyplease::unparse(&file)
}

#[test]
fn expansion_of_a_side_effect_tool() {
    let out = crate::expand(
        Kind::SideEffect,
        quote!(
            key = "customer_id, purpose, period",
            name = "payments.charge",
            max_attempts = 5,
            lease = "30s"
        ),
        quote! {
            /// Charges a customer once per purpose and period.
            pub async fn charge(
                key: &IdempotencyKey,
                customer_id: &str,
                purpose: &str,
                period: &str,
                amount_cents: u64,
                mut note: String,
            ) -> Result<Receipt, PayError> {
                note.push('!');
                provider().charge(key.as_str(), customer_id, amount_cents, &note).await
            }
        },
    );
    let text = pretty(out);
    assert!(!text.contains("compile_error"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn expansion_of_a_method_with_a_destructured_parameter() {
    let out = crate::expand(
        Kind::SideEffect,
        quote!(key(self.account, customer_id), idem = self.idem),
        quote! {
            async fn refund(
                &self,
                Parameters(RefundReq { customer_id, amount, .. }): Parameters<RefundReq>,
            ) -> Result<u64, PayError> {
                Ok(amount)
            }
        },
    );
    let text = pretty(out);
    assert!(!text.contains("compile_error"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn expansion_of_a_read_only_tool() {
    let out = crate::expand(
        Kind::ReadOnly,
        quote!(max_attempts = 3),
        quote! {
            /// The customer's balance.
            async fn balance(customer_id: &str) -> Result<u64, PayError> {
                provider().balance(customer_id).await
            }
        },
    );
    let text = pretty(out);
    assert!(!text.contains("compile_error"), "{text}");
    insta::assert_snapshot!(text);
}

/// S28: a free function's verify is registered for the settler (`settle_verify`, asked from the
/// arguments a call kept) and the call keeps its arguments (`keep_arguments`).
#[test]
fn expansion_of_a_free_tool_whose_verify_the_settler_calls() {
    let out = crate::expand(
        Kind::SideEffect,
        quote!(key = "to", verify = was_sent),
        quote! {
            async fn send_sms(to: &str, text: String) -> Result<Sent, SmsError> {
                gateway::send(to, &text).await
            }
        },
    );
    let text = pretty(out);
    assert!(!text.contains("compile_error"), "{text}");
    assert!(text.contains("keep_arguments"), "{text}");
    assert!(text.contains("SettleProbe"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn expansion_of_a_tool_with_verify() {
    let out = crate::expand(
        Kind::SideEffect,
        quote!(
            key = "customer_id, period",
            verify = Self::was_sent,
            resend = false
        ),
        quote! {
            /// Sends a customer's invoice once per period.
            async fn send_invoice(
                &self,
                key: &IdempotencyKey,
                customer_id: &str,
                period: &str,
                lines: Vec<Line>,
            ) -> Result<MessageId, MailError> {
                self.smtp.send(key, customer_id, period, &lines).await
            }
        },
    );
    let text = pretty(out);
    assert!(!text.contains("compile_error"), "{text}");
    insta::assert_snapshot!(text);
}

/// S20's default: `.resend(..)` is always set, to whether the tool passes the key on, unless
/// `resend = ...` says otherwise.
#[test]
fn resend_is_always_set_by_default_to_whether_the_tool_takes_the_key() {
    let resend = |args: proc_macro2::TokenStream, item: proc_macro2::TokenStream| {
        let text = crate::expand(Kind::SideEffect, args, item).to_string();
        assert!(!text.contains("compile_error"), "{text}");
        assert!(!text.contains("with_verify"), "{text}");
        assert_eq!(text.matches(". resend (").count(), 1, "{text}");
        text.contains(". resend (true)")
    };
    let with_key = quote! {
        async fn charge(key: &IdempotencyKey, customer_id: &str) -> Result<u64, PayError> { Ok(1) }
    };
    let without_key = quote! {
        async fn send(customer_id: &str) -> Result<u64, PayError> { Ok(1) }
    };
    assert!(resend(quote!(key = "customer_id"), with_key.clone()));
    assert!(!resend(quote!(key = "customer_id"), without_key.clone()));
    assert!(!resend(
        quote!(key = "customer_id", resend = false),
        with_key
    ));
    assert!(resend(
        quote!(key = "customer_id", resend = true),
        without_key
    ));
    // Read-only tools have no such setting.
    let text = crate::expand(
        Kind::ReadOnly,
        quote!(),
        quote!(
            async fn balance(customer_id: &str) -> Result<u64, PayError> {
                Ok(1)
            }
        ),
    )
    .to_string();
    assert!(!text.contains(". resend ("), "{text}");
}

/// Issue 51 #4, S20: a body that sends its key with `.send_idempotent()` (or reads it with
/// `current_key()`) passes it on, as taking the `&IdempotencyKey` does: re-sending is on by
/// default; `resend = false` still overrides it.
#[test]
fn s20_a_body_that_sends_its_key_with_send_idempotent_passes_it_on() {
    let resend = |args: proc_macro2::TokenStream, item: proc_macro2::TokenStream| {
        let text = crate::expand(Kind::SideEffect, args, item).to_string();
        assert!(!text.contains("compile_error"), "{text}");
        assert_eq!(text.matches(". resend (").count(), 1, "{text}");
        text.contains(". resend (true)")
    };
    let sends = quote! {
        async fn place(&self, order: &str) -> Result<String, ShopError> {
            let response = self.http.post(&self.url).body(order.to_owned()).send_idempotent().await?;
            Ok(response.text().await.map_err(HttpError::from)?)
        }
    };
    let reads = quote! {
        async fn place(&self, order: &str) -> Result<String, ShopError> {
            let key = idemkit::http::current_key().expect("inside the call");
            self.provider.place(key.as_str(), order).await
        }
    };
    let logs = quote! {
        async fn place(&self, order: &str) -> Result<String, ShopError> {
            tracing::info!(key = ?idemkit::http::current_key(), "placing");
            self.sms.send(Message::new(order).idempotency_key("x")).await
        }
    };
    assert!(resend(quote!(key = "order"), sends.clone()));
    assert!(resend(quote!(key = "order"), reads));
    assert!(!resend(quote!(key = "order"), logs));
    assert!(!resend(quote!(key = "order", resend = false), sends));
}

#[test]
fn resend_and_verify_refuse_what_they_cannot_mean() {
    let errors = |kind, args: proc_macro2::TokenStream| {
        let text = crate::expand(
            kind,
            args,
            quote!(
                async fn send(customer_id: &str) -> Result<u64, PayError> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        assert!(text.contains("async fn send"), "the item is kept: {text}");
        text
    };
    let text = errors(
        Kind::SideEffect,
        quote!(key = "customer_id", resend = "yes"),
    );
    assert!(
        text.contains("`resend` is `true` or `false`, not `\\\"yes\\\"`"),
        "{text}"
    );
    let text = errors(
        Kind::SideEffect,
        quote!(key = "customer_id", resend = maybe, name = "x"),
    );
    assert_eq!(text.matches("compile_error").count(), 1, "{text}");
    assert!(text.contains("not `maybe`"), "{text}");
    let text = errors(
        Kind::SideEffect,
        quote!(key = "customer_id", verify = "check"),
    );
    assert!(
        text.contains("without the quotes: `verify = check`"),
        "{text}"
    );
    let text = errors(Kind::ReadOnly, quote!(verify = check, resend = true));
    assert!(
        text.contains("read-only tools need no verification"),
        "{text}"
    );
    assert!(
        text.contains("`resend` does not apply to #[read_only]"),
        "{text}"
    );
}

#[test]
fn errors_keep_the_item_and_collect_every_mistake() {
    let out = crate::expand(
        Kind::SideEffect,
        quote!(key = "custmer_id", retries = 3),
        quote! {
            async fn charge(key: &IdempotencyKey, customer_id: &str) -> Result<u64, PayError> {
                Ok(1)
            }
        },
    );
    let text = out.to_string();
    assert_eq!(text.matches("compile_error").count(), 2, "{text}");
    assert!(text.contains("did you mean `customer_id`?"), "{text}");
    assert!(text.contains("unknown argument `retries`"), "{text}");
    // The item is still there, without the injected key in its signature.
    assert!(
        text.contains("async fn charge (customer_id : & str)"),
        "{text}"
    );
}

/// Which arguments the attempt copies instead of cloning: only what is `Copy` by its spelling.
#[test]
fn copy_as_written_is_told_by_spelling_alone() {
    let copy = |ty: &str| crate::ast::copy_as_written(&syn::parse_str(ty).expect("a type"));
    for ty in [
        "&str", "&'a [u8]", "u64", "i8", "f64", "bool", "char", "(usize)",
    ] {
        assert!(copy(ty), "{ty} is Copy as written");
    }
    for ty in [
        "String",
        "&mut String",
        "Cents",
        "std::primitive::u64",
        "Vec<u8>",
        "[u8; 4]",
    ] {
        assert!(!copy(ty), "{ty} is not known to be Copy by its spelling");
    }
}

/// Issue 33: what a model is told a tool does is its doc comment without rustdoc's sections for
/// Rust readers and without link syntax, in the registry (JSON function calling) and in rmcp's
/// `#[tool(description = ...)]` alike.
#[test]
fn expansion_of_a_documented_mcp_tool_tells_the_model_its_summary_and_body_only() {
    let out = crate::expand(
        Kind::SideEffect,
        quote!(key = "req.order_id"),
        quote! {
            /// Refunds an order once, returning a [`Receipt`].
            ///
            /// The amount is the order's; see [the policy](crate::policy).
            ///
            /// # Errors
            ///
            /// When the order does not exist.
            ///
            /// # Examples
            ///
            /// ```
            /// # use support::refund;
            /// refund(req).await?;
            /// ```
            #[tool]
            async fn refund(&self, req: Parameters<RefundReq>) -> Result<Receipt, SupportError> {
                self.provider.refund(&req.0).await
            }
        },
    );
    let text = pretty(out);
    assert!(!text.contains("compile_error"), "{text}");
    let told: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Refunds") || l.trim_start().starts_with("#[tool("))
        .collect();
    assert!(
        told.iter()
            .all(|l| !l.contains("When the order does not exist")),
        "{text}"
    );
    insta::assert_snapshot!(told.join("\n"));
}

#[test]
fn durations_read_as_written() {
    use crate::attr::parse_duration;

    assert_eq!(parse_duration("250ms"), Some(250));
    assert_eq!(parse_duration("30s"), Some(30_000));
    assert_eq!(parse_duration("5m"), Some(300_000));
    assert_eq!(parse_duration("24h"), Some(86_400_000));
    assert_eq!(parse_duration("1h30m"), Some(5_400_000));
    assert_eq!(parse_duration("7d"), Some(604_800_000));
    assert_eq!(parse_duration("30"), None);
    assert_eq!(parse_duration("s"), None);
    assert_eq!(parse_duration("3x"), None);
    assert_eq!(parse_duration(""), None);
}

/// serde_derive's rule: a context is checked, and `check` hands back every error it collected,
/// combined, in the order they were found.
#[test]
fn a_checked_ctxt_hands_back_every_error_in_order() {
    let cx = crate::ctxt::Ctxt::new();
    assert!(cx.check().is_ok(), "no error, nothing to report");
    let cx = crate::ctxt::Ctxt::new();
    cx.error(proc_macro2::Span::call_site(), "first");
    cx.error_spanned(quote!(a b), "second");
    let errors = cx.check().expect_err("two errors");
    let messages: Vec<String> = errors.into_iter().map(|e| e.to_string()).collect();
    assert_eq!(messages, ["first", "second"]);
}

/// A context dropped without `check` would lose its errors (the expansion would compile with a
/// mistake unreported): it panics instead, as serde_derive's does.
#[test]
#[should_panic(expected = "dropped a Ctxt without checking it for errors")]
fn a_ctxt_dropped_unchecked_panics() {
    let cx = crate::ctxt::Ctxt::new();
    cx.error(proc_macro2::Span::call_site(), "lost");
    drop(cx);
}

/// Unless the thread is already panicking: the first panic's message is the one reported.
#[test]
#[should_panic(expected = "the first panic")]
fn a_ctxt_dropped_while_panicking_does_not_panic_again() {
    let _cx = crate::ctxt::Ctxt::new();
    panic!("the first panic");
}

/// JSON mode's glue: the arguments struct (without the host's `OperationId`, looked up in the
/// tool's runtime instead), the call of the function with its fields (a `&str` lent from a
/// `String`), and the `JsonTools` entry with the MCP hints as written.
#[cfg(feature = "json")]
#[test]
fn expansion_of_a_json_tool_keyed_on_the_hosts_operation() {
    let out = crate::expand(
        Kind::SideEffect,
        quote!(key = "step", json, destructive = true, idem = IDEM),
        quote! {
            /// Sends the customer one apology for the plan step being carried out.
            async fn send_apology(step: OperationId, to: &str, text: String) -> anyhow::Result<String> {
                Ok(format!("sent to {to}"))
            }
        },
    );
    let text = pretty(out);
    assert!(!text.contains("compile_error"), "{text}");
    insta::assert_snapshot!(text);
}

/// rig mode's glue: the wrapper serves rig's envelope, checks the impl's declared types, and a
/// pinned name against the impl's `NAME`.
#[cfg(feature = "rig")]
#[test]
fn expansion_of_a_rig_tool_with_a_pinned_name() {
    let out = crate::expand(
        Kind::SideEffect,
        quote!(key = "args.order_id", rig, name = "shop.refund"),
        quote! {
            async fn call(&self, args: RefundArgs) -> Result<String, ShopError> {
                self.shop.refund(&args.order_id).await
            }
        },
    );
    let text = pretty(out);
    assert!(!text.contains("compile_error"), "{text}");
    insta::assert_snapshot!(text);
}
