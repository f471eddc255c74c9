#!/usr/bin/env bash
# Every GPU test and the GPU benchmark, on a machine with an NVIDIA GPU, in one go:
#
#   bash tools/device_build.sh fetch          # first, on a machine with Bazel (writes .device/)
#   bash tools/device_gpu_tests.sh [HOROVOD_TEST_TORCH_PY]   # then, there, in a tree with .device/
#
# Builds with tools/device_build.sh, then runs, each step logged to $LOGS/<step>.log (LOGS defaults
# to .device/logs) with its verdict on stdout:
#   gtest        the C++ GPU tests (cuda_device_test, nccl_error_test);
#   python       test/python_multirank/test_gpu.py under dadtrun --gloo at 1..RANKS ranks (default 4): NCCL at
#                one rank per GPU, the staged path through host memory beyond that;
#   integration  test/integration/test_gpu.py (launches its own jobs);
#   bench        examples/benchmarks/gpu_bench.py;
#   horovod      Horovod's test_torch.py at one rank through test/conformance/horovod_harness.py,
#                when its path is given.
# Exits non-zero when any step failed; every step runs regardless.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
LOGS="${LOGS:-.device/logs}"
RANKS="${RANKS:-4}"
HVD_FILE="${1:-}"
mkdir -p "$LOGS"
failed=0

step() {  # step NAME TIMEOUT CMD...: runs CMD with its output in $LOGS/NAME.log, prints the verdict
    local name="$1" limit="$2"; shift 2
    local t0=$SECONDS
    echo "+ $*" >> "$LOGS/$name.log"
    timeout -k 10 "$limit" "$@" >> "$LOGS/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || failed=$((failed + 1))
    printf '%-12s exit %-3d %4ds  %s\n' "$name" "$rc" $((SECONDS - t0)) "$*"
    return $rc
}

nvidia-smi -L
step build 600 bash tools/device_build.sh build "$PY" || { tail -30 "$LOGS/build.log"; exit 1; }
export PYTHONPATH="$ROOT/frameworks/python${PYTHONPATH:+:$PYTHONPATH}" PATH="$ROOT/.device/out:$PATH"
export PYTHONUNBUFFERED=1
for t in cuda_device_test nccl_error_test; do step gtest 300 ".device/out/$t"; done
for n in $(seq 1 "$RANKS"); do
    step python 300 dadtrun --gloo -np "$n" "$PY" -m pytest -q -p no:cacheprovider -rs test/python_multirank/test_gpu.py
done
step integration 600 "$PY" -m pytest -q -p no:cacheprovider -rs test/integration/test_gpu.py
step bench 600 "$PY" examples/benchmarks/gpu_bench.py ${BENCH_ARGS:-}
if [ -n "$HVD_FILE" ]; then
    step horovod 600 "$PY" test/conformance/horovod_harness.py "$HVD_FILE" -q -rs
fi
for f in "$LOGS"/*.log; do echo "== $f: $(grep -E '(passed|failed|PASSED|FAILED|error)' "$f" | tail -1)"; done
exit $((failed > 0))
