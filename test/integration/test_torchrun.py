"""dadt under torchrun and in a Kubeflow PyTorchJob's environment, without dadtrun: init() meets the other
ranks through torch's store at MASTER_ADDR:MASTER_PORT (dadt/common/torchrun.py, docs/running.md "torchrun and
Kubernetes").

Each job runs a script that does one dadt allreduce and prints its place (rank, size, local and cross rank and
size) and the sum. Forms: `torchrun --standalone`, the static form (--master-addr/--master-port/--node-rank, two
torchrun processes as two nodes), the c10d rendezvous, torchrun reading a pod's PET_* variables, one plain
process per pod (PyTorchJob without torchrun, where torch.distributed shares MASTER_PORT afterwards), restarts
(--max-restarts 1: one node, where the restarted rank 1 reads the failed attempt's entry first, and two c10d
nodes, which may disagree on the restart count), elastic membership (`--nnodes 1:2`: two nodes, one killed, the
other restarted at size 1), and two nodes in two network namespaces (skipped without root and `ip netns`). About
10 s per test on 2 cores, most of it torch's import; the elastic one about 30 s.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid

import pytest

from conftest import PY, pids_matching, worker_env

TORCHRUN = shutil.which("torchrun")
pytestmark = pytest.mark.skipif(TORCHRUN is None, reason="torchrun not found (pip install torch)")
LIMIT_S = 90

SCRIPT = r"""
import os, sys, time
import torch
import dadt.torch as hvd

if os.environ.get("TORCHELASTIC_RESTART_COUNT") == "1" and os.environ.get("RANK") == "0":
    time.sleep(float(os.environ.get("DELAY_RANK0_ON_RESTART", "0")))  # rank 1 reads the stale entry first
hvd.init()
x = torch.full((3,), float(hvd.rank() + 1))
total = hvd.allreduce(x, op=hvd.Sum, name="x")
flag = os.environ.get("FAIL_RANK1_ONCE")  # a file: the first rank 1 to get here creates it and fails
if flag and hvd.rank() == 1 and not os.path.exists(flag):
    open(flag, "w").close()
    print("FAILING rank=1", flush=True)
    os._exit(3)
if os.environ.get("TORCH_PG_AFTER"):
    import torch.distributed as dist
    dist.init_process_group("gloo")  # shares rank 0's store on MASTER_PORT
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == hvd.size(), t
    dist.destroy_process_group()
total = hvd.allreduce(total, op=hvd.Average, name="again")
# One write per line: the ranks of a node share torchrun's stdout, and print() under PYTHONUNBUFFERED
# writes the text and the newline separately, so two ranks' lines could interleave.
os.write(1, ("RESULT rank=%d size=%d local=%d/%d cross=%d/%d sum=%g attempt=%s\n" % (
    hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(),
    total[0].item(), os.environ.get("TORCHELASTIC_RESTART_COUNT", "-"))).encode())
hvd.shutdown()
"""
RESULT = re.compile(r"^RESULT rank=(\d+) size=(\d+) local=(\d+)/(\d+) cross=(\d+)/(\d+) sum=(\S+) attempt=(\S+)$",
                    re.M)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def launch(tmp_path):
    """launch([argv, ...], envs) starts each command (a node) at once; returns their (returncode, output)."""
    script = tmp_path / "allreduce_place.py"
    script.write_text(SCRIPT)
    marker = "dadt-tr-" + uuid.uuid4().hex[:12]
    procs = []

    def run(commands, extra_envs=None):
        extra_envs = extra_envs or [{}] * len(commands)
        for cmd, extra in zip(commands, extra_envs):
            argv = [a.replace("SCRIPT", str(script)) for a in cmd] + [marker]
            procs.append(subprocess.Popen(argv, env=worker_env(**extra), stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
                                          start_new_session=True))
        out = []
        for p in procs:
            try:
                text, _ = p.communicate(timeout=LIMIT_S)
            except subprocess.TimeoutExpired:
                pytest.fail("a node still runs after %d s: %s" % (LIMIT_S, p.args), pytrace=False)
            out.append((p.returncode, text))
        return out

    yield run
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    for pid in pids_matching(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def places(outputs):
    """{rank: (size, local_rank, local_size, cross_rank, cross_size, sum, attempt)} over every node's output."""
    found = {}
    for code, text in outputs:
        assert code == 0, text[-4000:]
        for m in RESULT.finditer(text):
            rank = int(m.group(1))
            assert rank not in found, text
            found[rank] = tuple(int(g) for g in m.groups()[1:6]) + (float(m.group(7)), m.group(8))
    return found


def expect(found, nodes, per_node, attempt="0", outputs=None):
    size = nodes * per_node
    total = size * (size + 1) / 2
    assert sorted(found) == list(range(size)), (found, outputs)
    for rank, got in found.items():
        assert got == (size, rank % per_node, per_node, rank // per_node, nodes, total, attempt), (rank, got)


def torchrun(*flags):
    return [TORCHRUN, *flags, "SCRIPT"]


def test_standalone(launch):
    out = launch([torchrun("--standalone", "--nproc-per-node", "2")])
    expect(places(out), nodes=1, per_node=2)


def test_static_two_nodes_on_one_host(launch):
    # One rank per node here: two ranks per node in the static form is the PET_* test below.
    port = str(free_port())
    out = launch([torchrun("--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(n),
                           "--master-addr", "127.0.0.1", "--master-port", port) for n in (0, 1)])
    expect(places(out), nodes=2, per_node=1)


def test_c10d_rendezvous_two_nodes(launch):
    endpoint = "127.0.0.1:%d" % free_port()
    out = launch([torchrun("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                           "--rdzv-endpoint", endpoint, "--rdzv-id", "dadt-c10d")] * 2)
    expect(places(out), nodes=2, per_node=1)  # c10d picks the node ranks; each is one node's only rank


def test_pytorchjob_pet_variables(launch):
    # A PyTorchJob pod: PET_* for torchrun, and RANK/WORLD_SIZE set to the pod's (node's) index and count;
    # with two ranks per pod, pod 1's RANK=1 is not its workers' ranks 2 and 3.
    port = str(free_port())
    pods = [{"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": str(n), "PET_MASTER_ADDR": "127.0.0.1",
             "PET_MASTER_PORT": port, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2",
             "RANK": str(n)} for n in (0, 1)]
    out = launch([torchrun()] * 2, pods)
    expect(places(out), nodes=2, per_node=2)


def test_pytorchjob_one_process_per_pod_without_torchrun(launch):
    port = str(free_port())
    pods = [{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2", "RANK": str(n),
             "TORCH_PG_AFTER": "1"} for n in (0, 1)]
    found = places(launch([[PY, "SCRIPT"]] * 2, pods))
    assert sorted(found) == [0, 1], found
    for rank, got in found.items():  # each pod a node of one rank
        assert got == (2, 0, 1, rank, 2, 3.0, "-"), (rank, got)


def test_restart_meets_again(launch, tmp_path):
    out = launch([torchrun("--standalone", "--nproc-per-node", "2", "--max-restarts", "1")],
                 [{"FAIL_RANK1_ONCE": str(tmp_path / "failed"), "DELAY_RANK0_ON_RESTART": "1.5"}])
    assert "FAILING rank=1" in out[0][1], out[0][1][-3000:]
    expect(places(out), nodes=1, per_node=2, attempt="1", outputs=out)


def test_c10d_restart_of_two_nodes(launch, tmp_path):
    # The node whose worker failed counts a restart; the other, restarted because a node waits in the
    # rendezvous, often does not: the ranks of the second attempt may disagree on TORCHELASTIC_RESTART_COUNT.
    endpoint = "127.0.0.1:%d" % free_port()
    out = launch([torchrun("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                           endpoint, "--rdzv-id", "dadt-c10d-restart", "--max-restarts", "1")] * 2,
                 [{"FAIL_RANK1_ONCE": str(tmp_path / "failed")}] * 2)
    assert "FAILING rank=1" in out[0][1] + out[1][1], out
    found = places(out)
    assert sorted(found) == [0, 1], found
    for rank, got in found.items():
        assert got[:6] == (2, 0, 1, rank, 2, 3.0) and got[6] in ("0", "1"), (rank, got)
    assert "1" in (found[0][6], found[1][6]), found  # the second attempt, not the first



ELASTIC_SCRIPT = r"""
import os, time
import torch
import dadt.torch as hvd

hvd.init()  # a peer's death below fails this attempt; torchrun starts the next one with the nodes left
os.write(1, ("JOINED rank=%d size=%d pid=%d\n" % (hvd.rank(), hvd.size(), os.getpid())).encode())
for step in range(int(os.environ["STEPS"])):
    total = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="step%d" % step)
    assert total.item() == hvd.size(), total
    time.sleep(0.1)
os.write(1, ("RESULT rank=%d size=%d\n" % (hvd.rank(), hvd.size())).encode())
hvd.shutdown()
"""


def test_c10d_elastic_node_leaves(tmp_path):
    """torchrun's elastic membership (--nnodes 1:2): two nodes meet at size 2; node B (its agent and its
    worker: a machine that dies) is killed mid-training; A's worker fails, and A's agent restarts it in a new
    rendezvous of one node: dadt's init() comes up at size 1 and the job ends 0. Node A hosts the rendezvous
    store (is_host), as the node that stays must: torchrun cannot go on without it."""
    script = tmp_path / "elastic_allreduce.py"
    script.write_text(ELASTIC_SCRIPT)
    marker = "dadt-tr-" + uuid.uuid4().hex[:12]
    endpoint = "127.0.0.1:%d" % free_port()
    logs = [open(tmp_path / ("node%s.log" % n), "w+") for n in "ab"]
    nodes = []
    for n, is_host in enumerate(("true", "false")):
        argv = [TORCHRUN, "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", endpoint, "--rdzv-id", marker, "--max-restarts", "2", "--monitor-interval", "0.5",
                "--rdzv-conf", "is_host=%s,last_call_timeout=5" % is_host, str(script), marker]
        nodes.append(subprocess.Popen(argv, env=worker_env(STEPS="60", OMP_NUM_THREADS="1"), stdout=logs[n],
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))

    def text(n):
        logs[n].seek(0)
        return logs[n].read()

    try:
        deadline = time.monotonic() + LIMIT_S
        while not all("JOINED rank=%d size=2" % r in text(0) + text(1) for r in (0, 1)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in nodes), (text(0), text(1))
            time.sleep(0.2)
        time.sleep(1)  # a few steps at size 2
        pid_b = [int(m) for m in re.findall(r"JOINED rank=\d size=2 pid=(\d+)", text(1))]
        os.killpg(nodes[1].pid, signal.SIGKILL)  # node B's agent ...
        for pid in pid_b:
            os.kill(pid, signal.SIGKILL)  # ... and its worker, which runs in a session of its own
        nodes[1].wait()
        try:
            code = nodes[0].wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail("node A still runs %d s after node B was killed:\n%s" % (LIMIT_S, text(0)[-4000:]))
        out = text(0)
        assert code == 0, out[-4000:]
        assert re.search(r"JOINED rank=0 size=1 pid=\d+", out), out[-4000:]  # the new attempt, at the new size
        assert "RESULT rank=0 size=1" in out, out[-4000:]
        assert "DadtInternalError" in out, out[-4000:]  # the first attempt saw its peer go
    finally:
        for p in nodes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for pid in pids_matching(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for f in logs:
            f.close()

# Two nodes in two network namespaces joined by a veth pair; each runs torchrun's static form.
NS = ["dadt-tr-a", "dadt-tr-b"]
NS_ADDR = ["10.213.0.1", "10.213.0.2"]
NS_IFACE = "dadttr0"


def _why_no_namespaces():
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "ip(8) not found (iproute2)"
    return None


@pytest.fixture
def two_hosts():
    why = _why_no_namespaces()
    if why:
        pytest.skip(why)

    def ip(*args, check=True):
        return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)

    for ns in NS:
        ip("netns", "del", ns, check=False)
    try:
        for ns in NS:
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
        ip("link", "add", "dadttr-a", "netns", NS[0], "type", "veth", "peer", "name", "dadttr-b", "netns", NS[1])
        for ns, side, addr in zip(NS, ("dadttr-a", "dadttr-b"), NS_ADDR):
            ip("-n", ns, "link", "set", side, "name", NS_IFACE)
            ip("-n", ns, "addr", "add", addr + "/24", "dev", NS_IFACE)
            ip("-n", ns, "link", "set", NS_IFACE, "up")
    except subprocess.CalledProcessError as e:
        for ns in NS:
            ip("netns", "del", ns, check=False)
        pytest.skip("cannot set up two network namespaces here: " + (e.stderr or "").strip())
    yield NS
    for ns in NS:
        ip("netns", "del", ns, check=False)


def test_static_two_namespace_hosts(launch, two_hosts):
    port = str(free_port())
    out = launch([["ip", "netns", "exec", ns] + torchrun("--nnodes", "2", "--nproc-per-node", "1", "--node-rank",
                                                         str(n), "--master-addr", NS_ADDR[0], "--master-port", port)
                  for n, ns in enumerate(two_hosts)],
                 [{"DADT_IFACE": NS_IFACE, "GLOO_SOCKET_IFNAME": NS_IFACE}] * 2)
    expect(places(out), nodes=2, per_node=1)
