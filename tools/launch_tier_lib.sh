# Shared by the launcher test tiers (tools/run_python_tests.sh, tools/run_framework_tests.sh); source it
# after setting TIER (e.g. "tier 2") and PYTHON. It provides:
#   DADTRUN            the launcher installed beside $PYTHON's scripts, else the one on PATH (unless set)
#   LIMIT              wall-clock seconds per launch (DADT_TEST_TIMEOUT, default 900)
#   require_installed  exits 1 unless dadtrun runs and `import dadt._core` finds the installed package
#   run_launch NAME ARGV...   runs ARGV plus the test command in TEST_CMD under `timeout`, records a verdict
#                      (with TEST_CMD_LOG set, the output is also written to that file)
#   summarize          prints every verdict; returns non-zero when any launch failed

if [ -z "${DADTRUN:-}" ]; then
    # The launcher that `pip install .` put next to this interpreter's scripts, else the one on PATH.
    scripts="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)"
    if [ -n "$scripts" ] && [ -x "$scripts/dadtrun" ]; then DADTRUN="$scripts/dadtrun"; else DADTRUN=dadtrun; fi
fi
LIMIT="${DADT_TEST_TIMEOUT:-900}"
declare -a names=() results=()

require_installed() {
    if ! command -v "$DADTRUN" >/dev/null 2>&1; then
        echo "FAIL ${TIER}: launcher '$DADTRUN' not found on PATH (run: make install)" >&2
        exit 1
    fi
    # The suites must exercise the installed package, not the source tree.
    local where
    if ! where="$("$PYTHON" -c 'import dadt, dadt._core, os; print(os.path.dirname(os.path.realpath(dadt.__file__)))')"; then
        echo "FAIL ${TIER}: 'import dadt._core' fails for $PYTHON (run: make install)" >&2
        exit 1
    fi
    case "$where" in
        "$ROOT"/frameworks/*)
            echo "FAIL ${TIER}: dadt is imported from the source tree ($where), not the installed package" >&2
            exit 1 ;;
    esac
    echo "launcher: $(command -v "$DADTRUN")   package: $where   timeout per launch: ${LIMIT}s"
}

run_launch() {  # name, then the launcher's argv up to the program; the program is "${TEST_CMD[@]}"
    local name="$1"; shift
    local cmd=("$@" "${TEST_CMD[@]}")
    echo
    echo "---------- [${TIER}] ${name}: ${cmd[*]} ----------"
    local start=$SECONDS rc log="${TEST_CMD_LOG:-}" own_log=0
    if [ -z "$log" ]; then log=$(mktemp); own_log=1; fi  # the caller's file, else one of our own
    timeout -k 30 "$LIMIT" "${cmd[@]}" </dev/null 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    # pytest's "FAILED test/x.py::test_y" lines, without the launcher's "[rank]<stdout>:" prefix and
    # once for all ranks: the failing tests can be read at a glance above the summary.
    if [ "$rc" -ne 0 ]; then
        sed -e 's/\x1b\[[0-9;]*m//g' -e 's/^\[[0-9,]*\]<std[a-z]*>: *//' "$log" \
            | grep -aoE '^(FAILED|ERROR) [^ ]+::[^ ]+' | sort -u | sed "s/\$/ (${name})/"
    fi
    [ "$own_log" = 1 ] && rm -f "$log"
    local verdict="ok"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        verdict="FAILED (timed out after ${LIMIT}s)"
    elif [ "$rc" -ne 0 ]; then
        verdict="FAILED (exit $rc)"
    fi
    echo "---------- [${TIER}] ${name}: ${verdict} in $((SECONDS - start))s ----------"
    names+=("$name"); results+=("$verdict")
}

summarize() {
    echo
    echo "[${TIER}] summary:"
    local failed=0 i
    for i in "${!names[@]}"; do
        printf '  %-30s %s\n' "${names[$i]}" "${results[$i]}"
        [ "${results[$i]}" = ok ] || failed=$((failed + 1))
    done
    echo "[${TIER}] launches: $(( ${#names[@]} - failed )) passed, ${failed} failed"
    [ "$failed" -eq 0 ]
}
