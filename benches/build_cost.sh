#!/usr/bin/env bash
# What the attributes cost at build time: a generated crate with 200 `#[side_effect]` /
# `#[read_only]` tools against the same 200 functions without the attributes. Dependencies are
# built once first, so each timed `cargo build` compiles only the tools' own crate.
#
#   benches/build_cost.sh            # prints both times and the ratio (goal ≤ 1.5×)
#
# The crates live in a temp dir and depend on this repository by path. CARGO_TARGET_DIR, when
# set, is used for both (the two crates have different names, so neither rebuilds the other).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
N="${IDEMKIT_BUILD_COST_TOOLS:-200}"
if [[ -n "${IDEMKIT_BUILD_COST_DIR:-}" ]]; then
    WORK="$IDEMKIT_BUILD_COST_DIR"   # kept, to look into the generated crates
    mkdir -p "$WORK"
else
    WORK="$(mktemp -d)"
    trap 'rm -rf "$WORK"' EXIT
fi

# make_crate NAME ATTRIBUTES(yes|no)
make_crate() {
    local name="$1" attrs="$2" dir="$WORK/$1"
    mkdir -p "$dir/src"
    cat >"$dir/Cargo.toml" <<EOF
[package]
name = "$name"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
idemkit = { path = "$REPO", default-features = false }
serde = { version = "1", features = ["derive"] }

[workspace]
EOF
    {
        cat <<'EOF'
#![allow(dead_code, unused_imports, unused_variables)]
use idemkit::{Classify, Failure, IdempotencyKey, read_only, side_effect};

#[derive(Debug)]
pub struct ToolError;
impl Classify for ToolError {
    fn classify(&self) -> Failure { Failure::Transient }
}
impl From<idemkit::Error> for ToolError {
    fn from(_: idemkit::Error) -> Self { ToolError }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Receipt { pub id: String, pub amount_cents: u64 }
EOF
        for i in $(seq 1 "$N"); do
            if (( i % 4 == 0 )); then
                [[ "$attrs" == yes ]] && echo "#[read_only]"
                cat <<EOF
pub async fn balance_$i(customer_id: &str) -> Result<u64, ToolError> {
    Ok(customer_id.len() as u64 + $i)
}
EOF
            else
                [[ "$attrs" == yes ]] && echo "#[side_effect(key = \"customer_id, order_id\")]"
                cat <<EOF
pub async fn charge_$i(customer_id: &str, order_id: u64, amount_cents: u64, note: String) -> Result<Receipt, ToolError> {
    Ok(Receipt { id: format!("{customer_id}-{order_id}-{note}-$i"), amount_cents })
}
EOF
            fi
        done
    } >"$dir/src/lib.rs"
}

make_crate tools_plain no
make_crate tools_attributed yes

# Incremental compilation off: each timed build compiles the crate anew, as a clean build or CI does.
build() { (cd "$WORK/$1" && CARGO_INCREMENTAL=0 cargo build -q 2>&1); }

# Dependencies first (the same for both), and a warm-up of each crate.
build tools_plain >/dev/null
build tools_attributed >/dev/null

time_build() {
    local name="$1" start end
    touch "$WORK/$name/src/lib.rs"
    start=$(date +%s.%N)
    build "$name" >/dev/null
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

# Alternate, three rounds each, and keep each one's best (the least disturbed by other load).
plain=999999
attributed=999999
for _ in 1 2 3; do
    t=$(time_build tools_plain); plain=$(echo "if ($t < $plain) $t else $plain" | bc)
    t=$(time_build tools_attributed); attributed=$(echo "if ($t < $attributed) $t else $attributed" | bc)
done
ratio=$(echo "scale=2; $attributed / $plain" | bc)
printf '\nbuild cost (cargo build of the tools crate alone, dev profile, best of 3 each, alternated):\n'
printf '  %s tools with the attributes   %6.2f s   vs the same functions without   %6.2f s   ratio %s×   goal ≤ 1.5×: %s\n' \
    "$N" "$attributed" "$plain" "$ratio" "$(echo "$ratio <= 1.5" | bc | sed 's/1/met/;s/0/MISSED/')"
printf 'RESULT\t%s tools, with the attributes: cargo build\t%.2f s\tthe same %s functions without\t%.2f s\t%s\t≤ 1.50×\n' \
    "$N" "$attributed" "$N" "$plain" "$ratio"
