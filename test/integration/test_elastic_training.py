"""Elastic training for real across the network-namespace hosts h1, h2, h3 (tools/netns_hosts.sh), with real
ssh and the real dadtrun elastic driver: examples/elastic/train_digits_elastic.py (TorchState + ElasticSampler)
loses a SIGKILLed host, gains a host the discovery script starts listing, and loses one it stops listing;
examples/elastic/keras_digits_elastic.py (model.fit with the elastic callbacks) loses a SIGKILLed host. Each
run reaches >= 0.90 test accuracy, ends 0 and leaves nothing on any host; the torch runs commit every training
sample exactly once per epoch. Skipped, with the reason, where namespaces cannot be made. Last, one repeat of
examples/benchmarks/elastic_recovery.py on this host (its table, and nothing left behind). About 70 s on the
shared 2-core machine (the Keras test, with TensorFlow's start-up on three workers, a quarter of it).
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import PY, REPO, wait_no_process, worker_env
from test_elastic_multihost import ejob, netns_hosts  # noqa: F401 (fixtures)
from test_multihost import IFACE, namespace_processes, wait_namespaces_clean

sys.path.insert(0, os.path.join(REPO, "test", "python_elastic"))

from elastic_digits_checks import (DISCOVER_SCRIPT, KERAS_SCRIPT, TORCH_SCRIPT,  # noqa: E402
                                   assert_each_sample_once, epoch_sizes, final_accuracy, reached, worker_id)

EPOCHS = 5
# Paces the steps so that a host change made in epoch 2 is in force well before the last epoch
# ends, however fast the machine: discovery runs every second, and a round follows 300 ms later.
STEP_DELAY = "0.03"
HOSTS_3 = ["-H", "h1:1,h2:1,h3:1", "--network-interface", IFACE]


def _env():
    # One thread per rank; a 10 s Gloo time-out bounds how long a survivor can wait on a dead peer.
    return worker_env(OMP_NUM_THREADS="1", DADT_GLOO_TIMEOUT_SECONDS="10", TF_CPP_MIN_LOG_LEVEL="2",
                      KERAS_BACKEND="tensorflow")


def _torch_command(ejob, tmp_path):
    """The torch example's command line; its --progress-file name carries the job's marker."""
    ids = tmp_path / "ids"
    ids.mkdir()
    progress = tmp_path / (ejob.marker + ".progress")
    return ids, progress, [PY, TORCH_SCRIPT, "--epochs", str(EPOCHS), "--ids-dir", str(ids),
                           "--progress-file", str(progress), "--step-delay", STEP_DELAY]


def _wait_until(ejob, what, cond, timeout=180):
    deadline = time.monotonic() + timeout
    while not cond():
        if ejob.proc.poll() is not None:
            pytest.fail(f"dadtrun exited ({ejob.proc.returncode}) before {what}\n{ejob.dump()}")
        if time.monotonic() > deadline:
            pytest.fail(f"not {what} within {timeout} s\n{ejob.dump()}")
        time.sleep(0.02)


def _worker_pid(host, marker):
    """The pid of the job's worker process (the python that has a DADT_ELASTIC_WORKER_ID) on namespace `host`."""
    out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout.split()
    for pid in map(int, out):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        wid = worker_id(pid)
        if marker.encode() in b" ".join(argv) and "python" in os.path.basename(argv[0].decode()) and wid \
                and wid.startswith(host + "/"):
            return pid
    pytest.fail(f"no worker of job {marker} on {host}: {namespace_processes(marker)}")


def _wait_host_clean(host, marker, seconds=10.0):
    """The job's processes still on namespace `host` after at most `seconds` (empty: none left)."""
    deadline = time.monotonic() + seconds
    left = namespace_processes(marker)[host]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = namespace_processes(marker)[host]
    return left


def _write_hosts(path, hosts):
    """Replaces the discovery script's hosts file in one step (a reader never sees it half written)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(h + "\n" for h in hosts))
    os.replace(tmp, path)


def _finish(ejob, timeout=180):
    """Waits for dadtrun; returns (the workers' stdout, dadtrun's own lines). Asserts exit 0 and no process left on any host."""
    code = ejob.wait_exit(timeout)
    time.sleep(0.3)  # let the pumps take the last lines
    assert code == 0, ejob.dump()
    left = wait_namespaces_clean(ejob.marker, seconds=10)
    assert not left, f"processes left on the hosts: {left}"
    ejob.assert_nothing_left()
    with ejob.lock:  # the workers' lines; the driver's own lines ("dadtrun: ...")
        return "\n".join(ejob.out), "\n".join(ln for ln in ejob.err if ln.startswith("dadtrun:"))


def test_torch_digits_survives_a_killed_host(netns_hosts, ejob, tmp_path):
    ids, progress, command = _torch_command(ejob, tmp_path)
    ejob.start("--gloo", "-np", "3", "--min-np", "2", *HOSTS_3, command=command, env=_env())
    ejob.wait_for("err", r"round 1: 3 workers on h1, h2, h3$", timeout=120)
    _wait_until(ejob, "epoch 2 step 7 (between two commits)", lambda: reached(progress, 2, 7))
    os.kill(_worker_pid("h2", ejob.marker), signal.SIGKILL)
    ejob.wait_for("err", r"^dadtrun: elastic: host h2 lost: rank 1 \(worker h2/0/2\) killed by SIGKILL$")
    ejob.wait_for("err", r"^dadtrun: elastic: round 2: 2 workers on h1, h3 \(reset 1\)$")
    left = _wait_host_clean("h2", ejob.marker)
    assert not left, f"processes of the job left on the killed host h2: {left}"
    out, err = _finish(ejob)
    assert final_accuracy(out) >= 0.90, out[-4000:]
    sizes = epoch_sizes(out)
    assert sizes == {1: 3, **{e: 2 for e in range(2, EPOCHS + 1)}}, sizes  # epoch 2 ended at size 2
    assert "round 3" not in err, err
    assert_each_sample_once(ids, EPOCHS)  # the survivors went on from the last commit


def test_torch_digits_diloco_survives_a_host_killed_mid_window(netns_hosts, ejob, tmp_path):
    """mode="diloco" (an exchange every 10 steps, commits every 5): h2 dies between two exchanges;
    the survivors restore the last commit, roll the model back to the last synced weights
    (TorchState's reset), take rank 0's and go on at size 2 to the expected accuracy."""
    ids, progress, command = _torch_command(ejob, tmp_path)
    command += ["--mode", "diloco", "--sync-every", "10"]
    ejob.start("--gloo", "-np", "3", "--min-np", "2", *HOSTS_3, command=command, env=_env())
    ejob.wait_for("err", r"round 1: 3 workers on h1, h2, h3$", timeout=120)
    _wait_until(ejob, "epoch 2 step 7 (between two exchanges)", lambda: reached(progress, 2, 7))
    os.kill(_worker_pid("h2", ejob.marker), signal.SIGKILL)
    ejob.wait_for("err", r"^dadtrun: elastic: host h2 lost: rank 1 \(worker h2/0/2\) killed by SIGKILL$")
    ejob.wait_for("err", r"^dadtrun: elastic: round 2: 2 workers on h1, h3 \(reset 1\)$")
    out, err = _finish(ejob)
    assert final_accuracy(out) >= 0.90, out[-4000:]
    assert epoch_sizes(out)[EPOCHS] == 2, out[-4000:]
    assert_each_sample_once(ids, EPOCHS)


def test_torch_digits_grows_onto_a_discovered_host(netns_hosts, ejob, tmp_path):
    ids, progress, command = _torch_command(ejob, tmp_path)
    hosts = tmp_path / "hosts"
    _write_hosts(hosts, ["h1", "h2"])
    ejob.start("--gloo", "-np", "2", "--min-np", "2", "--max-np", "3", "--network-interface", IFACE,
               "--host-discovery-script", f"sh {DISCOVER_SCRIPT} {hosts}", command=command, env=_env())
    ejob.wait_for("err", r"round 1: 2 workers on h1, h2$", timeout=120)
    _wait_until(ejob, "epoch 2 step 7", lambda: reached(progress, 2, 7))
    _write_hosts(hosts, ["h1", "h2", "h3"])
    ejob.wait_for("err", r"^dadtrun: elastic: host h3 added \(1 slot\)$")
    ejob.wait_for("err", r"^dadtrun: elastic: round 2: 3 workers on h1, h2, h3 \(reset 1\)$")
    out, err = _finish(ejob)
    assert " lost" not in err, err  # joined at a commit(), not through a failure
    assert final_accuracy(out) >= 0.90, out[-4000:]
    sizes = epoch_sizes(out)
    assert sizes[1] == 2 and sizes[EPOCHS] == 3, sizes
    assert_each_sample_once(ids, EPOCHS)


def test_torch_digits_host_no_longer_listed_leaves_gracefully(netns_hosts, ejob, tmp_path):
    ids, progress, command = _torch_command(ejob, tmp_path)
    hosts = tmp_path / "hosts"
    _write_hosts(hosts, ["h1", "h2", "h3"])
    ejob.start("--gloo", "--verbose", "-np", "3", "--min-np", "2", "--network-interface", IFACE,
               "--host-discovery-script", f"sh {DISCOVER_SCRIPT} {hosts}", command=command, env=_env())
    ejob.wait_for("err", r"round 1: 3 workers on h1, h2, h3$", timeout=120)
    _wait_until(ejob, "epoch 2 step 7", lambda: reached(progress, 2, 7))
    _write_hosts(hosts, ["h1", "h2"])
    ejob.wait_for("err", r"^dadtrun: elastic: host h3 removed \(no longer listed\)$")
    ejob.wait_for("err", r"^dadtrun: elastic: round 2: 2 workers on h1, h2 \(reset 1\)$")
    ejob.wait_for("err", r"^dadtrun: elastic: rank 2 \(worker h3/0/3\) on h3 was removed and exited with code 0$",
                  timeout=60)
    left = _wait_host_clean("h3", ejob.marker)
    assert not left, f"processes of the job left on the removed host h3: {left}"
    out, err = _finish(ejob)
    assert " lost" not in err, err
    assert final_accuracy(out) >= 0.90, out[-4000:]
    sizes = epoch_sizes(out)
    assert sizes[1] == 3 and sizes[EPOCHS] == 2, sizes
    assert_each_sample_once(ids, EPOCHS)


def test_keras_fit_survives_a_killed_host(netns_hosts, ejob, tmp_path):
    pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    progress = tmp_path / (ejob.marker + ".progress")
    ejob.start("--gloo", "-np", "3", "--min-np", "2", *HOSTS_3, env=_env(),
               command=[PY, KERAS_SCRIPT, "--epochs", "5", "--progress-file", str(progress), "--step-delay", "0.01"])
    _wait_until(ejob, "epoch 1 batch 7", lambda: reached(progress, 1, 7), timeout=300)
    os.kill(_worker_pid("h2", ejob.marker), signal.SIGKILL)
    ejob.wait_for("err", r"^dadtrun: elastic: host h2 lost: rank 1 \(worker h2/0/2\) killed by SIGKILL$")
    ejob.wait_for("err", r"^dadtrun: elastic: round 2: 2 workers on h1, h3 \(reset 1\)$")
    out, _ = _finish(ejob, timeout=300)
    assert final_accuracy(out) >= 0.90, out[-4000:]
    assert "final test accuracy" in out and "(size 2)" in out, out[-4000:]


def test_recovery_benchmark_prints_its_table(tmp_path):
    """examples/benchmarks/elastic_recovery.py on this host: one repeat, every phase timed, in order."""
    bench = os.path.join(REPO, "examples", "benchmarks", "elastic_recovery.py")
    proc = subprocess.run([PY, bench, "--hosts", "localhost:3", "--repeats", "1", "--kill-step", "10"],
                          env=_env(), capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert rows["run"] == ["failed", "round", "reset", "resumed", "step"], proc.stdout
    failed, round_, reset, resumed, step = (float(c) for c in rows["1"])
    assert 0 <= failed and round_ <= reset <= resumed <= step < 60, proc.stdout
    assert rows["median"] == rows["1"], proc.stdout
    left = wait_no_process("dadt-elastic-recovery-", seconds=10)  # its workers' --step-log paths
    assert not left, f"the benchmark left processes behind: {left}"
