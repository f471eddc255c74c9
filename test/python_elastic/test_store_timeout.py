"""check_host_updates() against a launcher whose store stops answering (a wedged dadtrun): rank 0's
read fails after DADT_START_TIMEOUT (2 s here, not forever), and every rank ends with
LauncherUnreachableError naming the store, instead of hanging in the commit's broadcast.
FakeDriver plays the launcher (fake_driver.py). About 10 s."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_driver import FakeDriver  # noqa: E402
from test_digits import _kill_all  # noqa: E402

WORKER = """
import os, sys, time
import dadt.torch as hvd
hvd.init()
state = hvd.elastic.TorchState(step=0)

@hvd.elastic.run
def train(state):
    while True:
        state.step += 1
        state.commit()
        if state.step == 5:
            open(os.environ["READY_FILE"] + str(hvd.rank()), "w").close()
        time.sleep(0.01)

train(state)
"""


def test_a_store_that_stops_answering_ends_every_rank_with_a_clear_error(tmp_path):
    driver = FakeDriver()
    ids = ["h1/0/1", "h2/0/2"]
    procs = []
    try:
        for wid in ids:
            env = dict(os.environ, **driver.env(), DADT_ELASTIC_WORKER_ID=wid,
                       DADT_START_TIMEOUT="2", DADT_GLOO_TIMEOUT_SECONDS="20",
                       DADT_ELASTIC_TIMEOUT="60", OMP_NUM_THREADS="1",
                       READY_FILE=str(tmp_path / "ready"))
            procs.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        driver.publish_round(ids)
        deadline = time.monotonic() + 60
        while not all(os.path.exists(tmp_path / ("ready%d" % r)) for r in range(2)):
            assert time.monotonic() < deadline, "the workers never committed 5 times"
            assert all(p.poll() is None for p in procs), procs[0].communicate()[0][-3000:]
            time.sleep(0.05)
        driver.freeze()
        frozen_at = time.monotonic()
        outputs = [p.communicate(timeout=90)[0] for p in procs]
        elapsed = time.monotonic() - frozen_at
    finally:
        _kill_all(procs, driver)
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode != 0, out[-3000:]
        assert "LauncherUnreachableError" in out, "rank %d: %s" % (rank, out[-3000:])
        assert "did not answer within 2 s (DADT_START_TIMEOUT)" in out, out[-3000:]
        assert "127.0.0.1:%d" % driver.port in out, out[-3000:]
    # Bounded by DADT_START_TIMEOUT per request (a few seconds), not the client's 60 s default:
    # a worker that waited 60 s anywhere on the way out (recording a peer's death) fails this.
    assert elapsed < 40, "the ranks took %.1f s to end" % elapsed
