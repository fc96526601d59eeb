//! Opt-in normalisation of text key fields (issue 16): a language model may write one name as
//! NFC or NFD, in another case, with spaces around. `nfc(field)` and `nfc_fold(field)` key those
//! alike; without them keys stay byte-exact (encoding v1), and a normalised field is v1 text of
//! its normal form, so text already in that form keys as it always did (golden vectors below).

use idemkit::{Classify, Failure, Idem, IdempotencyKey, MemoryStore, side_effect};

#[derive(Debug)]
struct PayError;
impl Classify for PayError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}
impl From<idemkit::Error> for PayError {
    fn from(_: idemkit::Error) -> Self {
        PayError
    }
}

#[side_effect(key = "customer_name, period")]
async fn book_exact(
    key: &IdempotencyKey,
    customer_name: &str,
    period: &str,
) -> Result<String, PayError> {
    let _ = (customer_name, period);
    Ok(key.to_string())
}

#[side_effect(key = "nfc(customer_name), period")]
async fn book_nfc(
    key: &IdempotencyKey,
    customer_name: &str,
    period: &str,
) -> Result<String, PayError> {
    let _ = (customer_name, period);
    Ok(key.to_string())
}

#[side_effect(key = "nfc_fold(customer_name), period")]
async fn book_folded(
    key: &IdempotencyKey,
    customer_name: String,
    period: &str,
) -> Result<String, PayError> {
    let _ = (customer_name, period);
    Ok(key.to_string())
}

const NFC: &str = "Jos\u{e9}"; // é as one code point
const NFD: &str = "Jose\u{301}"; // e + combining acute

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(Idem::new(MemoryStore::new()).scope(f))
}

#[test]
fn nfc_and_nfd_forms_of_one_name_give_one_key_only_when_asked() {
    run(async {
        let exact = (
            book_exact(NFC, "2026-11").await.unwrap(),
            book_exact(NFD, "2026-11").await.unwrap(),
        );
        assert_ne!(exact.0, exact.1, "byte-exact by default: two keys");
        let nfc = (
            book_nfc(NFC, "2026-11").await.unwrap(),
            book_nfc(NFD, "2026-11").await.unwrap(),
        );
        assert_eq!(nfc.0, nfc.1, "nfc(): one key for both forms");
        // Golden: v1 text of the NFC form, under the tool's name.
        assert_eq!(nfc.0, "34c2f609-cd11-811f-9f55-08a4ecf13dce");
        assert_eq!(
            nfc.0,
            IdempotencyKey::derive(
                "book_nfc",
                &[("customer_name", &NFC), ("period", &"2026-11")]
            )
            .to_string(),
            "a normalised field is v1 text of its normal form"
        );
        let folded: Vec<String> = {
            let mut keys = Vec::new();
            for name in [NFC, NFD, "  JOSE\u{301} ", "jos\u{e9}"] {
                keys.push(book_folded(name.to_owned(), "2026-11").await.unwrap());
            }
            keys
        };
        assert!(
            folded.iter().all(|k| *k == folded[0]),
            "nfc_fold(): case and spaces too: {folded:?}"
        );
        assert_eq!(folded[0], "2783b969-ea34-8365-9b1b-c560be5fdc7e");
        assert_eq!(
            folded[0],
            IdempotencyKey::derive(
                "book_folded",
                &[("customer_name", &"jos\u{e9}"), ("period", &"2026-11")]
            )
            .to_string()
        );
    });
}

#[side_effect(key = "customer_id", tenant_required = true)]
async fn charge_for_tenant(key: &IdempotencyKey, customer_id: &str) -> Result<String, PayError> {
    let _ = customer_id;
    Ok(key.to_string())
}

/// S18 through the attribute: `tenant_required = true` refuses a call without a tenant; under
/// one, the key is the tenant's own.
#[test]
fn an_attribute_tool_can_require_a_tenant() {
    run(async {
        assert!(
            charge_for_tenant("cus_1").await.is_err(),
            "no tenant: refused"
        );
        let key = idemkit::as_tenant("acme", charge_for_tenant("cus_1"))
            .await
            .unwrap();
        let v1 = IdempotencyKey::derive("charge_for_tenant", &[("customer_id", &"cus_1")]);
        assert_eq!(key, v1.for_tenant("acme").to_string());
    });
}
