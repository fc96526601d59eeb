// An operation with no natural identity keys on an `OperationId`, minted once and stored.
#![deny(warnings)] // A new warning in an expansion fails the case (issue 16).
use idemkit::{Idem, IdempotencyKey, MemoryStore, OperationId, side_effect};

#[derive(Debug)]
struct PayError(String);
impl idemkit::Classify for PayError {
    fn classify(&self) -> idemkit::Failure {
        idemkit::Failure::Permanent
    }
}
impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError(e.to_string())
    }
}

fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(fut)
}

#[side_effect(key(step))]
async fn send_report(key: &IdempotencyKey, step: OperationId, to: String) -> Result<String, PayError> {
    Ok(format!("{to} {key}"))
}

fn main() {
    let idem = Idem::new(MemoryStore::new());
    block_on(idem.scope(async {
        let step = idem.operation("plan-42/step-3").await.unwrap();
        let first = send_report(step, "ops@example.com".into()).await.unwrap();
        let again = send_report(idem.operation("plan-42/step-3").await.unwrap(), "ops@example.com".into()).await.unwrap();
        assert_eq!(first, again);
        let key = IdempotencyKey::derive("send_report", &[("step", &step)]);
        assert_eq!(first, format!("ops@example.com {key}"));
    }));
}
