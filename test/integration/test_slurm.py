"""dadt under a real Slurm 22.05: slurmctld and one slurmd per network namespace (tools/slurm_cluster.sh), jobs
submitted with srun, salloc and sbatch, their output read back.

No ssh is used anywhere: the Slurm nodes run no sshd, and every job here runs with an `ssh` first on PATH that
records its call and fails; each test asserts that it was never called. Direct launch (`srun python ...`, no
dadtrun) joins the step's tasks through rank 0's rendezvous store, with the DADT_SECRET the test exports or,
without one, a secret rank 0 hands out through the cluster's munge (`munge` shims on PATH stand in for a node
without munge and for a task whose credentials are another user's); dadtrun inside an allocation takes its hosts
from Slurm and starts the ranks as one srun step.

Needs root, network namespaces and Debian's slurmctld, slurmd, slurm-client and munge (tools/install_deps.sh);
otherwise the module is skipped with the reason. About 3 minutes (2 cores).
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import PY, REPO, rank_lines, worker_env

CLUSTER = os.path.join(REPO, "tools", "slurm_cluster.sh")
SLURM_CONF = "/tmp/dadt-slurm/etc/slurm.conf"
NODES = ["sn1", "sn2"]
ADDR = {"sn1": "10.212.0.11", "sn2": "10.212.0.12"}
LIMIT_S = 10.0
DIGITS = [PY, "examples/pytorch/train_digits.py"]


def _why_not():
    if os.geteuid() != 0:
        return "needs root for network namespaces and the Slurm daemons (CI runs as root)"
    for tool in ("slurmctld", "slurmd", "srun", "salloc", "sbatch", "munged"):
        if shutil.which(tool) is None and not os.path.exists("/usr/sbin/" + tool):
            return f"{tool} not installed (tools/install_deps.sh: slurmctld slurmd slurm-client munge)"
    probe = subprocess.run(["ip", "netns", "add", f"dadt-slprobe-{os.getpid()}"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "cannot create a network namespace here: " + probe.stderr.strip()
    subprocess.run(["ip", "netns", "del", f"dadt-slprobe-{os.getpid()}"], capture_output=True)
    return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = _why_not()
    if why:
        pytest.skip(why)
    subprocess.run(["bash", CLUSTER, "down"], capture_output=True, timeout=120)  # a leftover of a killed run
    up = subprocess.run(["bash", CLUSTER, "up"], capture_output=True, text=True, timeout=180)
    if up.returncode != 0:
        subprocess.run(["bash", CLUSTER, "down"], capture_output=True, timeout=120)
        pytest.fail(f"tools/slurm_cluster.sh up failed:\n{up.stdout}\n{up.stderr}")
    shim = tmp_path_factory.mktemp("no-ssh")
    log = shim / "ssh-called"
    (shim / "ssh").write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexit 255\n")
    (shim / "ssh").chmod(0o755)
    yield {"shim": str(shim), "ssh_log": log}
    down = subprocess.run(["bash", CLUSTER, "down"], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr


def slurm_env(cluster, path_first=None, **extra):
    env = worker_env(**extra)
    env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = SLURM_CONF
    env["PATH"] = cluster["shim"] + os.pathsep + env["PATH"]
    if path_first:
        env["PATH"] = path_first + os.pathsep + env["PATH"]
    return env


def secret():
    return os.urandom(32).hex()


def run(cluster, cmd, timeout=300, path_first=None, **extra):
    proc = subprocess.run(cmd, env=slurm_env(cluster, path_first, **extra), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, cwd=REPO)
    assert not cluster["ssh_log"].exists(), "ssh was called: " + cluster["ssh_log"].read_text()
    return proc


def labelled(stdout, rank=None):
    """Lines of srun --label output ("  3: text"), as (rank, text)."""
    out = []
    for line in stdout.splitlines():
        m = re.match(r"^\s*(\d+): ?(.*)$", line)
        if m and (rank is None or int(m.group(1)) == rank):
            out.append((int(m.group(1)), m.group(2)))
    return out


def final_accuracy(lines):
    for line in lines:
        if line.startswith("final test accuracy:"):
            return float(line.split(":")[1])
    return None


def leftovers(marker):
    """Processes of a job still alive on any node: its ranks (by marker) and dadt's helpers."""
    left = []
    for ns in NODES:
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd or "--slurm-task-env" in cmd or "--slurm-rank" in cmd:
                left.append(f"{ns} {pid}: {cmd}")
    return left


def wait_clean(marker, seconds=5.0):
    deadline = time.monotonic() + seconds
    while True:
        left = leftovers(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


GEOMETRY = """
import hashlib, json, os, socket, sys
import torch
import dadt.torch as dadt
dadt.init()
total = dadt.allreduce(torch.tensor([float(dadt.rank())]), name="sum.ranks", op=dadt.Sum)
secret = hashlib.sha256(os.environ.get("DADT_SECRET", "").encode()).hexdigest()
print(json.dumps({"rank": dadt.rank(), "size": dadt.size(), "local_rank": dadt.local_rank(),
                  "local_size": dadt.local_size(), "cross_rank": dadt.cross_rank(), "cross_size": dadt.cross_size(),
                  "host": socket.gethostname(), "sum": total.item(), "secret": secret}), flush=True)
dadt.shutdown()
"""


def check_geometry(rows):
    assert sorted(rows) == [0, 1, 2, 3], rows
    for r, row in rows.items():
        assert row["host"] == NODES[r // 2], f"rank {r} ran on {row['host']}"
        assert (row["size"], row["local_rank"], row["local_size"]) == (4, r % 2, 2), row
        assert (row["cross_rank"], row["cross_size"]) == (r // 2, 2), row
        assert row["sum"] == 6.0, row


def test_direct_srun_geometry_and_digits(cluster, tmp_path):
    script = tmp_path / "geometry.py"
    script.write_text(GEOMETRY)
    key = secret()
    proc = run(cluster, ["srun", "-N", "2", "--ntasks-per-node", "2", "--label", PY, str(script)], DADT_SECRET=key)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {json.loads(t)["rank"]: json.loads(t) for _, t in labelled(proc.stdout) if t.startswith("{")}
    check_geometry(rows)
    # The user's secret wins over munge, and reaches the tasks only through the environment.
    assert {row["secret"] for row in rows.values()} == {hashlib.sha256(key.encode()).hexdigest()}
    assert key not in proc.stdout + proc.stderr

    proc = run(cluster, ["srun", "-N", "2", "--ntasks-per-node", "2", "--label", *DIGITS], DADT_SECRET=secret())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    acc = final_accuracy([t for _, t in labelled(proc.stdout, rank=0)])
    assert acc is not None and acc >= 0.90, proc.stdout[-2000:]
    assert not [t for r, t in labelled(proc.stdout) if r != 0], "only rank 0 prints"
    assert not wait_clean("train_digits.py")


def test_direct_srun_without_a_secret_joins_through_munge(cluster, tmp_path):
    # What a user types: no DADT_SECRET anywhere. Rank 0 makes one and hands it out through munge.
    script = tmp_path / "geometry.py"
    script.write_text(GEOMETRY)
    proc = run(cluster, ["srun", "-N", "2", "--ntasks-per-node", "2", "--label", PY, str(script)])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {json.loads(t)["rank"]: json.loads(t) for _, t in labelled(proc.stdout) if t.startswith("{")}
    check_geometry(rows)
    secrets = {row["secret"] for row in rows.values()}
    assert len(secrets) == 1 and secrets != {hashlib.sha256(b"").hexdigest()}, rows
    assert not wait_clean(str(script))


def munge_shim(tmp_path, body):
    """A directory whose `munge` and `unmunge` run `body` (sh) in place of the real programs."""
    shim = tmp_path / "munge-shim"
    shim.mkdir()
    for name in ("munge", "unmunge"):
        real = shutil.which(name) or "/usr/bin/" + name
        (shim / name).write_text("#!/bin/sh\nREAL=%s\n%s\n" % (real, body))
        (shim / name).chmod(0o755)
    return str(shim)


def assert_every_task_says(proc, ranks, *words):
    assert proc.returncode != 0, proc.stdout
    assert not [t for _, t in labelled(proc.stdout) if t.startswith("{")], "a task trained alone"
    said = {r for r, t in labelled(proc.stderr) if all(w in t for w in words)}
    assert sorted(said) == ranks, proc.stderr[-4000:]


def test_direct_srun_without_a_secret_or_munge_stops_every_task(cluster, tmp_path):
    script = tmp_path / "geometry.py"
    script.write_text(GEOMETRY)
    no_munge = munge_shim(tmp_path, 'echo "$(basename $0): Error: Failed to access \\"/run/munge/munge.socket.2\\": '
                                    'No such file or directory" >&2; exit 6')
    proc = run(cluster, ["srun", "-N", "2", "--ntasks-per-node", "1", "--label", PY, str(script)], timeout=120,
               path_first=no_munge)
    assert_every_task_says(proc, [0, 1], "has 2 tasks", "DADT_SECRET is not set", "cannot get a munge credential",
                           "Failed to access")


def test_direct_srun_with_a_task_of_another_user_stops_every_task(cluster, tmp_path):
    # Task 1's credentials are made by uid 65534 (nobody): what a task of another user presents.
    script = tmp_path / "geometry.py"
    script.write_text(GEOMETRY)
    other_user = munge_shim(tmp_path, 'if [ "$SLURM_PROCID" = 1 ]; then '
                                      'exec setpriv --reuid=65534 --regid=65534 --clear-groups "$REAL" "$@"; fi\n'
                                      'exec "$REAL" "$@"')
    started = time.monotonic()
    proc = run(cluster, ["srun", "-N", "2", "--ntasks-per-node", "1", "--label", PY, str(script)], timeout=120,
               path_first=other_user)
    assert time.monotonic() - started < 60, "the refusal waited for a time-out"
    assert_every_task_says(proc, [0, 1], "DADT_SECRET is not set",
                           "task 1 of Slurm step", "runs as uid 65534", "task 0 as uid %d" % os.geteuid())


@pytest.mark.parametrize("how", ["salloc", "sbatch"])
def test_dadtrun_in_allocation_trains_digits_without_ssh(cluster, tmp_path, how):
    dadtrun_cmd = ["dadtrun", "-np", "4", *DIGITS]
    if how == "salloc":
        proc = run(cluster, ["salloc", "-N", "2", "--ntasks-per-node", "2", *dadtrun_cmd])
        out, err, code = proc.stdout, proc.stderr, proc.returncode
    else:
        job = tmp_path / "job.sh"
        job.write_text("#!/bin/bash\nexec " + " ".join(dadtrun_cmd) + "\n")
        sub = run(cluster, ["sbatch", "--parsable", "-N", "2", "--ntasks-per-node", "2", "--chdir", REPO,
                            "-o", str(tmp_path / "out"), "-e", str(tmp_path / "err"), str(job)])
        assert sub.returncode == 0, sub.stderr
        job_id = sub.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            q = run(cluster, ["squeue", "-h", "-j", job_id])
            if not q.stdout.strip():
                break
            time.sleep(0.5)
        out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
        state = run(cluster, ["scontrol", "show", "job", job_id]).stdout
        code = 0 if "ExitCode=0:0" in state else 1
        assert not cluster["ssh_log"].exists(), "ssh was called: " + cluster["ssh_log"].read_text()
    assert code == 0, out[-2000:] + err[-3000:]
    acc = final_accuracy(rank_lines(out, rank=0))
    assert acc is not None and acc >= 0.90, out[-2000:]
    assert rank_lines(out, rank=1) == [], "only rank 0 prints"


def test_dadtrun_geometry_and_mpi_in_allocation(cluster, tmp_path):
    script = tmp_path / "geometry.py"
    script.write_text(GEOMETRY)
    for flags in ([], ["--mpi"]):
        proc = run(cluster, ["salloc", "-N", "2", "--ntasks-per-node", "2", "dadtrun", *flags, "-np", "4",
                             PY, str(script)])
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        check_geometry({json.loads(t)["rank"]: json.loads(t) for t in rank_lines(proc.stdout) if t.startswith("{")})
        if flags:
            assert "dadtrun: --mpi in Slurm job" in proc.stderr and "mpirun inside the allocation" in proc.stderr


def test_dadtrun_refuses_more_ranks_than_the_allocation(cluster):
    proc = run(cluster, ["salloc", "-N", "2", "--ntasks-per-node", "1", "dadtrun", "-np", "3", PY, "-c", "pass"],
               timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert re.search(r"dadtrun: -np 3 is more than the 2 task slots of Slurm job \d+ \(sn1:1,sn2:1\)",
                     proc.stderr), proc.stderr


def test_dadtrun_as_a_task_of_a_step_is_refused(cluster):
    proc = run(cluster, ["srun", "-N", "2", "--ntasks-per-node", "1", "--label", "dadtrun", "-np", "2",
                         PY, "-c", "pass"], timeout=120)
    assert proc.returncode != 0
    lines = [t for _, t in labelled(proc.stderr) if "dadtrun is task" in t]
    assert len(lines) == 2 and all("which has 2 task(s)" in t for t in lines), proc.stderr
    # One task is refused too: its SLURM_* variables are the step's, not the allocation's.
    proc = run(cluster, ["salloc", "-N", "2", "srun", "-n", "1", "dadtrun", "-np", "2", PY, "-c", "pass"],
               timeout=120)
    assert proc.returncode != 0
    assert re.search(r"dadtrun: dadtrun is task 0 of Slurm step \d+\.\d+, which has 1 task\(s\); run dadtrun in "
                     r"the allocation itself", proc.stderr), proc.stderr


# argv: MARKER. Rank 3 (on sn2) kills itself after init; the others wait in an allreduce it never joins.
FAILING = """
import os, signal, sys, time
import torch
import dadt.torch as dadt
dadt.init()
if dadt.rank() == 3:
    time.sleep(1.0)
    print("FAILING_AT %.6f" % time.time(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
dadt.allreduce(torch.ones(4), name="never.completes")
print("NOT_REACHED", flush=True)
"""


@pytest.mark.parametrize("how", ["srun", "dadtrun"])
def test_sigkilled_rank_ends_the_job_and_is_named(cluster, tmp_path, how):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    marker = "dadt-sl-" + os.urandom(6).hex()
    if how == "srun":
        cmd = ["srun", "-N", "2", "--ntasks-per-node", "2", "--label", PY, str(script), marker]
    else:
        cmd = ["salloc", "-N", "2", "--ntasks-per-node", "2", "dadtrun", "-np", "4", PY, str(script), marker]
    proc = run(cluster, cmd, timeout=120, DADT_SECRET=secret())
    ended = time.time()
    left = wait_clean(marker)
    if how == "srun":
        failed = [t for _, t in labelled(proc.stdout, rank=3) if t.startswith("FAILING_AT ")]
        named = re.search(r"srun: error: sn2: task 3: Killed", proc.stderr)
    else:
        failed = [t for t in rank_lines(proc.stdout, rank=3) if t.startswith("FAILING_AT ")]
        named = re.search(r"dadtrun: rank 3 on host sn2 was killed \(SIGKILL\)", proc.stderr)
    assert failed, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.returncode != 0
    assert named, proc.stderr[-3000:]
    assert ended - float(failed[0].split()[1]) < LIMIT_S, f"the job took {ended - float(failed[0].split()[1]):.1f} s"
    assert "NOT_REACHED" not in proc.stdout
    assert not left, f"left on the nodes: {left}"


SLEEPER = """
import sys, time
import dadt.torch as dadt
dadt.init()
print("READY", flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("how", ["srun", "dadtrun"])
def test_scancel_ends_every_rank_and_says_so(cluster, tmp_path, how):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    marker = "dadt-sl-" + os.urandom(6).hex()
    name = "dadt-" + marker[-6:]
    if how == "srun":
        cmd = ["srun", "-J", name, "-N", "2", "--ntasks-per-node", "2", "--label", PY, str(script), marker]
    else:
        cmd = ["salloc", "-J", name, "-N", "2", "--ntasks-per-node", "2", "dadtrun", "-np", "4", PY, str(script),
               marker]
    proc = subprocess.Popen(cmd, env=slurm_env(cluster, DADT_SECRET=secret()), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, cwd=REPO)
    try:
        ready = 0
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            if re.match(r"^(\s*\d+: |\[\d+\]<stdout>:)READY$", line.rstrip("\n")):
                ready += 1
            if ready == 4 or time.monotonic() > deadline:
                break
        assert ready == 4, "the ranks did not start"
        job = run(cluster, ["squeue", "-h", "-n", name, "-o", "%i"]).stdout.strip()
        assert job, "the job is not in the queue"
        cancelled = time.monotonic()
        run(cluster, ["scancel", job])
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - cancelled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    left = wait_clean(marker)
    assert proc.returncode != 0
    assert took < LIMIT_S, f"{how} took {took:.1f} s to end after scancel"
    if how == "srun":
        assert re.search(r"CANCELLED AT", err), err[-3000:]
    else:
        assert re.search(r"dadtrun: the scheduler ended the (step|job) [0-9.]+ \(scancel", err), err[-3000:]
    assert not left, f"left on the nodes: {left}"


def test_plain_ddp_script_under_dadtrun_in_allocation(cluster, tmp_path):
    # torchrun's variables, set by the srun step's relay: a torch.distributed script with no dadt import.
    from test_torch_ddp import DDP
    script = tmp_path / "plain_ddp.py"
    script.write_text(DDP)
    proc = run(cluster, ["salloc", "-N", "2", "--ntasks-per-node", "2", "dadtrun", "-np", "4", PY, str(script)])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {json.loads(t)["dist_rank"]: json.loads(t) for t in rank_lines(proc.stdout) if t.startswith("{")}
    assert sorted(rows) == [0, 1, 2, 3], proc.stdout[-2000:]
    for r, row in rows.items():
        assert (row["RANK"], row["WORLD_SIZE"], row["LOCAL_RANK"], row["LOCAL_WORLD_SIZE"]) == (str(r), "4", str(r % 2), "2")
        assert (row["GROUP_RANK"], row["GROUP_WORLD_SIZE"]) == (str(r // 2), "2"), row
        assert row["MASTER_ADDR"] == "sn1" and row["MASTER_PORT"] == rows[0]["MASTER_PORT"], row
        assert row["in_sync"] and row["moved"], row
