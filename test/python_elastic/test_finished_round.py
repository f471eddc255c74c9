"""The end of an elastic job under the real launcher: rank 0 exits 0 (training done) while rank 1's
next collective fails because of that exit. No new round will come, and rank 1 must learn so at
once (the driver marks the round finished) instead of waiting out --elastic-timeout (40 s here,
which the job would take without the mark); the job then ends non-zero with a message naming
both. About 5 s."""
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

WORKER = textwrap.dedent("""
    import time
    import torch
    import dadt.torch as hvd

    hvd.init()
    model = torch.nn.Linear(1, 1)
    state = hvd.elastic.TorchState(model, torch.optim.SGD(model.parameters(), lr=0.1), step=0)

    @hvd.elastic.run
    def train(state):
        hvd.allreduce(torch.ones(1), name="first")
        if hvd.rank() == 0:
            raise SystemExit(0)  # done: the round's first exit 0
        time.sleep(0.5)
        hvd.allreduce(torch.ones(1), name="second")  # its peer has left

    train(state)
""")


def test_a_worker_whose_world_failed_after_the_end_began_does_not_wait(tmp_path):
    dadtrun = os.path.join(os.path.dirname(sys.executable), "dadtrun")
    dadtrun = dadtrun if os.path.exists(dadtrun) else shutil.which("dadtrun")
    if dadtrun is None:
        pytest.skip("dadtrun is not installed beside %s" % sys.executable)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    start = time.monotonic()
    proc = subprocess.run([dadtrun, "--gloo", "-np", "2", "--min-np", "1", "--elastic-timeout", "40",
                           sys.executable, str(script)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=100,
                          env=dict(os.environ, DADT_GLOO_TIMEOUT_SECONDS="10"))
    took = time.monotonic() - start
    out = proc.stdout
    assert proc.returncode != 0, out
    assert "no new elastic round will come for worker localhost/1/2: rank 0 (worker localhost/0/1) " \
           "of round 1 finished training" in out, out
    assert "after other workers of round 1 had finished; stopping" in out, out
    assert took < 30, "the job took %.0f s to end (it waited for a round that could not come)" % took
