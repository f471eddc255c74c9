"""Checks shared by the tests that run examples/elastic/train_digits_elastic.py under the real dadtrun:
test_dadtrun_digits.py here (local slots) and test/integration/test_elastic_training.py (the network-namespace
hosts, over ssh). Not a test module: both import it."""
import collections
import math
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_SCRIPT = os.path.join(ROOT, "examples", "elastic", "train_digits_elastic.py")
KERAS_SCRIPT = os.path.join(ROOT, "examples", "elastic", "keras_digits_elastic.py")
DISCOVER_SCRIPT = os.path.join(ROOT, "examples", "elastic", "discover_hosts.sh")
N_ALL = 1797  # scikit-learn's digits
N_TRAIN = N_ALL - math.ceil(0.2 * N_ALL)  # the examples hold out 20% for the test set


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def worker_id(pid):
    """The DADT_ELASTIC_WORKER_ID ("host/slot/n") in process `pid`'s environment, or None."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return None
    value = env.get(b"DADT_ELASTIC_WORKER_ID")
    return value.decode() if value else None


def progress(path):
    """[(epoch, step)] from a --progress-file (every rank appends "epoch step" per finished step)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(map(int, line.split()[:2])) for line in f.read().splitlines() if line.strip()]


def reached(path, epoch, step):
    """Whether some rank finished `step` (or a later one) of `epoch`, per the --progress-file."""
    return any(e == epoch and s >= step for e, s in progress(path))


def final_accuracy(out):
    """The float of the "final test accuracy: X" line in dadtrun's output; AssertionError if none."""
    found = re.findall(r"final test accuracy: ([01]\.\d{4})", out)
    assert len(found) == 1, "expected one final accuracy line:\n" + out[-6000:]
    return float(found[0])


def epoch_sizes(out):
    """{epoch: world size} from train_digits_elastic.py's "epoch E size S loss L accuracy A" lines."""
    return {int(e): int(s) for e, s in re.findall(r"<stdout>:epoch (\d+) size (\d+) loss ", out)}


def assert_each_sample_once(ids_dir, epochs):
    """Every training sample id committed exactly once in each of epochs 1..`epochs` (--ids-dir's ids.txt)."""
    per_epoch = collections.defaultdict(collections.Counter)
    with open(os.path.join(ids_dir, "ids.txt")) as f:
        for line in f:
            epoch, *sample_ids = map(int, line.split())
            per_epoch[epoch].update(sample_ids)
    assert sorted(per_epoch) == list(range(1, epochs + 1)), sorted(per_epoch)
    for epoch, counts in per_epoch.items():
        assert sorted(counts) == list(range(N_TRAIN)), "epoch %d lost samples" % epoch
        assert set(counts.values()) == {1}, "epoch %d repeated samples" % epoch
