//! Every side-effect call emits one `idemkit.side_effect` span with tool, key, fingerprint,
//! attempts, replayed and outcome: what to log when an agent spends money.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use idem_runtime::{Classify, Error, Failure, Idem, IdempotencyKey, MemoryStore, Tool};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records the fields of every span named `idemkit.*`, by span.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<(String, FieldMap)>>>);

type FieldMap = BTreeMap<String, String>;

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Spans {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut spans = self.0.lock().unwrap();
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        spans.push((attrs.metadata().name().to_owned(), fields));
        Id::from_u64(spans.len() as u64)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut spans = self.0.lock().unwrap();
        values.record(&mut Fields(&mut spans[span.into_u64() as usize - 1].1));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[derive(Debug)]
struct E;
impl Classify for E {
    fn classify(&self) -> Failure {
        Failure::Ambiguous
    }
}
impl From<Error> for E {
    fn from(_: Error) -> Self {
        E
    }
}

#[test]
fn each_call_has_one_span_with_tool_key_attempts_replayed_outcome() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(spans.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let idem = Idem::new(MemoryStore::new());
        let runs = std::sync::atomic::AtomicU32::new(0);
        let call = || {
            Tool::new("charge")
                .idem(&idem)
                .side_effect(&[("order", &9u8)], &(), |_| {
                    let failed = runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
                    async move { if failed { Err(E) } else { Ok(1u8) } }
                })
        };
        call().await.unwrap();
        call().await.unwrap();
    });
    let spans = spans.0.lock().unwrap().clone();
    let calls: Vec<_> = spans
        .into_iter()
        .filter(|(name, _)| name == "idemkit.side_effect")
        .map(|(_, f)| f)
        .collect();
    assert_eq!(calls.len(), 2);
    let key = IdempotencyKey::derive("charge", &[("order", &9u8)]).to_string();
    for fields in &calls {
        assert_eq!(fields["tool"], "charge");
        assert_eq!(fields["key"], key);
        assert_eq!(fields["fingerprint"].len(), 64);
    }
    assert_eq!(
        (calls[0]["attempts"].as_str(), calls[0]["replayed"].as_str()),
        ("2", "false")
    );
    assert_eq!(calls[0]["outcome"], "completed");
    assert_eq!(
        (calls[1]["attempts"].as_str(), calls[1]["replayed"].as_str()),
        ("0", "true")
    );
    assert_eq!(calls[1]["outcome"], "replayed");
}
