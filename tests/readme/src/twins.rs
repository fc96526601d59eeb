//! The README's Rust blocks, compiled here inside the code they take as given.
//!
//! The README is read on GitHub, which shows rustdoc's hidden `# ` lines as they are, so its
//! blocks carry none and are not doctests. Each one appears below exactly as the README writes
//! it (`…` in the README stands for any code), inside a function that gives it its setting;
//! `tests::every_readme_block_is_compiled_here` fails when a README block is not found here.
//! The quick start's `src/main.rs` block is the exception: `scripts/quickstart.sh` (run by
//! `.ci/run`) builds it from the README's own text as a crate of its own and runs it.

#![allow(clippy::items_after_statements)]

use crate::*;

/// The README's first block: a write tool, a read tool, and a caller.
///
/// # Errors
///
/// The tools' own.
#[rustfmt::skip] // As the README writes it.
pub async fn pitch() -> Result<Receipt, PayError> {
    // README: the first block, as written.
    use idemkit::{side_effect, read_only, IdempotencyKey};

    #[side_effect(key = "customer_id, purpose, period")]
    async fn charge(key: &IdempotencyKey, customer_id: &str, purpose: &str, period: &str, cents: u64)
        -> Result<Receipt, PayError>
    {
        provider.charge(key.as_str(), customer_id, cents).await   // same key on every attempt
    }

    #[read_only]
    async fn balance(customer_id: &str) -> Result<Cents, PayError> {
        provider.balance(customer_id).await                       // retried freely
    }

    // Callers see the signature they wrote, minus the key:
    let receipt = charge("cus_1", "subscription", "2026-11", 4200).await?;
    // README: end of the block.
    assert_eq!(balance("cus_1").await?, 4200);
    assert_eq!(receipt, charge("cus_1", "subscription", "2026-11", 4200).await?);
    Ok(receipt)
}

/// The README's `verify` block: a tool that cannot pass the key on, and its verify function.
#[rustfmt::skip] // As the README writes it.
pub mod verify {
    use crate::sms::*;
    use idemkit::{Verified, side_effect};

    // README: the verify block, as written.
    #[side_effect(key = "order_id", verify = was_sent)] // no `&IdempotencyKey`: never re-sent blindly
    async fn notify_shipped(order_id: &str, to: &str) -> Result<Sent, SmsError> { sms.send(to, order_id).await }
    async fn was_sent(order_id: &str, to: &str) -> Result<Verified<Sent>, SmsError> { sms.was_sent(to, order_id).await }
    // README: end of the block.

    /// Sends one message through the README's tool.
    ///
    /// # Errors
    ///
    /// The tool's own.
    pub async fn send_once() -> Result<Sent, SmsError> {
        notify_shipped("ord_1", "+15550100").await
    }
}

#[cfg(test)]
mod tests {
    /// The ```` ```rust ```` blocks of README.md, with the line of the fence that opens each.
    fn readme_blocks() -> Vec<(usize, String)> {
        let readme = include_str!("../../../README.md");
        let mut blocks = Vec::new();
        let mut open: Option<(usize, String)> = None;
        for (n, line) in readme.lines().enumerate() {
            match &mut open {
                None if line.starts_with("```rust") => open = Some((n + 1, String::new())),
                Some(_) if line.starts_with("```") => blocks.extend(open.take()),
                Some((_, text)) => {
                    text.push_str(line);
                    text.push('\n');
                }
                None => {}
            }
        }
        blocks
    }

    /// Whether `block` appears in `source`, whitespace runs counting as one and each `…` of the
    /// block standing for any text.
    fn appears_in(block: &str, source: &str) -> bool {
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let source = words(source);
        let mut from = 0;
        for part in words(block).split('…').map(str::trim) {
            if part.is_empty() {
                continue;
            }
            // The first part may start anywhere; each later one follows the one before.
            match source[from..].find(part) {
                Some(at) => from += at + part.len(),
                None => return false,
            }
        }
        true
    }

    #[test]
    fn every_readme_block_is_compiled_here() {
        let source = include_str!("twins.rs");
        let quickstart = include_str!("../../../README.md")
            .split("## Quick start")
            .nth(1)
            .expect("the README has a quick start");
        let mut missing = Vec::new();
        for (line, block) in readme_blocks() {
            let built_by_quickstart_sh = quickstart.contains(&block) && block.contains("fn main()");
            if !built_by_quickstart_sh && !appears_in(&block, source) {
                missing.push(format!("README.md:{line}:\n{block}"));
            }
        }
        assert!(
            missing.is_empty(),
            "README blocks that no code compiles: copy each, as written, into \
             tests/readme/src/twins.rs inside the code it takes as given\n\n{}",
            missing.join("\n")
        );
        assert!(
            readme_blocks().len() >= 3,
            "the README's Rust blocks were not found"
        );
    }

    #[test]
    fn the_check_finds_a_block_that_is_not_here() {
        let source = "fn a() { let x = charge(1).await?; }";
        assert!(appears_in("let x = charge(1).await?;", source));
        assert!(appears_in("fn a() { … }", source));
        assert!(!appears_in("let x = refund(1).await?;", source));
        assert!(!appears_in("fn b() { … }", source));
    }

    #[test]
    fn the_readme_blocks_run() {
        let receipt = crate::run(super::pitch()).expect("the pitch's charge");
        assert_eq!(receipt.cents, 4200);
        let sent = crate::run(super::verify::send_once()).expect("the SMS is sent");
        assert_eq!(sent.id, "+15550100:ord_1");
    }
}
