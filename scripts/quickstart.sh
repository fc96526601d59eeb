#!/usr/bin/env bash
# Builds the README's quick start as a user would: its `[dependencies]` block and its `src/main.rs`
# block, taken from README.md's own text, pasted into a new crate beside this checkout (linked
# as `idemkit`, as the README tells a user to clone it), then runs it twice and checks what it
# prints: the first run retries a lost answer and records the outcome, the second replays it
# from the SQLite file.
#
#   scripts/quickstart.sh        # from the repository's root; used by .ci/run
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The n-th fenced block (1-based) of a language after the "## Quick start" heading.
block() {
    awk -v lang="$1" -v want="$2" '
        /^## Quick start/ { inside = 1; next }
        inside && /^## / { exit }
        inside && !fenced && $0 ~ "^```" lang "( |$)" { n++; fenced = 1; next }
        inside && fenced && /^```/ { fenced = 0; next }
        inside && fenced && n == want { print }
    ' "$root/README.md"
}

mkdir -p "$work/agent/src"
deps="$(block toml 1)"
main="$(block rust 1)"
[[ -n "$deps" && -n "$main" ]] || { echo "quickstart: no toml or rust block under '## Quick start'" >&2; exit 1; }
grep -q '^idemkit = { path = "../idemkit" }$' <<<"$deps" \
    || { echo "quickstart: the dependencies name no idemkit = { path = \"../idemkit\" }" >&2; exit 1; }
# As the README says: the clone, named `idemkit`, beside the new crate (this checkout, linked).
ln -s "$root" "$work/idemkit"
{
    printf '[package]\nname = "agent"\nversion = "0.1.0"\nedition = "2024"\n\n'
    printf '%s\n' "$deps"
    printf '\n[workspace]\n'
} >"$work/agent/Cargo.toml"
printf '%s\n' "$main" >"$work/agent/src/main.rs"
# The workspace's lock and target dir: the same versions, and the dependencies built once.
cp "$root/Cargo.lock" "$work/agent/"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
# As pasted means without warnings too.
(cd "$work/agent" && cargo rustc --quiet --bin agent -- -D warnings)
bin="$CARGO_TARGET_DIR/debug/agent"

run() { (cd "$work" && env -u IDEMKIT_DB "$bin" 2>&1); }
first="$(run)"
echo "$first"
grep -q "charged 4200 as ch_[0-9a-f]*_2026-11: 2 attempt(s), replayed: false" <<<"$first"
grep -q "the provider was called 2 time(s) in this run" <<<"$first"
second="$(run)"
echo "$second"
grep -q "0 attempt(s), replayed: true" <<<"$second"
grep -q "the provider was called 0 time(s) in this run" <<<"$second"
echo "quickstart: the README's quick start builds as pasted and runs (retried once, then replayed)"
