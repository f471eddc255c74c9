#!/usr/bin/env bash
# Tier 3b: Horovod's own test_torch.py, unchanged, against dadt.torch, the way Horovod's CI runs
# it: the whole file in one launch, through test/conformance/horovod_harness.py.
#
#   tools/run_conformance_tests.sh            # -np 2 and 3, under dadtrun --gloo and dadtrun --mpi
#   tools/run_conformance_tests.sh 2          # only these rank counts
#
# Deselected by name: test/conformance/horovod_torch_deselect.txt (the one list, with the reasons).
# Every other test must pass, or skip itself (the GPU tests on a machine without one). Prints
# pytest's summary line for each launch.
# Environment:
#   HOROVOD_TEST_TORCH   the file (default: ../shared/conformance/horovod/test_torch.py beside the
#                        repository); absent: the tier is skipped, saying so
#   PYTHON, DADTRUN      as in tools/run_python_tests.sh
#   DADT_CONFORMANCE_TIMEOUT   wall-clock seconds per launch (default 300; a passing launch of the
#                        file takes about 40 s at 2 ranks on a 2-core machine)
#   DADT_CONFORMANCE_STALL_SECONDS   dadtrun --stall-check-shutdown-time-seconds (default 60): a test
#                        that fails on some ranks only leaves the others in a collective the failed
#                        ones never submit (they are in tearDown's barrier); the stall check then
#                        fails that collective on every rank after this long, and the next test
#                        starts clean, instead of the launch hanging until its time-out
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
TIER="tier 3b"
# shellcheck source=tools/launch_tier_lib.sh
source "$ROOT/tools/launch_tier_lib.sh"
LIMIT="${DADT_CONFORMANCE_TIMEOUT:-300}"
STALL="${DADT_CONFORMANCE_STALL_SECONDS:-60}"
RANKS=("$@")
[ "${#RANKS[@]}" -gt 0 ] || RANKS=(2 3)
FILE="${HOROVOD_TEST_TORCH:-$ROOT/../shared/conformance/horovod/test_torch.py}"
LIST="test/conformance/horovod_torch_deselect.txt"

echo "==================== [${TIER}] Horovod's test_torch.py, whole file per launch ===================="
if [ ! -f "$FILE" ]; then
    echo "SKIP ${TIER}: Horovod's test_torch.py not found at $FILE (set HOROVOD_TEST_TORCH)"
    exit 0
fi
FILE="$(cd "$(dirname "$FILE")" && pwd)/$(basename "$FILE")"
require_installed

TEST_CMD=("$PYTHON" test/conformance/horovod_harness.py --deselect-file "$LIST" "$FILE" -q -rfE
          -p no:cacheprovider -o faulthandler_timeout=120)

declare -a summaries=()
for engine in gloo mpi; do
    for n in "${RANKS[@]}"; do
        log="$(mktemp)"
        TEST_CMD_LOG="$log" run_launch "--$engine -np $n" "$DADTRUN" --"$engine" -np "$n" \
            --stall-check-shutdown-time-seconds "$STALL"
        # pytest's last line on rank 0 ("[0]<stdout>:" under Gloo, "[1,0]<stdout>:" under mpirun).
        line="$(grep -aE '^\[(1,)?0\]<stdout>:.*(passed|failed|error|skipped).* in [0-9.]+s' "$log" | tail -n 1 | sed -E 's/^\[(1,)?0\]<stdout>://; s/=//g; s/^ +| +$//g')"
        summaries+=("--$engine -np $n: ${line:-no pytest summary (see above)}")
        # The failing tests by name (pytest -rfE), on every rank that printed any, so that the
        # summary at the end of the tier says what failed even where the log above is cut.
        while IFS= read -r failed; do
            summaries+=("    $failed")
        done < <(grep -aE '^\[(1,)?[0-9]+\]<stdout>:(FAILED|ERROR) ' "$log" | cut -c1-300 | sort -u | head -n 20)
        rm -f "$log"
    done
done
echo
echo "[${TIER}] pytest summary per launch:"
for s in "${summaries[@]}"; do echo "  $s"; done
summarize
