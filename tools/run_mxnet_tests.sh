#!/usr/bin/env bash
# The dadt.mxnet tier: makes (or refreshes) the MXNet virtualenv (tools/mxnet_venv.sh), then, under the
# real launcher, the suite test/python_frameworks/mx on each backend and rank count, and
# examples/mxnet/train_digits.py at 2 ranks (test accuracy >= 0.90):
#
#   tools/run_mxnet_tests.sh              # -np 2, on Gloo and on MPI
#   tools/run_mxnet_tests.sh 2 3          # -np 2 and 3
#
# Environment: PYTHON (the interpreter dadt is installed into; the venv is made from it), MXNET_VENV,
# DADT_TEST_TIMEOUT (seconds per launch, default 900), DADT_FRAMEWORK_BACKENDS (default "--gloo --mpi"),
# PYTEST_ADDOPTS. Exits 0 when every launch passed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TIER="mxnet"
echo "==================== [mxnet] dadt.mxnet in its virtualenv (test/python_frameworks/mx) ===================="
if ! VENV_PYTHON="$(bash "$ROOT/tools/mxnet_venv.sh")"; then
    echo "FAIL mxnet: tools/mxnet_venv.sh could not make the virtualenv" >&2
    exit 1
fi
PYTHON="$VENV_PYTHON"  # what the launches run; dadtrun comes from PATH (the venv has none)
# shellcheck source=tools/launch_tier_lib.sh
source "$ROOT/tools/launch_tier_lib.sh"
RANKS=("$@")
[ "${#RANKS[@]}" -gt 0 ] || RANKS=(2)
read -r -a BACKENDS <<<"${DADT_FRAMEWORK_BACKENDS:---gloo --mpi}"

require_installed
for flags in "${BACKENDS[@]}"; do
    for n in "${RANKS[@]}"; do
        TEST_CMD=("$PYTHON" -m pytest -q -p no:cacheprovider test/python_frameworks/mx)
        # shellcheck disable=SC2086 # flags is a word list on purpose
        run_launch "suite $flags -np $n" "$DADTRUN" $flags -np "$n"
    done
done

LOG="$(mktemp)"
TEST_CMD=("$PYTHON" examples/mxnet/train_digits.py)
TEST_CMD_LOG="$LOG" run_launch "digits --gloo -np 2" "$DADTRUN" --gloo -np 2
accuracy="$(sed -n 's/.*final test accuracy: \([0-9.]*\).*/\1/p' "$LOG" | tail -1)"
rm -f "$LOG"
last=$((${#results[@]} - 1))
if [ "${results[$last]}" = ok ]; then
    if awk -v a="${accuracy:-0}" 'BEGIN { exit !(a >= 0.90) }'; then
        echo "[mxnet] digits: final test accuracy ${accuracy} (>= 0.90)"
    else
        results[$last]="FAILED (final test accuracy '${accuracy}' < 0.90)"
    fi
fi

summarize
