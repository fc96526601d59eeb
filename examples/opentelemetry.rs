//! idemkit's calls in an OpenTelemetry pipeline, through the usual bridges: the call's `tracing`
//! span (`idemkit.side_effect`, with the tool, the key, the outcome, whether it was replayed and
//! verified) reaches OpenTelemetry through `tracing-opentelemetry`, and the counters idemkit
//! records through the `metrics` facade (feature `metrics`) through
//! `metrics-exporter-opentelemetry`. Here both end in OpenTelemetry's in-memory exporters, so
//! the example needs no collector; a program exports the same providers over OTLP instead
//! (`opentelemetry-otlp`), nothing else changes.
//!
//! Run: `cargo run --example opentelemetry --features opentelemetry`. It makes one call run, one
//! replay and one verified by the tool's verify function, then prints the spans and the counters
//! as OpenTelemetry exported them.

use std::sync::atomic::{AtomicU32, Ordering};

use idemkit::{Classify, Failure, Idem, Verified, side_effect, store::MemoryStore};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::instrument::WithSubscriber as _;
use tracing_subscriber::layer::SubscriberExt as _;

#[derive(Debug)]
enum SendError {
    /// The gateway took the message but its answer was lost.
    AnswerLost,
    Idem(idemkit::Error),
}

impl Classify for SendError {
    fn classify(&self) -> Failure {
        match self {
            SendError::AnswerLost => Failure::Ambiguous,
            SendError::Idem(e) => e.classify(),
        }
    }
}

impl From<idemkit::Error> for SendError {
    fn from(e: idemkit::Error) -> Self {
        SendError::Idem(e)
    }
}

/// What the SMS gateway has sent (it cannot deduplicate: `resend = false`, asked by `verify`).
static SENT: AtomicU32 = AtomicU32::new(0);

/// Sends a text to a customer about an order; its first answer is lost.
#[side_effect(key = "order_id", resend = false, verify = was_sent)]
async fn send_text(order_id: u64, text: &str) -> Result<String, SendError> {
    let n = SENT.fetch_add(1, Ordering::SeqCst);
    let _ = text;
    if n == 0 {
        return Err(SendError::AnswerLost);
    }
    Ok(format!("sms-{n}"))
}

/// Asks the gateway whether the text about this order went out.
async fn was_sent(order_id: u64, _text: &str) -> Result<Verified<String>, SendError> {
    let _ = order_id;
    Ok(match SENT.load(Ordering::SeqCst) {
        0 => Verified::NotApplied,
        _ => Verified::Applied("sms-0".to_owned()),
    })
}

/// What the pipeline exported.
pub struct Exported {
    pub spans: Vec<SpanData>,
    pub metrics: Vec<ResourceMetrics>,
}

impl Exported {
    /// The spans idemkit's calls made, by name.
    pub fn calls(&self) -> impl Iterator<Item = &SpanData> {
        self.spans
            .iter()
            .filter(|s| s.name == "idemkit.side_effect")
    }

    /// Every data point of the counter `name` as (its attributes as `k=v` sorted, its value).
    pub fn counter(&self, name: &str) -> Vec<(Vec<String>, u64)> {
        let mut points = Vec::new();
        for resource in &self.metrics {
            for scope in resource.scope_metrics() {
                for metric in scope.metrics().filter(|m| m.name() == name) {
                    if let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() {
                        for point in sum.data_points() {
                            let mut attrs: Vec<String> = point
                                .attributes()
                                .map(|kv| format!("{}={}", kv.key, kv.value))
                                .collect();
                            attrs.sort();
                            points.push((attrs, point.value()));
                        }
                    }
                }
            }
        }
        points
    }
}

/// Span attribute `name` of `span`, as text.
pub fn attribute(span: &SpanData, name: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == name)
        .map(|kv| kv.value.to_string())
}

/// Sets up the two bridges (the `metrics` recorder is process-wide: once per process), makes
/// three calls (one sent whose answer was lost and verify found applied, one replayed, one of
/// another order sent), and returns what OpenTelemetry exported.
pub async fn traced_calls() -> Result<Exported, Box<dyn std::error::Error>> {
    // Spans: tracing → tracing-opentelemetry → a tracer provider.
    let span_exporter = InMemorySpanExporter::default();
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(span_exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(tracer_provider.tracer("agent")));
    // Metrics: the `metrics` facade → metrics-exporter-opentelemetry → a meter provider.
    let metric_exporter = InMemoryMetricExporter::default();
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metric_exporter.clone()).build())
        .build();
    let recorder = metrics_exporter_opentelemetry::Recorder::with_meter(
        opentelemetry::metrics::MeterProvider::meter(&meter_provider, "idemkit"),
    );
    metrics::set_global_recorder(recorder)?;

    // The subscriber is in force while the calls are polled (a program sets it globally).
    let (first, again, other) = async {
        let first = send_text(7, "your order shipped").await;
        let again = send_text(7, "your order shipped").await;
        let other = send_text(8, "your order shipped").await;
        (first, again, other)
    }
    .with_subscriber(subscriber)
    .await;
    assert_eq!(first.expect("verified"), "sms-0");
    assert_eq!(again.expect("replayed"), "sms-0");
    assert_eq!(other.expect("sent"), "sms-1");

    tracer_provider.force_flush()?;
    meter_provider.force_flush()?;
    Ok(Exported {
        spans: span_exporter.get_finished_spans()?,
        metrics: metric_exporter.get_finished_metrics()?,
    })
}

#[allow(dead_code)] // The test includes this file for `traced_calls`.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let exported = Idem::new(MemoryStore::new()).scope(traced_calls()).await?;
    for span in exported.calls() {
        let field = |name| attribute(span, name).unwrap_or_else(|| "-".to_owned());
        println!(
            "span {}: tool={} key={} outcome={} replayed={} verified={} attempts={}",
            span.name,
            field("tool"),
            field("key"),
            field("outcome"),
            field("replayed"),
            field("verified"),
            field("attempts")
        );
    }
    for name in [
        "idemkit_calls_total",
        "idemkit_attempts_total",
        "idemkit_verifications_total",
    ] {
        for (attrs, value) in exported.counter(name) {
            println!("{name}{{{}}} {value}", attrs.join(","));
        }
    }
    Ok(())
}
