#!/usr/bin/env bash
# Tier 2b: the TensorFlow/Keras and JAX collective suites (test/python_frameworks/{tf,jax}) under the
# real launcher, against the *installed* dadt. One launch per (suite, backend flags, rank count):
#
#   tools/run_framework_tests.sh              # tf and jax suites at -np 2 and 3, on every backend below
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
if [ -z "${DADTRUN:-}" ]; then
    scripts="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)"
    if [ -n "$scripts" ] && [ -x "$scripts/dadtrun" ]; then DADTRUN="$scripts/dadtrun"; else DADTRUN=dadtrun; fi
fi
LIMIT="${DADT_TEST_TIMEOUT:-900}"
RANKS=("$@")
[ "${#RANKS[@]}" -gt 0 ] || RANKS=(2 3)
read -r -a SUITES <<<"${DADT_FRAMEWORK_SUITES:-tf jax}"
# Backends the suites run on: one entry of launcher flags each. The MPI backend adds "--mpi" here.
BACKENDS=("--gloo")

declare -A NEEDS=([tf]="tensorflow keras" [jax]="jax optax keras")

echo "==================== [tier 2b] framework suites under dadtrun (test/python_frameworks) ===================="
if ! command -v "$DADTRUN" >/dev/null 2>&1; then
    echo "FAIL tier 2b: launcher '$DADTRUN' not found on PATH (run: make install)" >&2
    exit 1
fi
if ! where="$("$PYTHON" -c 'import dadt, dadt._core, os; print(os.path.dirname(os.path.realpath(dadt.__file__)))')"; then
    echo "FAIL tier 2b: 'import dadt._core' fails for $PYTHON (run: make install)" >&2
    exit 1
fi
case "$where" in
    "$ROOT"/frameworks/*) echo "FAIL tier 2b: dadt is imported from the source tree ($where), not the installed package" >&2
               exit 1 ;;
esac
echo "launcher: $(command -v "$DADTRUN")   package: $where   timeout per launch: ${LIMIT}s"

declare -a names=() results=()
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
            name="$suite $flags -np $n"
            # shellcheck disable=SC2206 # flags is a word list on purpose
            cmd=("$DADTRUN" $flags -np "$n" "$PYTHON" -m pytest -q -p no:cacheprovider "test/python_frameworks/$suite")
            echo
            echo "---------- [tier 2b] ${name}: ${cmd[*]} ----------"
            start=$SECONDS
            timeout -k 30 "$LIMIT" "${cmd[@]}" </dev/null
            rc=$?
            verdict="ok"
            if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then verdict="FAILED (timed out after ${LIMIT}s)"
            elif [ "$rc" -ne 0 ]; then verdict="FAILED (exit $rc)"; fi
            echo "---------- [tier 2b] ${name}: ${verdict} in $((SECONDS - start))s ----------"
            names+=("$name"); results+=("$verdict")
        done
    done
done

echo
echo "[tier 2b] summary:"
failed=0
for i in "${!names[@]}"; do
    printf '  %-28s %s\n' "${names[$i]}" "${results[$i]}"
    [ "${results[$i]}" = ok ] || failed=$((failed + 1))
done
[ "$failed" -eq 0 ]
