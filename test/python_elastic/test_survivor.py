"""Survivors of a peer SIGKILLed mid-allreduce (docs/elastic.md): at 3 ranks, one is killed while
every rank loops on allreduce. The two survivors must see their pending collective and their next
one fail with DadtInternalError (HorovodInternalError) within the Gloo time-out, never abort or
hang; shut down; init() into the next round as a 2-rank world whose allreduce is right; and, in a
third round that removes one of them, that one exits 0 while the other runs alone.

The launcher's part is played by fake_driver.FakeDriver (the store and the rounds), so this test
covers the worker half of the contract by itself. Run: pytest test/python_elastic (about 20 s)."""
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_driver import FakeDriver  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "survivor_worker.py")
GLOO_TIMEOUT_S = 10


def _lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split() for line in f.read().splitlines()]


def _wait_for(pred, what, timeout, procs):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    for p in procs:
        p.kill()
    pytest.fail("timed out waiting for " + what)


@pytest.mark.parametrize("victim", [2, 0], ids=["kill-worker", "kill-coordinator"])
def test_survivors_fail_cleanly_and_rejoin_a_smaller_world(tmp_path, victim):
    driver = FakeDriver()
    ids = ["h1/0/1", "h1/1/2", "h1/2/3"]
    procs, status = [], []
    try:
        for wid in ids:
            path = str(tmp_path / (wid.replace("/", "_") + ".txt"))
            env = dict(os.environ, **driver.env(), DADT_ELASTIC_WORKER_ID=wid, STATUS_FILE=path,
                       DADT_GLOO_TIMEOUT_SECONDS=str(GLOO_TIMEOUT_S), DADT_ELASTIC_TIMEOUT="60",
                       OMP_NUM_THREADS="1")
            for k in ("DADT_RANK", "DADT_SIZE", "DADT_LOCAL_RANK", "DADT_LOCAL_SIZE"):
                env.pop(k, None)
            procs.append(subprocess.Popen([sys.executable, WORKER], env=env))
            status.append(path)
        driver.publish_round(ids)
        _wait_for(lambda: all(any(l[0] == "stepping" for l in _lines(p)) for p in status),
                  "every rank to be in its allreduce loop", 60, procs)
        killed_at = time.monotonic()
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait()
        survivors = [i for i in range(3) if i != victim]
        _wait_for(lambda: all(any(l[0] == "shut_down" for l in _lines(status[i])) for i in survivors),
                  "the survivors to fail and shut down", GLOO_TIMEOUT_S + 20, procs)
        detected_s = time.monotonic() - killed_at
        for i in survivors:
            events = {l[0]: l[1:] for l in _lines(status[i])}
            assert events["pending_failed"][1] == "DadtInternalError", events
            assert "next_failed" in events, events
            assert events["next_failed"][0] == "DadtInternalError", events
            assert procs[i].poll() is None, "survivor %d exited instead of re-initializing" % i
        assert detected_s < GLOO_TIMEOUT_S + 10, detected_s

        # Round 2: the survivors, the oldest first.
        published_at = time.time()
        driver.publish_round([ids[i] for i in survivors], removed=[])
        _wait_for(lambda: all(any(l[0] == "round2" for l in _lines(status[i])) for i in survivors),
                  "round 2's allreduce", 60, procs)
        for rank, i in enumerate(survivors):
            events = {l[0]: l[1:] for l in _lines(status[i])}
            assert events["round2"][:3] == [str(rank), "2", "3.0"], events  # 1 + 2
            # Not asserted (timing is noisy here); docs/elastic.md quotes it.
            print("kill -> failure seen and shut down: %.2f s; round published -> first allreduce "
                  "at the new size: %.2f s" % (detected_s, float(events["round2"][3]) - published_at))

        # Round 3: the second survivor is removed; the first goes on alone.
        keep, leave = survivors
        driver.publish_round([ids[keep]], removed=[ids[leave]])
        for i in survivors:
            procs[i].wait(timeout=60)
            assert procs[i].returncode == 0, (i, procs[i].returncode)
        assert not any(l[0] == "round3" for l in _lines(status[leave]))
        assert {l[0]: l[1:] for l in _lines(status[keep])}["round3"] == ["0", "1", "1.0"]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        driver.close()
