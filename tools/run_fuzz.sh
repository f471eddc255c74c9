#!/usr/bin/env bash
# Builds the rendezvous protocol fuzz target with clang (libFuzzer + AddressSanitizer + UBSan) and
# runs it for SECONDS (default 60) from the checked-in seed corpus. Exits non-zero on any crash,
# leak or sanitizer report, and prints the input that caused it.
#   tools/run_fuzz.sh [SECONDS]
# Needs clang++ and Debian's libclang-rt-14-dev (tools/install_deps.sh installs both).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_TO_RUN="${1:-60}"
CXX="${FUZZ_CXX:-clang++}"
if ! command -v "$CXX" >/dev/null 2>&1; then
    echo "run_fuzz: $CXX not found; install it with \`make deps\` (Debian: apt-get install clang libclang-rt-14-dev)" >&2
    exit 2
fi

WORK="$(mktemp -d -t dadt-fuzz.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
BIN="$WORK/rendezvous_protocol_fuzzer"
echo "run_fuzz: building $BIN with $CXX -fsanitize=fuzzer,address,undefined"
# The parser sources directly: no Bazel, so the sanitizer flags reach every line of it.
"$CXX" -std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$ROOT" \
    "$ROOT/test/fuzz/rendezvous_protocol_fuzzer.cc" \
    "$ROOT/test/fuzz/rendezvous_protocol_fuzz.cc" \
    "$ROOT/runtime/common/rendezvous/protocol.cc" \
    "$ROOT/runtime/common/status.cc" \
    -o "$BIN"

# New inputs go to a scratch copy; the checked-in seeds are read only.
mkdir -p "$WORK/corpus" "$WORK/artifacts"
echo "run_fuzz: fuzzing for ${SECONDS_TO_RUN} s from $(ls "$ROOT/test/fuzz/corpus/rendezvous_protocol" | wc -l) seeds"
set +e
"$BIN" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$WORK/artifacts/" \
    "$WORK/corpus" "$ROOT/test/fuzz/corpus/rendezvous_protocol" >"$WORK/log" 2>&1
rc=$?
set -e
grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|Done )' "$WORK/log" || true
if [ "$rc" -ne 0 ]; then
    tail -n 60 "$WORK/log"
    for f in "$WORK"/artifacts/*; do
        [ -e "$f" ] || continue
        echo "run_fuzz: crashing input $(basename "$f") (base64): $(base64 -w0 "$f")"
    done
    echo "run_fuzz: FAILED (exit $rc)" >&2
    exit "$rc"
fi
echo "run_fuzz: no crash in ${SECONDS_TO_RUN} s"
