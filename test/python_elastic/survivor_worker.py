"""One elastic worker of test_survivor.py. Writes "<event> <details>" lines to $STATUS_FILE.

Round 1 (3 ranks): allreduces in a loop until one fails (a peer was SIGKILLed); then the next
collective must fail too; shutdown(); init() into round 2 (2 ranks): one allreduce whose sum is
checked; shutdown(); init() into round 3, where one survivor is removed (exits 0)."""
import os
import sys
import time

import torch

import dadt.torch as hvd

status_path = os.environ["STATUS_FILE"]


def note(*words):
    with open(status_path, "a") as f:
        f.write(" ".join(str(w) for w in words) + "\n")


hvd.init()
note("joined", hvd.rank(), hvd.size())
x = torch.ones(1 << 20)
step = 0
try:
    while True:
        hvd.allreduce(x, name="step", op=hvd.Sum)
        step += 1
        if step == 3:
            note("stepping", hvd.rank())
except hvd.HorovodInternalError as e:
    failed_at = time.monotonic()
    note("pending_failed", step, type(e).__name__)
try:
    hvd.allreduce(x, name="after")
    note("next_succeeded")
except hvd.HorovodInternalError as e:
    note("next_failed", type(e).__name__)
hvd.shutdown()
note("shut_down", round(time.monotonic() - failed_at, 3))

hvd.init()  # round 2
y = hvd.allreduce(torch.full((5,), float(hvd.rank() + 1)), name="r2", op=hvd.Sum)
note("round2", hvd.rank(), hvd.size(), float(y[0]), "%.3f" % time.time())
hvd.shutdown()

hvd.init()  # round 3: the survivor that is removed never returns from here (exit 0)
y = hvd.allreduce(torch.ones(3), name="r3", op=hvd.Sum)
note("round3", hvd.rank(), hvd.size(), float(y[0]))
hvd.shutdown()
sys.exit(0)
