#!/usr/bin/env bash
# What the attributes cost at build time, against four baselines built from the same 200 generated
# tools (3 in 4 side effects, 1 in 4 reads), in one run:
#
#   plain         the functions without the attributes (their bodies are never compiled to code:
#                 nothing instantiates an `async fn`'s future in a library)
#   instantiated  the same, each future made once and boxed into a `dyn Future`: the bodies
#                 compiled, nothing else; the floor of anything that runs the bodies
#   tracing       `#[tracing::instrument(skip_all)]` on each: a common attribute wrapping a body
#   by hand       the same protocol written by hand with `Tool::side_effect` / `Tool::read_only`
#   registered    the same by hand, each tool also entered in the registry as the attributes enter
#                 it (`inventory::submit!` of its `ToolInfo`, so `idemkit::tools()` lists it): all
#                 the attributes write, nothing less
#   attributes    `#[side_effect]` / `#[read_only]`
#
#   benches/build_cost.sh            # prints each time and the ratios, with the goals
#   IDEMKIT_BUILD_COST_INSTRUCTIONS=1 benches/build_cost.sh
#                                    # also counts the instructions of each crate's compilation
#                                    # (valgrind's cachegrind, about a minute per variant)
#
# Goals (issue 20): the attributes ≤ 1.0× the hand-written `Tool` path and ≤ 1.0× tracing's
# attribute: a macro that writes what a user would write should cost no more than the user's code.
#
# Wall time is what a user waits for, but on a shared 2-core VM it swings by ±10% between builds
# of the same crate, more than the differences measured here; the instruction count is the same
# in every run, so it is the figure to compare variants by. The two differ in kind: the
# compiler's front end (macro expansion, type and borrow checking) runs on one thread, its code
# generation on several, so a variant with less to generate and more to check loses some of its
# lead in wall time.
#
# Each timed `cargo build` compiles only the tools' own crate (dependencies are built first, once),
# with incremental compilation off, as a clean build or CI does; the variants are built in turn,
# seven rounds (IDEMKIT_BUILD_COST_ROUNDS), and each keeps its best time (the least disturbed by
# other load, which only ever adds time); a ratio in wall time is of best times, shown with the
# range and median of the rounds' own ratios. The crates live in a
# temp dir and depend on this repository by path; they share one target dir (CARGO_TARGET_DIR
# when set, else one in the temp dir), their names kept apart.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
N="${IDEMKIT_BUILD_COST_TOOLS:-200}"
ROUNDS="${IDEMKIT_BUILD_COST_ROUNDS:-7}"
if [[ -n "${IDEMKIT_BUILD_COST_DIR:-}" ]]; then
    WORK="$IDEMKIT_BUILD_COST_DIR"   # kept, to look into the generated crates
    mkdir -p "$WORK"
else
    WORK="$(mktemp -d)"
    trap 'rm -rf "$WORK"' EXIT
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$WORK/target}"

VARIANTS=(plain instantiated tracing by_hand registered attributes)
declare -A LABEL=(
    [plain]="plain async fns"
    [instantiated]="the same, each instantiated once (boxed dyn Future)"
    [tracing]="#[tracing::instrument(skip_all)] on each"
    [by_hand]="the protocol by hand (Tool::side_effect / Tool::read_only)"
    [registered]="the same by hand, registered (inventory::submit! of a ToolInfo)"
    [attributes]="#[side_effect] / #[read_only]"
)

# register NAME KIND KEY_FIELDS: the registry entry the attributes make for a tool.
register() {
    cat <<EOF
inventory::submit! {
    idemkit::ToolInfo {
        name: "$1",
        kind: idemkit::ToolKind::$2,
        key_fields: &[$3],
        description: "",
        module_path: module_path!(),
        file: file!(),
        line: line!(),
    }
}
EOF
}

# tool_source VARIANT I: one tool, written as VARIANT.
tool_source() {
    local v="$1" i="$2"
    if (( i % 4 == 0 )); then
        case "$v" in
            attributes) echo "#[read_only]" ;;
            tracing) echo "#[tracing::instrument(skip_all)]" ;;
        esac
        if [[ "$v" == registered ]]; then
            register "balance_$i" ReadOnly ""
        fi
        if [[ "$v" == by_hand || "$v" == registered ]]; then
            cat <<EOF
pub async fn balance_$i(customer_id: &str) -> Result<u64, ToolError> {
    Tool::new("balance_$i").read_only(|| async move { Ok(customer_id.len() as u64 + $i) }).await
}
EOF
        else
            cat <<EOF
pub async fn balance_$i(customer_id: &str) -> Result<u64, ToolError> {
    Ok(customer_id.len() as u64 + $i)
}
EOF
        fi
        if [[ "$v" == instantiated ]]; then
            cat <<EOF
pub fn balance_${i}_boxed() -> BoxedTool<u64> { Box::pin(balance_$i("cus_1")) }
EOF
        fi
    else
        case "$v" in
            attributes) echo "#[side_effect(key = \"customer_id, order_id\")]" ;;
            tracing) echo "#[tracing::instrument(skip_all)]" ;;
        esac
        if [[ "$v" == registered ]]; then
            register "charge_$i" SideEffect '"customer_id", "order_id"'
        fi
        if [[ "$v" == by_hand || "$v" == registered ]]; then
            cat <<EOF
pub async fn charge_$i(customer_id: &str, order_id: u64, amount_cents: u64, note: String) -> Result<Receipt, ToolError> {
    let args = serde_json::json!({ "amount_cents": amount_cents, "note": note });
    Tool::new("charge_$i")
        .side_effect(&[("customer_id", &customer_id), ("order_id", &order_id)], &args, |_key| {
            let note = note.clone();
            async move { Ok(Receipt { id: format!("{customer_id}-{order_id}-{note}-$i"), amount_cents }) }
        })
        .await
}
EOF
        else
            cat <<EOF
pub async fn charge_$i(customer_id: &str, order_id: u64, amount_cents: u64, note: String) -> Result<Receipt, ToolError> {
    Ok(Receipt { id: format!("{customer_id}-{order_id}-{note}-$i"), amount_cents })
}
EOF
        fi
        if [[ "$v" == instantiated ]]; then
            cat <<EOF
pub fn charge_${i}_boxed() -> BoxedTool<Receipt> { Box::pin(charge_$i("cus_1", $i, 4200, String::new())) }
EOF
        fi
    fi
}

make_crate() {
    local v="$1" dir="$WORK/tools_$1"
    mkdir -p "$dir/src"
    cat >"$dir/Cargo.toml" <<EOF
[package]
name = "tools_$v"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
idemkit = { path = "$REPO", default-features = false }
serde = { version = "1", features = ["derive"] }
serde_json = "1"
inventory = "0.3"
tracing = { version = "0.1", default-features = false, features = ["std", "attributes"] }

[workspace]
EOF
    # The repository's versions, so every variant builds against the same dependencies.
    cp "$REPO/Cargo.lock" "$dir/Cargo.lock"
    {
        cat <<'EOF'
#![allow(dead_code, unused_imports, unused_variables)]
use idemkit::{Classify, Failure, IdempotencyKey, Tool, read_only, side_effect};

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

pub type BoxedTool<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, ToolError>> + Send + 'static>>;
EOF
        for i in $(seq 1 "$N"); do tool_source "$v" "$i"; done
    } >"$dir/src/lib.rs"
}

for v in "${VARIANTS[@]}"; do make_crate "$v"; done

build() { (cd "$WORK/tools_$1" && CARGO_INCREMENTAL=0 cargo build -q 2>&1); }

# Dependencies first, and a warm-up of each crate (a variant that does not build fails the run).
for v in "${VARIANTS[@]}"; do
    if ! out="$(build "$v")"; then
        echo "build_cost.sh: the $v variant does not build:" >&2
        echo "$out" >&2
        exit 1
    fi
done

time_build() {
    local v="$1" start end
    touch "$WORK/tools_$v/src/lib.rs"
    start=$(date +%s.%N)
    build "$v" >/dev/null
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

declare -A BEST TIMES
for v in "${VARIANTS[@]}"; do BEST[$v]=999999; TIMES[$v]=""; done
for _ in $(seq 1 "$ROUNDS"); do
    for v in "${VARIANTS[@]}"; do
        t=$(time_build "$v")
        TIMES[$v]+="$t "
        BEST[$v]=$(echo "if ($t < ${BEST[$v]}) $t else ${BEST[$v]}" | bc)
    done
done

# round_ratios SUBJECT BASELINE: "median min max" of SUBJECT's time over BASELINE's, round by
# round (the two built one after the other, so a slow spell of the machine weighs on both).
round_ratios() {
    local -a a b
    local i
    read -r -a a <<<"${TIMES[$1]}"
    read -r -a b <<<"${TIMES[$2]}"
    for i in "${!a[@]}"; do echo "scale=4; ${a[$i]} / ${b[$i]}" | bc; done | sort -g |
        awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f %.2f %.2f", m, v[1], v[NR] }'
}

# count_instructions VARIANT: the instructions (in billions) the compiler runs to build the crate,
# counted by cachegrind on cargo's own rustc command line for it (its dependencies are built).
count_instructions() {
    local dir="$WORK/tools_$1" cmd out
    touch "$dir/src/lib.rs"
    cmd=$(cd "$dir" && CARGO_INCREMENTAL=0 cargo build -v 2>&1 | sed -n 's/^ *Running `\(.*\)`$/\1/p' | tail -1)
    touch "$dir/src/lib.rs"
    if ! out=$(cd "$dir" && eval "valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null $cmd" 2>&1); then
        echo "build_cost.sh: the $1 variant did not build under cachegrind:" >&2
        echo "$out" | tail -20 >&2
        exit 1
    fi
    echo "$out" | sed -n 's/.*I *refs: *//p' | tr -d ',' | awk '{printf "%.3f", $1 / 1e9}'
}

declare -A INSTR
if [[ "${IDEMKIT_BUILD_COST_INSTRUCTIONS:-0}" == 1 ]]; then
    if command -v valgrind >/dev/null; then
        for v in "${VARIANTS[@]}"; do INSTR[$v]=$(count_instructions "$v"); done
    else
        echo "build_cost.sh: valgrind is not installed: no instruction counts" >&2
    fi
fi

ratio() { echo "scale=2; $1 / $2" | bc | sed 's/^\./0./'; }
verdict() { [[ "$(echo "$1 <= $2" | bc)" == 1 ]] && echo met || echo MISSED; }

printf '\nbuild cost: cargo build of a crate of %s tools alone (dev profile, CARGO_INCREMENTAL=0, best of %s alternated builds each; load average %s):\n' \
    "$N" "$ROUNDS" "$(cut -d' ' -f1-3 /proc/loadavg)"
for v in "${VARIANTS[@]}"; do
    printf '  %-66s %6.2f s   %5s× plain' "${LABEL[$v]}" "${BEST[$v]}" "$(ratio "${BEST[$v]}" "${BEST[plain]}")"
    if [[ -n "${INSTR[$v]:-}" ]]; then
        printf '   %6.3f G instructions   %5s× plain' "${INSTR[$v]}" "$(ratio "${INSTR[$v]}" "${INSTR[plain]}")"
    fi
    printf '\n'
done
# summary UNIT HAND REGISTERED TRACING INSTANTIATED: the attributes against the baselines the
# goals name, as ratios in one unit.
summary() {
    printf '  in %s, the attributes: %s× the protocol by hand (goal ≤ 1.0×: %s), %s× it registered as they register, %s× tracing'"'"'s attribute (goal ≤ 1.0×: %s), %s× the instantiated floor\n' \
        "$1" "$2" "$(verdict "$2" 1.0)" "$3" "$4" "$(verdict "$4" 1.0)" "$5"
}
# Wall time: the ratio of the best times. Other load only ever adds time to a build, so each
# variant's least disturbed build is the estimate of its cost, and their ratio the comparison;
# beside it, the range and median of the rounds' own ratios (of two builds made one after the
# other), which show how far one round's comparison can stray on this machine.
declare -A WALL WALL_RANGE
for pair in attributes:by_hand attributes:registered attributes:tracing attributes:instantiated \
    attributes:plain instantiated:plain; do
    subject=${pair%%:*} base=${pair##*:}
    read -r med lo hi <<<"$(round_ratios "$subject" "$base")"
    WALL[$pair]=$(ratio "${BEST[$subject]}" "${BEST[$base]}")
    WALL_RANGE[$pair]="rounds $lo–$hi, median $med"
done
summary "wall time (best builds)" "${WALL[attributes:by_hand]}" "${WALL[attributes:registered]}" \
    "${WALL[attributes:tracing]}" "${WALL[attributes:instantiated]}"
printf '    the %s rounds'"'"' own ratios: %s (by hand), %s (registered), %s (tracing)\n' "$ROUNDS" \
    "${WALL_RANGE[attributes:by_hand]}" "${WALL_RANGE[attributes:registered]}" "${WALL_RANGE[attributes:tracing]}"
if [[ -n "${INSTR[attributes]:-}" ]]; then
    summary "instructions" "$(ratio "${INSTR[attributes]}" "${INSTR[by_hand]}")" \
        "$(ratio "${INSTR[attributes]}" "${INSTR[registered]}")" \
        "$(ratio "${INSTR[attributes]}" "${INSTR[tracing]}")" \
        "$(ratio "${INSTR[attributes]}" "${INSTR[instantiated]}")"
fi

result() { # WHAT SUBJECT BASELINE GOAL: the best build times, their ratio and the rounds' own
          # ratios; the instruction counts and their ratio
    local pair="$2:$3"
    printf 'RESULT\t%s tools, %s: cargo build\t%.2f s\t%s\t%.2f s\t%s\t%s\t%s\n' \
        "$N" "${LABEL[$2]}" "${BEST[$2]}" "${LABEL[$3]}" "${BEST[$3]}" "${WALL[$pair]}" "$4" "${WALL_RANGE[$pair]}"
    if [[ -n "${INSTR[$2]:-}" ]]; then
        printf 'RESULT\t%s tools, %s: compiler instructions\t%.3f G\t%s\t%.3f G\t%s\t%s\n' \
            "$N" "${LABEL[$2]}" "${INSTR[$2]}" "${LABEL[$3]}" "${INSTR[$3]}" "$(ratio "${INSTR[$2]}" "${INSTR[$3]}")" "$4"
    fi
}
result build attributes by_hand "≤ 1.00×"
result build attributes registered "—"
result build attributes tracing "≤ 1.00×"
result build attributes instantiated "—"
result build instantiated plain "—"
result build attributes plain "—"
