#!/usr/bin/env bash
# The README's test command: every test this machine can run, and a summary at the end that says
# how many ran, how many were left out, which and why.
#
#   scripts/test.sh                 # everything; extra arguments go to the test binaries:
#   scripts/test.sh s27_            # only the tests whose names hold `s27_`
#
# The PostgreSQL, PgBouncer and Redis servers the store tests need are started here (loopback,
# non-default ports, fresh data: scripts/test-servers.sh) where their binaries are installed, and
# stopped at the end; URLs already set (IDEMKIT_TEST_POSTGRES_URL, IDEMKIT_TEST_REDIS_URL,
# IDEMKIT_TEST_PGBOUNCER_URL) are used as they are. A server that is not installed: its tests
# (those in modules named `needs_postgres`, `needs_pgbouncer`, `needs_redis`) are left out with
# `--skip`, counted, and named in the summary with the package that brings the server. Under CI
# (`CI` set and not `false`) nothing may be left out: a missing server is a failure.
#
# The official Python MCP SDK is the client of `idemkit proxy` in cli/tests/proxy.rs (module
# `needs_python_mcp`): IDEMKIT_TEST_PYTHON's Python, else python3, must import `mcp`; where it
# cannot, that test is left out the same way (and under CI that is a failure: .ci/run installs it).
#
# A test binary that ends without its harness's closing line (a test that called
# `std::process::exit`, an abort) fails the run: its other tests' results are lost with it.
set -uo pipefail
cd "$(dirname "$0")/.."

under_ci() { [[ -n "${CI:-}" && "${CI:-}" != false ]]; }
say() { echo "test.sh: $*" >&2; }

# IDEMKIT_TEST_NO_SERVERS=1: as if none were installed (a quicker run; refused under CI).
no_servers() { [[ -n "${IDEMKIT_TEST_NO_SERVERS:-}" && "${IDEMKIT_TEST_NO_SERVERS}" != 0 ]]; }
have_postgres() { ! no_servers && { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null; }; }
have_redis() { ! no_servers && command -v redis-server >/dev/null; }
have_python_mcp() { "${IDEMKIT_TEST_PYTHON:-python3}" -c "import mcp" >/dev/null 2>&1; }
have_pgbouncer() { ! no_servers && { command -v pgbouncer >/dev/null || [[ -x /usr/sbin/pgbouncer ]]; }; }

start=()     # the servers started here
skip=()      # `needs_…` module names left out
declare -A why=()
if [[ -n "${IDEMKIT_TEST_POSTGRES_URL:-}" ]]; then
    :
elif have_postgres; then
    start+=(postgres)
else
    skip+=(needs_postgres)
    why[needs_postgres]="PostgreSQL's server binaries (initdb, pg_ctl) are not installed: apt-get install postgresql"
    no_servers && why[needs_postgres]="IDEMKIT_TEST_NO_SERVERS is set"
fi
if [[ -n "${IDEMKIT_TEST_PGBOUNCER_URL:-}" ]]; then
    :
elif [[ -n "${IDEMKIT_TEST_POSTGRES_URL:-}" ]]; then
    skip+=(needs_pgbouncer)
    why[needs_pgbouncer]="IDEMKIT_TEST_POSTGRES_URL was given without IDEMKIT_TEST_PGBOUNCER_URL (scripts/test-servers.sh starts both)"
elif ! have_postgres; then
    skip+=(needs_pgbouncer)
    why[needs_pgbouncer]="PgBouncer runs in front of PostgreSQL, which is not installed: apt-get install postgresql pgbouncer"
    no_servers && why[needs_pgbouncer]="IDEMKIT_TEST_NO_SERVERS is set"
elif have_pgbouncer; then
    start+=(pgbouncer)
else
    skip+=(needs_pgbouncer)
    why[needs_pgbouncer]="PgBouncer is not installed: apt-get install pgbouncer"
fi
if [[ -n "${IDEMKIT_TEST_REDIS_URL:-}" ]]; then
    :
elif have_redis; then
    start+=(redis)
else
    skip+=(needs_redis)
    why[needs_redis]="redis-server is not installed: apt-get install redis-server"
    no_servers && why[needs_redis]="IDEMKIT_TEST_NO_SERVERS is set"
fi
if ! have_python_mcp; then
    skip+=(needs_python_mcp)
    why[needs_python_mcp]="the official Python MCP SDK cannot be imported by ${IDEMKIT_TEST_PYTHON:-python3}: python3 -m venv /tmp/idemkit-py && /tmp/idemkit-py/bin/pip install mcp==2.3.0, then IDEMKIT_TEST_PYTHON=/tmp/idemkit-py/bin/python"
fi

if ((${#skip[@]})) && under_ci; then
    for s in "${skip[@]}"; do say "under CI every suite runs, but ${why[$s]}"; done
    exit 1
fi

if ((${#start[@]})); then
    trap 'scripts/test-servers.sh stop' EXIT
    urls="$(scripts/test-servers.sh start "${start[@]}")" || { say "the test servers did not start (above)"; exit 1; }
    eval "$urls"
fi

log="$(mktemp "${TMPDIR:-/tmp}/idemkit-test.XXXXXX")"
skip_args=()
for s in "${skip[@]}"; do skip_args+=(--skip "$s"); done

cargo test --workspace --all-features -- "${skip_args[@]}" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
# Fingerprints must not change with serde_json's features, which any crate in a user's build may
# switch on (idem-runtime/src/fingerprint/portable.rs): the runtime's unit tests once more with
# `arbitrary_precision` (a `Number` keeps its text, an `f32` its own) and `preserve_order`, the
# pinned fingerprints among them, and (`json`) a model's arguments whose number a double would
# round, refused where the `Value` keeps its text.
cargo test -p idem-runtime --lib --features tower,json,serde_json/arbitrary_precision,serde_json/preserve_order \
    -- "$@" 2>&1 | tee -a "$log"
rc2=${PIPESTATUS[0]}
((rc == 0)) && rc=$rc2

# The harness's lines: `running N tests` opens a binary's run, `test result: …` closes it.
read -r passed failed ignored filtered <<<"$(awk '
    /^test result: / {
        for (i = 1; i <= NF; i++) {
            n = $(i - 1) + 0
            if ($i ~ /^passed/) p += n; else if ($i ~ /^failed/) f += n
            else if ($i ~ /^ignored/) g += n; else if ($i == "filtered") x += n
        }
    }
    END { print p + 0, f + 0, g + 0, x + 0 }' "$log")"
opened="$(grep -cE '^running [0-9]+ tests?$' "$log")"
closed="$(grep -c '^test result: ' "$log")"

echo
echo "== idemkit tests (scripts/test.sh; the log: $log)"
if ((rc != 0 && failed == 0)); then
    echo "FAILED: cargo ended with an error that no test reported (a build error? see above and the log)"
fi
if ((opened != closed)); then
    echo "FAILED: $((opened - closed)) test binary(ies) ended without their closing line: a test ended the process"
    echo "(std::process::exit, an abort), and that binary's other results are lost. The binaries that ran:"
    grep -E '^     Running |^   Doc-tests ' "$log" | sed 's/^ */  /'
    rc=1
fi
if ((ignored)); then
    echo "ignored ($ignored, each with its reason in the source):"
    grep -E '^test .* \.\.\. ignored' "$log" \
        | sed -E -e 's/^test (.*) \.\.\. ignored, (.+)$/  \1: \2/' \
            -e 's/^test (.*) \.\.\. ignored$/  \1: (a doc test marked `ignore`)/' | sort -u
fi
left_out=0
if ((${#skip[@]})); then
    # How many tests each left-out suite holds: the test binaries list their tests without running.
    listed="$(cargo test --workspace --all-features --tests -- --list 2>/dev/null)"
    echo "left out, as their servers (or the Python MCP SDK) are not here:"
    for s in "${skip[@]}"; do
        n="$(grep -cE "${s}.*: test$" <<<"$listed")"
        left_out=$((left_out + n))
        echo "  $n tests in modules named $s: ${why[$s]}"
    done
    echo "  (install what is named, then run scripts/test.sh again: it starts the servers itself)"
else
    echo "left out: none (PostgreSQL, PgBouncer, Redis and Python MCP SDK suites ran)"
fi
if ((filtered > left_out)); then
    echo "filtered out by the arguments given: $((filtered - left_out))"
fi
echo "tests: $passed passed, $failed failed, $left_out skipped"
exit "$rc"
