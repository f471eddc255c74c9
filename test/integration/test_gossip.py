"""mode="gossip" end to end: it trains the digits at 2 and 4 ranks, and a rank that dies while its
partner waits in an exchange ends the job with an error naming it, on every rank, never a hang."""
import os
import re
import subprocess
import time

import pytest

from conftest import PY, REPO, assert_digits_run, rank_lines, wait_no_process, worker_env

SCRIPT = os.path.join(REPO, "examples", "pytorch", "train_digits.py")
LIMIT_S = 10.0


@pytest.mark.parametrize("np", [2, 4])
def test_gossip_trains_the_digits(dadtrun, np):
    cmd = [dadtrun, "--gloo", "-np", str(np), PY, SCRIPT, "--mode", "gossip", "--epochs", "20"]
    proc = subprocess.run(cmd, env=worker_env(), capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, cwd=REPO)
    assert_digits_run(proc, epochs=20)


# argv: MARKER WHEN. Ranks 0 and 1 are matched in an exchange of 64 MiB; rank 1 is SIGKILLed while it
# runs ("transfer") or before it asks for it at all ("negotiation"). Rank 2 waits in a barrier.
# Ranks 0 and 2 report what they got.
DYING_PARTNER = """
import os, signal, sys, threading, time
import torch
import dadt.torch as dadt
when = sys.argv[2]
dadt.init()
big = torch.ones(16 << 20)
if dadt.rank() == 1:
    if when == "negotiation":
        time.sleep(0.5)
        print("FAILING_AT %.6f" % time.time(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Timer(0.05, lambda: (print("FAILING_AT %.6f" % time.time(), flush=True),
                                   os.kill(os.getpid(), signal.SIGKILL))).start()
try:
    if dadt.rank() <= 1:
        dadt.synchronize(dadt.exchange_async(big, [1 - dadt.rank()], name="model"))
        if dadt.rank() == 0:
            dadt.synchronize(dadt.exchange_async(big, [1], name="model.again"))
    else:
        dadt.barrier()
    print("NOT_REACHED", flush=True)
except Exception as e:
    print("ERROR %s: %s" % (type(e).__name__, e), flush=True)
    time.sleep(30)  # the launcher stops this rank
"""


@pytest.mark.parametrize("when", ["negotiation", "transfer"])
def test_a_partner_that_dies_is_an_error_not_a_hang(job, when):
    proc, _ = job.run(DYING_PARTNER, np=3, args=(when,), timeout=120)
    ended = time.time()
    leftovers = wait_no_process(job.marker)
    failed_at = [float(ln.split()[1]) for ln in rank_lines(proc.stdout, rank=1)
                 if ln.startswith("FAILING_AT ")]
    assert failed_at, proc.stdout + proc.stderr
    assert ended - failed_at[0] < LIMIT_S, "the job took %.1f s to end" % (ended - failed_at[0])
    assert proc.returncode != 0
    assert "NOT_REACHED" not in proc.stdout
    assert re.search(r"\brank 1\b", proc.stderr), proc.stderr[-2000:]
    # A rank that saw the failure before the launcher stopped it blames rank 1, no one else.
    for r in (0, 2):
        for line in rank_lines(proc.stdout, rank=r):
            if line.startswith("ERROR "):
                assert re.search(r"\brank 1\b", line), line
    assert leftovers == [], leftovers


# A send, a receive, a neighbor allgather and a matched exchange, with the timeline on.
POINT_TO_POINT = """
import torch
import dadt.torch as dadt
from dadt.common import topology
dadt.init()
r, n = dadt.rank(), dadt.size()
if r == 0:
    dadt.send(torch.ones(3), 1, name="weights")
else:
    dadt.recv(torch.zeros(3), 0, name="weights")
dadt.neighbor_allgather(torch.ones(2), *topology.ring_graph(r, n), name="ring")
dadt.synchronize(dadt.exchange_async(torch.ones(4), topology.complete(r, n), name="swap"))
dadt.barrier()
"""


def test_point_to_point_has_timeline_rows_and_phases(job, tmp_path):
    from test_timeline import load_rows
    timeline = tmp_path / "p2p.json"
    proc, _ = job.run(POINT_TO_POINT, np=2, flags=("--timeline-filename", str(timeline)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows, _ = load_rows(timeline)
    for row in ("peer_exchange.weights", "peer_exchange.swap"):
        assert {"NEGOTIATE_PEER_EXCHANGE", "PEER_EXCHANGE", "GLOO_PEER_EXCHANGE"} <= rows[row], rows[row]
    assert {"NEIGHBOR_ALLGATHER", "GLOO_NEIGHBOR_ALLGATHER"} <= rows["neighbor_allgather.ring"]
