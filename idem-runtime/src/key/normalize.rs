//! Opt-in normalisation of text key fields, for text that a language model writes: the same name
//! may come as NFC or NFD ("José" as one code point or two), in another case, with spaces around.
//! Keys are byte-exact by default (encoding v1); a field that opts in (`nfc(name)` or
//! `nfc_fold(name)` in the attribute's key list, or these functions by hand) is normalised first
//! and then encoded exactly as v1 text, so text already in normal form keys as it always did.

use unicode_normalization::UnicodeNormalization;

/// `text` in Unicode Normalization Form C (canonical composition).
///
/// ```
/// use idem_runtime::normalize::nfc;
///
/// assert_eq!(nfc("Jose\u{301}"), "Jos\u{e9}");
/// ```
pub fn nfc(text: &str) -> String {
    text.nfc().collect()
}

/// `text` in NFC, without surrounding whitespace, in lower case (Unicode's `to_lowercase`, then
/// NFC again, as lowering can decompose).
///
/// ```
/// use idem_runtime::normalize::nfc_fold;
///
/// assert_eq!(nfc_fold("  JOSE\u{301} "), "jos\u{e9}");
/// ```
pub fn nfc_fold(text: &str) -> String {
    let lowered = text.trim().nfc().collect::<String>().to_lowercase();
    lowered.nfc().collect()
}
