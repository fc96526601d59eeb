//! Key derivation (`IdempotencyKey::derive`, over `&dyn KeyPart` fields; `#[side_effect]` expands
//! to the same encoding through `KeyHasher::field` on each field's own type, which measured the
//! same for 8 fields) for 1, 3 and 8 key fields, against the floor: one raw SHA-256 of the same
//! encoding-v1 bytes, encoded beforehand. The difference is what streaming the fields, the
//! framing and making the UUID (version bits, the 36-character text) cost.
//!
//! Each pair is also run in interleaved rounds after criterion's runs (as the calls bench's are),
//! and reported by the median of the rounds' ratios with their range: criterion measures the two
//! sides seconds apart, and this machine's slow spells fell on one side more than the other (the
//! 8-field row measured 1.43× to 1.98× over runs of unchanged code). With both sides in one mode
//! the ratio still differs by mode (8 fields: ~1.5× in the fast one, ~1.7× in the slow one): the
//! field encoding slows more than SHA-256's instructions do.
//!
//! Run: `cargo bench --bench keys` (or `benches/run.sh` for everything).

mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use idemkit::{IdempotencyKey, KeyPart};
use sha2::{Digest, Sha256};
use support::{Pair, Selected, record, summary};
use uuid::Uuid;

/// Encoding v1 written out by hand (docs/protocol.md, "Keys: encoding v1"), for the baseline's input.
fn encode_v1(tool: &str, fields: &[(&str, u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = b"idemkit:v1\0".to_vec();
    let put = |b: &[u8], out: &mut Vec<u8>| {
        out.extend_from_slice(&(b.len() as u32).to_be_bytes());
        out.extend_from_slice(b);
    };
    put(tool.as_bytes(), &mut out);
    out.extend_from_slice(&(fields.len() as u32).to_be_bytes());
    for (name, tag, value) in fields {
        put(name.as_bytes(), &mut out);
        out.push(*tag);
        put(value, &mut out);
    }
    out
}

/// Interleaved rounds per pair, and derivations per side in a round (a few milliseconds).
const ROUNDS: usize = 100;
const PER_ROUND: u64 = 10_000;

fn bench(c: &mut Criterion) {
    let order = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    let values: [(&str, &(dyn KeyPart + Sync), u8, Vec<u8>); 8] = [
        ("customer_id", &"cus_1", 1, b"cus_1".to_vec()),
        ("purpose", &"subscription", 1, b"subscription".to_vec()),
        ("period", &"2026-11", 1, b"2026-11".to_vec()),
        ("order_id", &1042u64, 2, b"1042".to_vec()),
        ("currency", &"eur", 1, b"eur".to_vec()),
        ("line", &-7i32, 2, b"-7".to_vec()),
        ("gift", &true, 3, vec![1]),
        ("plan", &order, 5, order.as_bytes().to_vec()),
    ];
    let mut group = c.benchmark_group("key derivation");
    for n in [1usize, 3, 8] {
        let fields: Vec<(&str, &(dyn KeyPart + Sync))> = values[..n]
            .iter()
            .map(|(name, v, _, _)| (*name, *v))
            .collect();
        let encoded = encode_v1(
            "charge",
            &values[..n]
                .iter()
                .map(|(name, _, tag, bytes)| (*name, *tag, bytes.clone()))
                .collect::<Vec<_>>(),
        );
        // The baseline hashes exactly the bytes the key is made of.
        let mut first = [0u8; 16];
        first.copy_from_slice(&Sha256::digest(&encoded)[..16]);
        assert_eq!(
            IdempotencyKey::derive("charge", &fields).as_uuid(),
            Uuid::new_v8(first),
            "the baseline's bytes are encoding v1"
        );

        let derive = |iters: u64| {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(IdempotencyKey::derive(
                    black_box("charge"),
                    black_box(&fields[..]),
                ));
            }
            start.elapsed()
        };
        let hash = |iters: u64| {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(Sha256::digest(black_box(&encoded[..])));
            }
            start.elapsed()
        };
        let (name, raw) = (format!("derive, {n} field(s)"), raw_name(n));
        let both = Selected::default();
        group.bench_function(&name, |b| {
            both.subject();
            b.iter_custom(|iters| record(&name, iters, derive(iters)))
        });
        println!("{n} field(s): {} bytes of encoding v1", encoded.len());
        group.bench_function(&raw, |b| {
            both.baseline();
            b.iter_custom(|iters| record(&raw, iters, hash(iters)))
        });
        if both.all() {
            support::interleave(&name, &raw, ROUNDS, PER_ROUND, &derive, &hash);
        }
    }
    group.finish();
}

fn raw_name(n: usize) -> String {
    format!("raw SHA-256 of the same bytes, {n} field(s)")
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    bench(&mut c);
    c.final_summary();
    let names: Vec<(String, String)> = [1, 3, 8]
        .into_iter()
        .map(|n| (format!("derive, {n} field(s)"), raw_name(n)))
        .collect();
    let pairs: Vec<Pair<'_>> = names
        .iter()
        .map(|(s, b)| Pair {
            subject: s,
            baseline: b,
            goal: Some(1.5),
        })
        .collect();
    summary(
        "key derivation vs one raw SHA-256 of the same bytes",
        &pairs,
    );
}
