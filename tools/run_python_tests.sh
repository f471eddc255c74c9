#!/usr/bin/env bash
# Tier 2: the Python suite (test/python_multirank) under the real launcher, against the *installed* dadt.
#
#   tools/run_python_tests.sh            # -np 1, 2, 3, 4, then -np 2 with fusion off, then MPI
#   tools/run_python_tests.sh 2 4        # only these rank counts (plus the fusion-off run and MPI)
#
# Each launch is:  timeout ... dadtrun --gloo -np N python3 -m pytest -q -p no:cacheprovider test/python_multirank
# then, for N in DADT_TEST_MPI_RANKS (default: the requested counts >= 2), the same suite
#   under  dadtrun --mpi -np N ...                          (dadtrun hands the launch to mpirun)
#   and    mpirun [--allow-run-as-root] --oversubscribe -np N ...   (no dadtrun at all)
# Environment:
#   PYTHON                 interpreter (default python3; dadt must be installed into it: make install)
#   DADTRUN                launcher (default: the dadtrun installed beside $PYTHON, else PATH)
#   DADT_TEST_TIMEOUT      wall-clock seconds per launch (default 900); TERM on expiry, KILL 30 s later
#   DADT_TEST_NO_FUSION_RUN=1   skip the extra -np 2 --fusion-threshold-mb 0 run
#   DADT_TEST_MPI_RANKS    rank counts for the two MPI ways ("" skips them; default: counts >= 2)
#   MPIRUN                 Open MPI's launcher (default: mpirun on PATH)
#   PYTEST_ADDOPTS         extra pytest options, passed through to every rank
# Exits 0 when every launch passed (or the tier is skipped because test/python_multirank has no tests yet).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
TIER="tier 2"
# shellcheck source=tools/launch_tier_lib.sh
source "$ROOT/tools/launch_tier_lib.sh"
TEST_DIR="test/python_multirank"
RANKS=("$@")
[ "${#RANKS[@]}" -gt 0 ] || RANKS=(1 2 3 4)

echo "==================== [tier 2] Python tests under dadtrun (${TEST_DIR}) ===================="

if [ ! -d "$TEST_DIR" ]; then
    echo "SKIP tier 2: ${TEST_DIR}/ does not exist yet"
    exit 0
fi
if [ -z "$(find "$TEST_DIR" -name 'test_*.py' -o -name '*_test.py' | head -n 1)" ]; then
    echo "SKIP tier 2: no test_*.py or *_test.py files in ${TEST_DIR}/ yet"
    exit 0
fi

require_installed
TEST_CMD=("$PYTHON" -m pytest -q -p no:cacheprovider "$TEST_DIR")

for n in "${RANKS[@]}"; do
    run_launch "-np $n" "$DADTRUN" --gloo -np "$n"
done
if [ "${DADT_TEST_NO_FUSION_RUN:-0}" != 1 ]; then
    run_launch "-np 2, fusion off" "$DADTRUN" --gloo -np 2 --fusion-threshold-mb 0
fi

# The same suite on MPI, two ways: dadtrun --mpi, and plain mpirun with no dadtrun.
if [ -z "${DADT_TEST_MPI_RANKS+set}" ]; then
    DADT_TEST_MPI_RANKS=""
    for n in "${RANKS[@]}"; do [ "$n" -ge 2 ] && DADT_TEST_MPI_RANKS+="$n "; done
fi
if [ -n "${DADT_TEST_MPI_RANKS// /}" ]; then
    MPIRUN="${MPIRUN:-mpirun}"
    if ! command -v "$MPIRUN" >/dev/null 2>&1; then
        echo "FAIL tier 2: '$MPIRUN' not found for the MPI runs (make deps installs openmpi-bin;" \
             "DADT_TEST_MPI_RANKS= skips them)" >&2
        names+=("mpi runs"); results+=("FAILED (no mpirun)")
    else
        root=()
        [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
        for n in $DADT_TEST_MPI_RANKS; do
            run_launch "--mpi -np $n" "$DADTRUN" --mpi -np "$n"
            run_launch "mpirun -np $n" "$MPIRUN" "${root[@]}" --oversubscribe --bind-to none -np "$n"
        done
    fi
fi

summarize
