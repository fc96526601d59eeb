#!/usr/bin/env bash
# Instructions per call, counted by valgrind's callgrind: figures that do not move with the
# machine's load or speed, beside criterion's times (`cargo bench --bench calls`).
#
# Each variant runs in the bench binary's count mode (`IDEMKIT_COUNT=<variant>:<n>`: a warm-up
# call, then n calls, no criterion) twice, with N1 and N2 calls; (count(N2) - count(N1)) / (N2 -
# N1) is what one call costs, without the process, the runtime or the warm-up. Printed per
# variant: all instructions, and those outside SHA-256 (valgrind's CPU has no SHA extensions, so
# sha2 runs its software rounds, ~5,000 instructions a hash, where the machine itself uses its
# SHA instructions; both sides of every pair hash the same number of times). Then the ratios.
#
# Run from the repository's root: `benches/instructions.sh` (needs valgrind; about a minute
# after the build). `N1=… N2=…` override the counts (default 1000 and 3000); `CALLS_BIN=…
# HTTP_BIN=…` count binaries built before (copies of `target/release/deps/calls-…`, `http-…`).
set -euo pipefail

N1=${N1:-1000}
N2=${N2:-3000}
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The bench binaries (release profile), as cargo builds them for `cargo bench`.
binary() {
    cargo bench --bench "$1" "${@:2}" --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}
# CALLS_BIN / HTTP_BIN: binaries built before (to compare two builds), instead of building.
calls=${CALLS_BIN:-$(binary calls)}
http=${HTTP_BIN:-$(binary http --features tower)}
[[ -x $calls && -x $http ]] || { echo "instructions.sh: the bench binaries did not build" >&2; exit 1; }

# count BINARY VARIANT N: "all sha" instructions of one run.
count() {
    local out="$work/$2.$3.out"
    IDEMKIT_COUNT="$2:$3" valgrind --tool=callgrind --callgrind-out-file="$out" "$1" \
        >/dev/null 2>"$work/valgrind.log" || { cat "$work/valgrind.log" >&2; exit 1; }
    local all sha
    all=$(sed -n 's/^summary: *//p' "$out")
    # Self cost of sha2's functions (the compression rounds and their helpers).
    sha=$(callgrind_annotate --threshold=100 "$out" 2>/dev/null |
        awk '/sha2::/ { gsub(",", "", $1); s += $1 } END { print s + 0 }')
    echo "$all $sha"
}

# per_call BINARY VARIANT: "all outside-sha256" per call.
per_call() {
    local a b
    read -r -a a <<<"$(count "$1" "$2" "$N1")"
    read -r -a b <<<"$(count "$1" "$2" "$N2")"
    awk -v a0="${a[0]}" -v a1="${a[1]}" -v b0="${b[0]}" -v b1="${b[1]}" -v n=$((N2 - N1)) \
        'BEGIN { all = (b0 - a0) / n; sha = (b1 - a1) / n; printf "%.0f %.0f\n", all, all - sha }'
}

declare -A ALL OUT
row() {
    local r
    read -r -a r <<<"$(per_call "$1" "$2")"
    ALL[$2]=${r[0]}
    OUT[$2]=${r[1]}
    printf '%-12s %10s instructions a call, %8s outside SHA-256\n' "$2" "${r[0]}" "${r[1]}"
}

echo "instructions per call (callgrind, (n=$N2 - n=$N1) / $((N2 - N1)))"
for v in wrapped hand kept replay hand-replay verified read hand-read; do row "$calls" "$v"; done
for v in http-bare http-first http-replay; do row "$http" "$v"; done

ratio() {
    awk -v s="${ALL[$2]}" -v b="${ALL[$3]}" -v so="${OUT[$2]}" -v bo="${OUT[$3]}" -v what="$1" \
        'BEGIN { printf "%-58s %5.2fx  (outside SHA-256: %5.2fx)\n", what, s / b, so / bo }'
}
echo
echo "ratios (instructions)"
ratio "#[side_effect] call / hand-written map" wrapped hand
ratio "#[side_effect] call / hand-written map keeping what the guarantees need" wrapped kept
ratio "hand-written map keeping what the guarantees need / hand-written map" kept hand
ratio "replay / hand-written map's replay" replay hand-replay
ratio "lost reply settled by verify / #[side_effect] call" verified wrapped
ratio "#[read_only] call / hand-written read" read hand-read
ratio "HTTP layer, first request / handler without the layer" http-first http-bare
ratio "HTTP layer, replay / handler without the layer" http-replay http-bare
