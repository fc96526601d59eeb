#!/usr/bin/env bash
# Issue 53's growth figures (benches/README.md, "Growth"): not part of run.sh or CI. A 10 million
# record store takes ~3 GB of disk per store and several minutes to fill; the files, tables and
# keys are deleted after each run. Needs a PostgreSQL and a Redis: IDEMKIT_GROWTH_POSTGRES_URL and
# IDEMKIT_GROWTH_REDIS_URL (or the IDEMKIT_TEST_* ones of scripts/test-servers.sh, whose
# PostgreSQL runs with fsync off: the figures say so). Usage: benches/growth.sh [ROUNDS] [CALLS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
calls="${2:-2000}"
cargo bench -p idem-runtime --features sqlite,postgres,redis --bench growth --no-run
run() {
    echo "\$ cargo bench -p idem-runtime --features sqlite,postgres,redis --bench growth -- $*"
    cargo bench -q -p idem-runtime --features sqlite,postgres,redis --bench growth -- "$@" 2>&1 \
        | grep '^growth'
}
df -h "${TMPDIR:-/tmp}"
run size memory 1000000
run size redis 1000000
for store in memory sqlite postgres redis; do
    run size "$store" 1000000 tombstone
done
for store in memory sqlite postgres redis; do
    run prune "$store" 1000000 expired
    run prune "$store" 1000000 tombstone
done
run latency redis 1000000 "$calls"
for round in $(seq "$rounds"); do
    echo "round $round, $(date -u +%H:%M) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
    for store in sqlite postgres; do
        for n in 10000 1000000 10000000; do
            run latency "$store" "$n" "$calls"
        done
    done
done
