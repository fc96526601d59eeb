#!/usr/bin/env bash
# Runs every benchmark against its baseline and prints the README's "Performance" table.
#
#   benches/run.sh
#
# Starts PostgreSQL and Redis on loopback for the distributed stores (scripts/test-servers.sh, on
# ports of their own so a test run's servers are left alone) when their binaries are installed and
# no IDEMKIT_TEST_*_URL is set; without them those rows are skipped. Each figure is the median of
# its measured batches; ratios are of figures taken in the same run. The stores' ratios are the
# median of the ratios of 10 interleaved rounds (store, by hand, by hand, store, ...), shown with
# their range: one round's disk or server mood is not a regression; the wrapped calls with a goal
# likewise, over 100 rounds of a few milliseconds (benches/calls.rs). The build rows compare the
# attributes with five baselines (benches/build_cost.sh), in wall time and, when valgrind is
# installed, in the compiler's instructions (the same in every run). Takes about twenty minutes
# on 2 cores (16 measured with the bench binaries already built).
set -euo pipefail
cd "$(dirname "$0")/.."

out="$(mktemp)"
servers=""
cleanup() {
    rm -f "$out"
    [[ -n "$servers" ]] && IDEMKIT_TEST_PG_PORT=55442 IDEMKIT_TEST_REDIS_PORT=56389 TMPDIR="$servers" \
        scripts/test-servers.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

bench() {
    cargo bench "$@" 2>&1 | tee -a "$out" | { grep -vE '^(RESULT|Benchmarking|Found|  [0-9]+ \()' || true; }
}

bench --bench keys
bench --bench calls
# The metrics feature: the same call with no recorder installed, and with a Prometheus recorder in
# force; the first beside the call built without the feature (two builds, figures of one run).
bench --bench calls --features metrics -- metrics
awk -F'\t' '
    function ns(s,  a, v) { split(s, a, " "); v = a[1]; if (a[2] == "µs") v *= 1e3; else if (a[2] == "ms") v *= 1e6; return v }
    $1 == "RESULT" && $2 == "#[side_effect] call (idemkit MemoryStore)" && off == "" { off = $3 }
    $1 == "RESULT" && $4 == "#[side_effect] call, metrics feature, no recorder" { on = $5 }
    END { if (off != "" && on != "") printf "RESULT\t#[side_effect] call, metrics feature, no recorder\t%s\tthe same call, built without the feature\t%s\t%.2f\t—\t\n", on, off, ns(on) / ns(off) }
' "$out" >> "$out"
bench -p idem-runtime --features sqlite --bench sqlite_store
# A request through the tower layer against the same handler without it (docs/http.md).
bench --bench http --features tower
# The servers start only now: a fresh PostgreSQL's start-up work (checkpoints, autovacuum's
# launcher) swung the first benchmarks' figures by 15% when they started at the top.
if [[ -z "${IDEMKIT_TEST_POSTGRES_URL:-}" && -z "${IDEMKIT_TEST_REDIS_URL:-}" ]]; then
    servers="$(mktemp -d)"
    chmod 755 "$servers"   # PostgreSQL runs as its own user when we are root
    if started="$(IDEMKIT_TEST_PG_PORT=55442 IDEMKIT_TEST_REDIS_PORT=56389 TMPDIR="$servers" scripts/test-servers.sh start)"; then
        eval "$started"
    else
        echo "run.sh: PostgreSQL/Redis not started; their rows are skipped" >&2
    fi
fi
if [[ -n "${IDEMKIT_TEST_POSTGRES_URL:-}${IDEMKIT_TEST_REDIS_URL:-}" ]]; then
    bench -p idem-runtime --features postgres,redis --bench distributed_stores
fi
# The build rows, with the compiler's instruction counts beside the times (skipped without valgrind).
IDEMKIT_BUILD_COST_INSTRUCTIONS=1 benches/build_cost.sh | tee -a "$out"
# Instructions per call (callgrind), beside the times; needs valgrind.
if command -v valgrind >/dev/null; then
    benches/instructions.sh | tee -a "$out"
fi

echo
echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| what | figure | baseline | baseline's figure | ratio | goal |"
echo "| --- | ---: | --- | ---: | ---: | --- |"
# A pair measured in interleaved rounds (the stores) gives the median of its rounds' ratios and
# their range; its figures are the medians of each side's batches.
grep '^RESULT' "$out" | while IFS=$'\t' read -r _ what fig base bfig ratio goal range; do
    echo "| $what | $fig | $base | $bfig | ${ratio}×${range:+ (${range})} | $goal |"
done
