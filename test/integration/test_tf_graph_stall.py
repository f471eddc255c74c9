"""A stalled TensorFlow graph-mode collective ends with the stall inspector's error (issue 21).

In graph mode a collective waits in DadtAwait, an asynchronous TensorFlow kernel
(dadt/tensorflow/await_op.cc); when a rank skips the collective, the wait must end with the
runtime's stall shutdown as tf.errors.AbortedError on the waiting ranks, never in silence.
"""
import pytest

from conftest import rank_lines, wait_no_process

pytest.importorskip("tensorflow")

SHUTDOWN_S = 3

# argv: MARKER CULPRIT. The culprit skips "stall.me" inside a tf.function; the others wait for it.
TF_STALL_JOB = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
import dadt.tensorflow as dadt
culprit = int(sys.argv[2])
dadt.init()

@tf.function
def step(x):
    if dadt.rank() != culprit:  # decided at trace time: the culprit's graph lacks the collective
        x = dadt.allreduce(x, name="stall.me")
    return dadt.allreduce(x, name="after.skip")

try:
    step(tf.ones([3]))
except Exception as e:
    print("RAISED %s: %s" % (type(e).__name__, " ".join(str(e).split())[:500]), flush=True)
    raise
print("NOT_REACHED", flush=True)
"""


def test_stalled_graph_collective_raises_the_stall_error(job):
    np = 2
    proc, _ = job.run(TF_STALL_JOB, np=np,
                      flags=("--stall-check-warning-time-seconds", "1",
                             "--stall-check-shutdown-time-seconds", str(SHUTDOWN_S)),
                      args=(np - 1,), timeout=240)
    leftovers = wait_no_process(job.marker)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, "dadtrun must exit non-zero after a stall shutdown"
    assert "NOT_REACHED" not in proc.stdout
    raised = [r for r in range(np)
              if any(line.startswith("RAISED AbortedError") and "stall" in line
                     for line in rank_lines(proc.stdout, rank=r))]
    assert raised, f"no rank raised tf.errors.AbortedError for the stall:\n{output[-4000:]}"
    assert leftovers == [], f"processes of the job still alive: {leftovers}"
