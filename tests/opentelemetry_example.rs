//! The OpenTelemetry example, asserted (issue 44): through the usual bridges, each call is one
//! span carrying its tool, key, outcome and whether it was verified or replayed, and idemkit's
//! counters arrive as OpenTelemetry sums, all in the SDK's in-memory exporters.

#[path = "../examples/opentelemetry.rs"]
mod example;

use idemkit::{Idem, IdempotencyKey, MemoryStore};

#[tokio::test]
async fn one_span_per_call_with_tool_key_outcome_and_verification_and_the_counters() {
    let exported = Idem::new(MemoryStore::new())
        .scope(example::traced_calls())
        .await
        .unwrap();
    let calls: Vec<_> = exported.calls().collect();
    assert_eq!(calls.len(), 3, "one span per call: {:#?}", exported.spans);
    let field = |i: usize, name| example::attribute(calls[i], name);
    let key7 = IdempotencyKey::derive("send_text", &[("order_id", &7u64)]).to_string();
    let key8 = IdempotencyKey::derive("send_text", &[("order_id", &8u64)]).to_string();
    // `verified` is set only on a call whose unknown outcome verify found applied.
    for (i, key, outcome, verified, replayed) in [
        (0, &key7, "verified", Some("true"), "false"),
        (1, &key7, "replayed", None, "true"),
        (2, &key8, "completed", None, "false"),
    ] {
        assert_eq!(field(i, "tool").as_deref(), Some("send_text"), "call {i}");
        assert_eq!(field(i, "key").as_deref(), Some(key.as_str()), "call {i}");
        assert_eq!(field(i, "outcome").as_deref(), Some(outcome), "call {i}");
        assert_eq!(field(i, "verified").as_deref(), verified, "call {i}");
        assert_eq!(field(i, "replayed").as_deref(), Some(replayed), "call {i}");
    }

    let calls_total = exported.counter("idemkit_calls_total");
    for outcome in ["verified", "replayed", "completed"] {
        let point = vec![
            "kind=side_effect".to_owned(),
            format!("outcome={outcome}"),
            "tool=send_text".to_owned(),
        ];
        assert!(
            calls_total.contains(&(point.clone(), 1)),
            "no {point:?} = 1 in {calls_total:?}"
        );
    }
    let verifications = exported.counter("idemkit_verifications_total");
    assert!(
        verifications.contains(&(
            vec!["answer=applied".to_owned(), "tool=send_text".to_owned()],
            1
        )),
        "{verifications:?}"
    );
    let attempts = exported.counter("idemkit_attempts_total");
    assert!(
        attempts.contains(&(
            vec!["kind=side_effect".to_owned(), "tool=send_text".to_owned()],
            2
        )),
        "two bodies ran (order 7's first attempt, order 8's): {attempts:?}"
    );
}

/// Issue 51 #6: a call that ended with its outcome unknown, or failed, is exported with status
/// Error and why; why its verify function failed is kept in the span and in the record (its
/// note, which `idemkit show` prints). A call that ran leaves the status unset.
mod finding6 {
    use std::sync::Arc;

    use idemkit::store::RecordState;
    use idemkit::{Classify, Failure, Idem, MemoryStore, Records, Verified, side_effect};
    use opentelemetry::trace::{Status, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing::instrument::WithSubscriber as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    #[derive(Debug)]
    enum MailError {
        /// The mail server took the message; its answer was lost.
        Lost,
        Declined,
        /// The mail server's log could not be read.
        LogDown(&'static str),
        Idem(idemkit::Error),
    }

    impl std::fmt::Display for MailError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                MailError::Lost => f.write_str("the answer was lost"),
                MailError::Declined => f.write_str("the address was declined"),
                MailError::LogDown(why) => write!(f, "the mail log is unreachable: {why}"),
                MailError::Idem(e) => e.fmt(f),
            }
        }
    }

    impl Classify for MailError {
        fn classify(&self) -> Failure {
            match self {
                MailError::Lost => Failure::Ambiguous,
                MailError::Declined | MailError::LogDown(_) => Failure::Permanent,
                MailError::Idem(e) => e.classify(),
            }
        }
    }

    impl From<idemkit::Error> for MailError {
        fn from(e: idemkit::Error) -> Self {
            MailError::Idem(e)
        }
    }

    /// Sends a mail; order 1's answer is lost, order 2's address is declined, others go out.
    #[side_effect(key = "order_id", resend = false, verify = was_mailed, max_attempts = 1)]
    async fn mail(order_id: u64) -> Result<String, MailError> {
        match order_id {
            1 => Err(MailError::Lost),
            2 => Err(MailError::Declined),
            n => Ok(format!("mail-{n}")),
        }
    }

    async fn was_mailed(_order_id: u64) -> Result<Verified<String>, MailError> {
        Err(MailError::LogDown("connection refused"))
    }

    #[tokio::test]
    async fn finding6_failed_and_unknown_calls_export_status_error_with_why() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("agent")));
        let store = Arc::new(MemoryStore::new());
        let idem = Idem::new(store.clone());
        let (unknown, declined, sent) = idem
            .scope(async { (mail(1).await, mail(2).await, mail(3).await) })
            .with_subscriber(subscriber)
            .await;
        assert!(
            matches!(
                unknown,
                Err(MailError::Idem(idemkit::Error::Ambiguous { .. }))
            ),
            "{unknown:?}"
        );
        assert!(matches!(declined, Err(MailError::Declined)), "{declined:?}");
        assert_eq!(sent.unwrap(), "mail-3");
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        let calls: Vec<_> = spans
            .iter()
            .filter(|s| s.name == "idemkit.side_effect")
            .collect();
        assert_eq!(calls.len(), 3, "{spans:#?}");
        let why = "the verify function failed: the mail log is unreachable: connection refused";
        match &calls[0].status {
            Status::Error { description } => assert!(description.contains(why), "{description}"),
            other => panic!("unknown outcome, status {other:?}"),
        }
        match &calls[1].status {
            Status::Error { description } => {
                assert!(description.contains("permanent"), "{description}")
            }
            other => panic!("failed call, status {other:?}"),
        }
        assert_eq!(calls[2].status, Status::Unset, "a call that ran");

        // The record keeps why, as `idemkit show` prints it.
        let key = idemkit::IdempotencyKey::derive("mail", &[("order_id", &1u64)]);
        let record = Records::get(&*store, &key).await.unwrap().expect("kept");
        match &record.state {
            RecordState::Ambiguous { note } => assert!(note.contains(why), "{note}"),
            other => panic!("{other:?}"),
        }
    }
}
