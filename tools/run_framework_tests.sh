#!/usr/bin/env bash
# Tier 2b: the TensorFlow/Keras and JAX collective suites (test/python_frameworks/{tf,jax}) under the
# real launcher, against the *installed* dadt. One launch per (suite, backend flags, rank count):
#
#   tools/run_framework_tests.sh              # tf and jax suites at -np 2 and 3, on Gloo and on MPI
#   tools/run_framework_tests.sh 2            # only -np 2
#
# Each launch is:  timeout ... dadtrun <backend flags> -np N python -m pytest -q -p no:cacheprovider <suite>
# Environment:
#   PYTHON              interpreter (default python3; dadt must be installed into it: make install)
#   DADTRUN             launcher (default: the dadtrun installed beside $PYTHON, else PATH)
#   DADT_TEST_TIMEOUT   wall-clock seconds per launch (default 900)
#   DADT_FRAMEWORK_SUITES  suites to run (default "tf jax")
#   PYTEST_ADDOPTS      extra pytest options, passed through to every rank
# A suite whose framework is not importable fails with that reason (make deps installs them from
# requirements-test.txt). Exits 0 when every launch passed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
TIER="tier 2b"
# shellcheck source=tools/launch_tier_lib.sh
source "$ROOT/tools/launch_tier_lib.sh"
RANKS=("$@")
[ "${#RANKS[@]}" -gt 0 ] || RANKS=(2 3)
read -r -a SUITES <<<"${DADT_FRAMEWORK_SUITES:-tf jax}"
# Backends the suites run on: one entry of launcher flags each (DADT_FRAMEWORK_BACKENDS="--gloo" for
# Gloo only). --mpi needs Open MPI's mpirun (make deps installs it).
read -r -a BACKENDS <<<"${DADT_FRAMEWORK_BACKENDS:---gloo --mpi}"

declare -A NEEDS=([tf]="tensorflow keras" [jax]="jax optax keras")

echo "==================== [tier 2b] framework suites under dadtrun (test/python_frameworks) ===================="
require_installed
for suite in "${SUITES[@]}"; do
    missing=""
    for module in ${NEEDS[$suite]}; do
        "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)" \
            || missing="$missing $module"
    done
    if [ -n "$missing" ]; then
        names+=("$suite"); results+=("FAILED (not installed:$missing; run: make deps)")
        continue
    fi
    for flags in "${BACKENDS[@]}"; do
        for n in "${RANKS[@]}"; do
            TEST_CMD=("$PYTHON" -m pytest -q -p no:cacheprovider "test/python_frameworks/$suite")
            # shellcheck disable=SC2086 # flags is a word list on purpose
            run_launch "$suite $flags -np $n" "$DADTRUN" $flags -np "$n"
        done
    done
done

summarize
