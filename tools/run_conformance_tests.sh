#!/usr/bin/env bash
# Tier 3b: Horovod's own test_torch.py, unchanged, against dadt.torch, the way Horovod's CI runs
# it: the whole file in one launch, through test/conformance/horovod_harness.py. Optionally also
# Horovod's TensorFlow, Keras, TensorFlow process-set and timeline test files, each whole in one
# launch (HOROVOD_TEST_DIR).
#
#   tools/run_conformance_tests.sh            # -np 2 and 3 (TF files: 2 and 4), --gloo and --mpi
#   tools/run_conformance_tests.sh 2          # only these rank counts (both parts)
#
# Deselected by name: test/conformance/horovod_torch_deselect.txt and, for Horovod's file
# test_X.py, test/conformance/horovod_X_deselect.txt (one list per file, with the reasons).
# Every other test must pass, or skip itself (the GPU tests on a machine without one). Prints
# pytest's summary line for each launch.
# Environment:
#   HOROVOD_TEST_TORCH   the file (default: ../shared/conformance/horovod/test_torch.py beside the
#                        repository); absent: the torch part is skipped, saying so
#   HOROVOD_TEST_DIR     a directory holding Horovod's test/parallel files: test_tensorflow.py,
#                        base_test_tensorflow.py (which it imports), test_tensorflow_process_sets.py,
#                        test_tensorflow2_keras.py, test_tensorflow2_keras_process_sets.py,
#                        test_timeline.py; unset or without test_tensorflow.py: the TF part is
#                        skipped, saying so (CI does not have them; docs/frameworks.md,
#                        "Horovod's TensorFlow test files")
#   DADT_CONFORMANCE_TF_TIMEOUT   wall-clock seconds per launch of a TF file (default 2400;
#                        test_tensorflow.py takes about 5 min at 2 ranks on a 2-core machine)
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
TF_DIR="${HOROVOD_TEST_DIR:-}"
TF_FILES=(test_tensorflow.py test_tensorflow_process_sets.py test_tensorflow2_keras.py
          test_tensorflow2_keras_process_sets.py test_timeline.py)
declare -a summaries=()

# One launch of Horovod's file $1 with the deselect list $2 (may be absent) at $3 ranks under
# engine $4, within LIMIT seconds; appends pytest's summary line and the failing tests to summaries.
launch_file() {
    local file="$1" list="$2" n="$3" engine="$4" log line failed
    TEST_CMD=("$PYTHON" test/conformance/horovod_harness.py)
    [ -f "$list" ] && TEST_CMD+=(--deselect-file "$list")
    TEST_CMD+=("$file" -q -rfE -p no:cacheprovider -o faulthandler_timeout=300)
    log="$(mktemp)"
    TEST_CMD_LOG="$log" run_launch "$(basename "$file") --$engine -np $n" "$DADTRUN" --"$engine" \
        -np "$n" --stall-check-shutdown-time-seconds "$STALL"
    # pytest's last line on rank 0 ("[0]<stdout>:" under Gloo, "[1,0]<stdout>:" under mpirun).
    line="$(grep -aE '^\[(1,)?0\]<stdout>:.*(passed|failed|error|skipped|deselected).* in [0-9.]+s' "$log" | tail -n 1 | sed -E 's/^\[(1,)?0\]<stdout>://; s/=//g; s/^ +| +$//g')"
    summaries+=("$(basename "$file") --$engine -np $n: ${line:-no pytest summary (see above)}")
    # The failing tests by name (pytest -rfE), on every rank that printed any, so that the
    # summary at the end of the tier says what failed even where the log above is cut.
    while IFS= read -r failed; do
        summaries+=("    $failed")
    done < <(grep -aE '^\[(1,)?[0-9]+\]<stdout>:(SUB)?(FAILED|ERROR)' "$log" | cut -c1-300 | sort -u | head -n 20)
    rm -f "$log"
}

echo "==================== [${TIER}] Horovod's test_torch.py, whole file per launch ===================="
ran=0
if [ ! -f "$FILE" ]; then
    echo "[${TIER}] PyTorch part skipped: Horovod's test_torch.py not found at $FILE (set HOROVOD_TEST_TORCH)"
else
    FILE="$(cd "$(dirname "$FILE")" && pwd)/$(basename "$FILE")"
    require_installed
    ran=1
    for engine in gloo mpi; do
        for n in "${RANKS[@]}"; do
            launch_file "$FILE" test/conformance/horovod_torch_deselect.txt "$n" "$engine"
        done
    done
fi

echo
echo "==================== [${TIER}] Horovod's TensorFlow/Keras/timeline files, whole file per launch ===================="
if [ -z "$TF_DIR" ] || [ ! -f "$TF_DIR/test_tensorflow.py" ]; then
    # Not a "SKIP <tier>" line (make test's summary would call the whole tier skipped): the
    # PyTorch file above may have run.
    echo "[${TIER}] TensorFlow part skipped: Horovod's TensorFlow test files not found (set HOROVOD_TEST_DIR" \
         "to a directory holding test_tensorflow.py, base_test_tensorflow.py and the others of Horovod's test/parallel)"
else
    TF_DIR="$(cd "$TF_DIR" && pwd)"
    [ "$ran" -eq 1 ] || require_installed
    ran=1
    TF_RANKS=("$@")
    [ "${#TF_RANKS[@]}" -gt 0 ] || TF_RANKS=(2 4)
    LIMIT="${DADT_CONFORMANCE_TF_TIMEOUT:-2400}"
    for f in "${TF_FILES[@]}"; do
        if [ ! -f "$TF_DIR/$f" ]; then
            summaries+=("$f: SKIP, not in $TF_DIR")
            continue
        fi
        for engine in gloo mpi; do
            for n in "${TF_RANKS[@]}"; do
                list="${f#test_}"
                launch_file "$TF_DIR/$f" "test/conformance/horovod_${list%.py}_deselect.txt" "$n" "$engine"
            done
        done
    done
fi
if [ "$ran" -eq 0 ]; then
    echo "SKIP ${TIER}: none of Horovod's test files found (HOROVOD_TEST_TORCH, HOROVOD_TEST_DIR)"
    exit 0
fi

echo
echo "[${TIER}] pytest summary per launch:"
for s in "${summaries[@]}"; do echo "  $s"; done
summarize
