//! What idemkit counts, in Prometheus' text format: a recorder is installed, a `charge` tool runs
//! (once), is replayed, and is refused as key reuse; then the counters and the store's latency
//! histogram are printed as a Prometheus scrape would read them.
//!
//! Run: `cargo run --example metrics --features metrics`. With `--serve 127.0.0.1:9000` it then
//! answers every HTTP request on that address with the same text, until stopped.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use idemkit::{Classify, Failure, Idem, IdempotencyKey, side_effect, store::MemoryStore};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

#[derive(Debug)]
enum PayError {
    Idem(idemkit::Error),
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError::Idem(e)
    }
}

/// Charges a customer for a period.
#[side_effect(key = "customer_id, period")]
async fn charge(
    key: &IdempotencyKey,
    customer_id: &str,
    period: &str,
    cents: u64,
) -> Result<String, PayError> {
    Ok(format!(
        "charged {cents} to {customer_id} for {period} ({key})"
    ))
}

/// Installs a Prometheus recorder (process-wide: once per process), makes one call run, one
/// replay and one be refused as key reuse, and returns the recorder's handle.
pub async fn three_calls() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    Idem::new(MemoryStore::new())
        .scope(async {
            charge("cus_1", "2026-11", 4200).await.expect("runs");
            charge("cus_1", "2026-11", 4200).await.expect("replays");
            let reuse = charge("cus_1", "2026-11", 9900).await;
            assert!(matches!(
                reuse,
                Err(PayError::Idem(idemkit::Error::KeyReuse { .. }))
            ));
        })
        .await;
    Ok(prometheus)
}

#[allow(dead_code)] // The test includes this file for `three_calls`.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = three_calls().await?;
    let text = prometheus.render();
    print!("{text}");
    let mut args = std::env::args().skip(1);
    if let (Some(flag), Some(addr)) = (args.next(), args.next())
        && flag == "--serve"
    {
        let listener = TcpListener::bind(&addr)?;
        eprintln!("serving the text above on http://{addr}/metrics");
        for stream in listener.incoming() {
            let mut stream = stream?;
            // Read the request head, then answer whatever was asked.
            let mut reader = BufReader::new(stream.try_clone()?);
            let mut line = String::new();
            while reader.read_line(&mut line)? > 2 {
                line.clear();
            }
            let text = prometheus.render();
            write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\n\r\n{text}",
                text.len()
            )?;
        }
    }
    Ok(())
}
