use http::StatusCode;

use super::service::refusal;
use crate::error::{Error, StoreError, StoreErrorKind};

/// A store that cannot be reached is worth a retry (503); a record that cannot be read is
/// not (500): an earlier request may have run, and only an operator can tell.
#[test]
fn a_store_failure_is_503_only_when_a_retry_can_help() {
    let status = |kind| {
        let e = Error::Store {
            tool: "http".to_owned(),
            key: None,
            source: StoreError::new(kind, "x"),
        };
        let config =
            super::IdempotencyLayer::new(crate::Idem::new(crate::MemoryStore::new())).config;
        refusal::<http_body_util::Empty<bytes::Bytes>>(&config, &e).status()
    };
    assert_eq!(
        status(StoreErrorKind::Unavailable),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        status(StoreErrorKind::Corrupt),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(
        status(StoreErrorKind::Incompatible),
        StatusCode::INTERNAL_SERVER_ERROR
    );
}
