"""dadt jobs on Ray (dadt.ray, docs/running.md "Ray"): RayExecutor's ranks as Ray actors, and dadt as Ray
Train's backend (DadtConfig).

A local Ray instance (2 CPUs) in this process serves the one-node tests: the ranks' places and an allreduce
(twice, init() meeting again), start()'s executable and extra environment, the digits example
(examples/ray/train_digits_ray.py, a driver of its own) to accuracy >= 0.90, a rank that raises, shutdown()
leaving no process, and the Ray Train example (examples/ray/train_digits_ray_train.py). Then a cluster of two
nodes in two network namespaces (tools/netns_hosts.sh: `ray start --head` in h1, `ray start --address` in h2)
runs one rank per node (num_hosts=2, STRICT_SPREAD), and an elastic job (min_workers=1: the elastic digits
example, examples/ray/train_digits_elastic_ray.py) whose h2 node is killed mid-training and that finishes on h1.
Locally, an elastic job's checks (arguments, the refused calls) and the same example on one node. Skipped
without Ray (pip install 'dadt[ray]'); the two namespace hosts are skipped without root and `ip netns`. About
2.5 minutes on 2 cores.

One file (over 500 lines) because every test shares its two expensive fixtures, the local Ray instance
and the two-node cluster, which pytest starts once per module.
"""
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import PY, REPO, worker_env

try:
    import ray
    import ray.cloudpickle
except ImportError:  # pragma: no cover - depends on the machine
    ray = None

pytestmark = pytest.mark.skipif(ray is None, reason="ray is not installed (pip install 'dadt[ray]')")

EXAMPLES = os.path.join(REPO, "examples", "ray")
DRIVER_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}  # the environment of drivers of their own
LIMIT_S = 120


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance in this process; its GCS address, for drivers of their own."""
    # The functions below travel to the actors by value: the workers cannot import this test module.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    temp = tempfile.mkdtemp(prefix="dr-", dir="/tmp")  # short: Ray's socket paths must stay under 108 bytes
    # Ray's processes inherit this process's environment when ray.init() starts them: the workers' for
    # the time being (dadt's source tree on PYTHONPATH when the installed dadt has no _core).
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in worker_env(RAY_USAGE_STATS_ENABLED="0").items()
                       if k in ("PYTHONPATH", "PYTHONUNBUFFERED", "RAY_USAGE_STATS_ENABLED")})
    try:
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp, configure_logging=False)
        # Ray turns token authentication on for a local instance (RAY_AUTH_MODE=token, the token in
        # ~/.ray/auth_token); drivers of their own must ask for it too.
        DRIVER_ENV["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "disabled")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def executors():
    """Makes RayExecutors; shuts every one down after the test."""
    from dadt.ray import RayExecutor
    made = []

    def make(**kwargs):
        settings = RayExecutor.create_settings(timeout_s=kwargs.pop("timeout_s", 30))
        ex = RayExecutor(settings, **kwargs)
        made.append(ex)
        return ex

    yield make
    for ex in made:
        ex.shutdown()


def place_and_sum():
    import os
    import torch
    import dadt.torch as dadt
    dadt.init()
    total = dadt.allreduce(torch.full((3,), float(dadt.rank() + 1)), op=dadt.Sum, name="x")
    place = (dadt.rank(), dadt.size(), dadt.local_rank(), dadt.local_size(), dadt.cross_rank(), dadt.cross_size())
    dadt.shutdown()
    return place, total.tolist(), os.getpid(), os.environ.get("DADT_IFACE")


class Offset:
    def __init__(self, base):
        self.base = base


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie no one has reaped yet is gone too
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, seconds=15.0):
    deadline = time.monotonic() + seconds
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in left if alive(p)]
    return left


def test_places_and_allreduce(cluster, executors):
    ex = executors(num_workers=2)
    ex.start(executable_cls=Offset, executable_args=[10], extra_env_vars={"DADT_TEST_EXTRA": "yes"})
    for attempt in range(2):  # the second init() meets again in the same store
        got = ex.run(place_and_sum)
        assert [g[0] for g in got] == [(0, 2, 0, 2, 0, 1), (1, 2, 1, 2, 0, 1)], got
        assert all(g[1] == [3.0, 3.0, 3.0] for g in got), got
        assert all(g[3] is None for g in got), "one host: no interface is chosen"
    assert ex.execute(lambda off: off.base + int(os.environ["DADT_RANK"])) == [10, 11]
    assert ex.execute_single(lambda off: os.environ["DADT_TEST_EXTRA"]) == "yes"
    assert ray.get(ex.run_remote(lambda a, b=0: a + b + int(os.environ["DADT_RANK"]), args=[1], kwargs={"b": 2})) \
        == [3, 4]
    env = ray.get(ex.workers[1].env.remote())
    assert env["DADT_RENDEZVOUS_ADDR"] == ex.store["addr"] and env["DADT_RENDEZVOUS_PORT"] == str(ex.store["port"])
    assert len(env["DADT_SECRET"]) == 64 and env["DADT_CONTROLLER"] == "gloo" and env["DADT_START_TIMEOUT"] == "30"


def test_a_rank_that_raises(cluster, executors):
    from dadt.ray import WorkerError

    def fail_on_rank_1():
        import os
        if os.environ["DADT_RANK"] == "1":
            raise ValueError("boom on purpose")
        import dadt.torch as dadt
        dadt.init()  # waits for rank 1, which never comes: run() must not wait for this
        return "unreachable"

    ex = executors(num_workers=2, timeout_s=60)
    ex.start()
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        ex.run(fail_on_rank_1)
    assert time.monotonic() - start < 20
    assert info.value.rank == 1
    text = str(info.value)
    assert "rank 1 of 2 failed in" in text and "fail_on_rank_1" in text, text
    assert text.splitlines()[0].endswith("fail_on_rank_1(): ValueError: boom on purpose"), text
    assert 'raise ValueError("boom on purpose")' in text and "\x1b[" not in text, text  # the traceback, no colours
    assert "call shutdown()" in text, text


def test_shutdown_leaves_no_process(cluster, executors):
    ex = executors(num_workers=2)
    ex.start()
    pids = [info["pid"] for info in ex.worker_info] + [ex.store["pid"]]
    assert all(alive(p) for p in pids), pids
    # the store answers on rank 0's node address
    with socket.create_connection((ex.store["addr"], ex.store["port"]), timeout=5):
        pass
    ex.shutdown()
    ex.shutdown()  # twice is fine
    assert wait_gone(pids) == [], "still running after shutdown(): %s" % subprocess.run(
        ["ps", "-o", "pid,ppid,args", "-p", ",".join(map(str, pids))], capture_output=True, text=True).stdout
    deadline = time.monotonic() + 10
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # the placement group is removed
    assert ray.available_resources().get("CPU", 0) == 2, ray.available_resources()


def _driver(args, timeout=LIMIT_S, prefix=(), env=None):
    start = time.monotonic()
    proc = subprocess.run([*prefix, PY, *args], env=worker_env(**dict(DRIVER_ENV, **(env or {}))),
                          capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=REPO)
    return proc, time.monotonic() - start


def test_digits_example(cluster):
    proc, _ = _driver([os.path.join(EXAMPLES, "train_digits_ray.py"), "--address", cluster, "--num-workers", "2"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("ranks: ")]
    assert last and last[-1].startswith("ranks: 2; final test accuracy (rank 0): "), out[-3000:]
    assert float(last[-1].rsplit(" ", 1)[1]) >= 0.90, last


def test_ray_train_backend(cluster, tmp_path):
    try:
        import ray.train  # noqa: F401  (needs ray[train]: pandas, pyarrow)
    except ImportError as e:
        pytest.skip("Ray Train is not installed (pip install 'ray[train]'): %s" % e)
    proc, _ = _driver([os.path.join(EXAMPLES, "train_digits_ray_train.py"), "--address", cluster,
                       "--num-workers", "2", "--storage-path", str(tmp_path)])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("final test accuracy (rank 0): ")]
    assert last and float(last[-1].rsplit(" ", 1)[1]) >= 0.90, out[-3000:]



def test_elastic_refused_calls(cluster):
    """What an elastic job does not do (its argument checks are test/python_unit/test_ray_places.py)."""
    from dadt.ray import RayExecutor
    settings = RayExecutor.create_settings()
    ex = RayExecutor(settings, min_workers=1, max_workers=2, elastic_timeout=5)
    with pytest.raises(ValueError, match="executable_cls"):
        ex.start(executable_cls=Offset)
    ex.start()
    try:
        with pytest.raises(NotImplementedError, match="run\\(\\) only"):
            ex.execute(lambda _: None)
    finally:
        ex.shutdown()


def test_elastic_digits_one_node(cluster):
    """The elastic example on the local instance: one round of two ranks (max_workers=2, a CPU each)."""
    proc, _ = _driver([os.path.join(EXAMPLES, "train_digits_elastic_ray.py"), "--address", cluster,
                       "--min-workers", "1", "--max-workers", "2", "--", "--epochs", "5"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "dadt.ray: elastic: round 1: 2 worker(s) on " in out, out[-3000:]
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("ranks: ")]
    assert last and last[-1].startswith("ranks: 2; final test accuracy (rank 0): "), out[-3000:]
    assert float(last[-1].rsplit(" ", 1)[1]) >= 0.90, last


def elastic_steps(marker, die_rank, steps=20):
    """Elastic allreduces in a TorchState loop; rank ``die_rank`` of the first world to reach step 5 dies (its
    actor's process exits) unless ``marker`` exists. Returns (size, last sum, steps done) on every rank."""
    import os
    import time
    import torch
    import dadt.torch as dadt
    dadt.init()
    state = dadt.elastic.TorchState(step=0)

    @dadt.elastic.run
    def train(state):
        total = torch.zeros(1)
        while state.step < steps:
            total = dadt.allreduce(torch.ones(1), op=dadt.Sum, name="s%d" % state.step)
            if dadt.rank() == die_rank and state.step == 5 and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(1)
            state.step += 1
            state.commit()
            time.sleep(0.02)
        return dadt.size(), total.item(), state.step

    return train(state)


def test_elastic_worker_dies_below_min_workers(cluster, executors, tmp_path, capfd):
    """min_workers=2 of the local instance's 2 CPUs and a worker that dies: its node is not used again in the run
    (no cooldown_range), so the run fails after elastic_timeout, naming what was lost."""
    ex = executors(min_workers=2, max_workers=2, elastic_timeout=4)
    ex.start()
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        ex.run(elastic_steps, args=[str(tmp_path / "died"), 1])
    text = str(info.value)
    assert "1 worker(s) up, fewer than min_workers=2, for 4 s (elastic_timeout)" in text, text
    assert re.search(r"nodes lost: [\d.]+ \(worker [\d.]+/\d/\d died at ", text), text
    assert time.monotonic() - start < 40
    assert "is not used again in this run (no cooldown_range)" in capfd.readouterr().err


def test_elastic_worker_dies_and_is_replaced(cluster, executors, tmp_path):
    """Rank 0 dies, with cooldown_range=[1, 2]: the node rests 1 s, a new worker starts there, and the
    survivor (rank 0 of the next rounds) goes on with it from its last commit; every rank ends at size 2 after
    all the steps."""
    ex = executors(min_workers=2, max_workers=2, cooldown_range=[1, 2], elastic_timeout=30)
    ex.start()
    got = ex.run(elastic_steps, args=[str(tmp_path / "died"), 0])
    assert got == [(2, 2.0, 20), (2, 2.0, 20)], got
    assert (tmp_path / "died").exists()

# ---- two nodes in two network namespaces ---------------------------------------------------------------------

NETNS = os.path.join(REPO, "tools", "netns_hosts.sh")
NODE_ADDR = {"h1": "10.211.0.11", "h2": "10.211.0.12"}

TWO_HOST_DRIVER = r"""
import json, os, sys
import ray
from dadt.ray import RayExecutor

def place_and_sum():
    import os, torch
    import dadt.torch as dadt
    dadt.init()
    total = dadt.allreduce(torch.full((2,), float(dadt.rank() + 1)), op=dadt.Sum, name="x")
    out = {"place": [dadt.rank(), dadt.size(), dadt.local_rank(), dadt.local_size(), dadt.cross_rank(),
                     dadt.cross_size()], "sum": total.tolist(), "iface": os.environ.get("DADT_IFACE"),
           "addr": os.environ["DADT_RENDEZVOUS_ADDR"], "host": os.environ["DADT_HOSTNAME"]}
    dadt.shutdown()
    return out

ray.init(address=sys.argv[1])
ex = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_hosts=2, num_workers_per_host=1)
ex.start()
try:
    print("RESULT " + json.dumps(ex.run(place_and_sum)), flush=True)
finally:
    ex.shutdown()
"""


def _why_no_namespaces():
    if os.geteuid() != 0:
        return "needs root to create network namespaces (CI runs as root)"
    if shutil.which("ip") is None:
        return "ip(8) not found (iproute2)"
    if not os.path.exists("/usr/sbin/sshd"):
        return "sshd not installed (tools/netns_hosts.sh starts one per host)"
    return None


@pytest.fixture
def ray_on_two_hosts(tmp_path):
    """`ray start --head` in namespace h1 and `ray start --address` in h2 (one CPU each); the head's address,
    Ray's authentication variables, and a function that starts h2's node again (after a test killed it).
    Each `ray start --block` runs in its own process group, which teardown ends (SIGTERM: ray stops its
    processes; then SIGKILL for anything left)."""
    why = _why_no_namespaces()
    if why:
        pytest.skip(why)
    # Hosts someone else brought up (a session that shares this machine) are used as they are and left up.
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    ours = not all(h in listed for h in NODE_ADDR)
    if ours:
        up = subprocess.run(["bash", NETNS, "up"], capture_output=True, text=True, timeout=120)
        if up.returncode != 0:
            subprocess.run(["bash", NETNS, "down"], capture_output=True, timeout=120)
            pytest.fail("tools/netns_hosts.sh up failed:\n%s\n%s" % (up.stdout, up.stderr))
    ray_cli = os.path.join(os.path.dirname(PY), "ray")
    if not os.path.exists(ray_cli):
        ray_cli = shutil.which("ray")
    port = 6379
    head = "%s:%d" % (NODE_ADDR["h1"], port)
    procs, temps = [], []
    # Ray's token authentication, as on a real cluster: the same token on every node and the driver.
    token = tmp_path / "ray_auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env = worker_env(RAY_USAGE_STATS_ENABLED="0", **auth)

    def start(host, *flags):
        temp = tempfile.mkdtemp(prefix="dr%s-" % host, dir="/tmp")
        temps.append(temp)
        log = open(tmp_path / ("ray-%s.log" % host), "w+")
        p = subprocess.Popen(["ip", "netns", "exec", host, ray_cli, "start", "--block", *flags,
                              "--node-ip-address", NODE_ADDR[host], "--num-cpus", "1",
                              "--object-store-memory", str(100 * 1024 * 1024), "--temp-dir", temp,
                              "--disable-usage-stats"],
                             env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        procs.append((p, log))
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            log.seek(0)
            text = log.read()
            if "Ray runtime started" in text:
                return
            if p.poll() is not None:
                break
            time.sleep(0.5)
        log.seek(0)
        pytest.fail("ray start in %s did not start within 45 s (exit %s):\n%s" % (host, p.poll(), log.read()[-4000:]))

    try:
        start("h1", "--head", "--port", str(port), "--include-dashboard=false")
        start("h2", "--address", head)
        yield head, auth, lambda: start("h2", "--address", head)
    finally:
        for p, log in reversed(procs):  # h2's node first, then the head
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)  # whatever of the group is left
            except ProcessLookupError:
                pass
            p.wait()
            log.close()
        left = _ray_processes_in(NODE_ADDR)
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)
        if ours:
            subprocess.run(["bash", NETNS, "down"], capture_output=True, timeout=120)
        assert not left, "processes left in the namespaces after the Ray nodes stopped: %s" % left


def _ray_processes_in(hosts, seconds=10.0):
    """{host: ["pid command", ...]} of the processes still in the hosts' namespaces but their sshd."""
    deadline = time.monotonic() + seconds
    while True:
        left = {}
        for host in hosts:
            pids = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    with open("/proc/%s/cmdline" % pid, "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    continue
                if "sshd" not in cmd:
                    left.setdefault(host, []).append("%s %s" % (pid, cmd[:100]))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.3)


def test_two_namespace_hosts(ray_on_two_hosts, tmp_path):
    script = tmp_path / "two_host_driver.py"
    script.write_text(TWO_HOST_DRIVER)
    head, auth, _ = ray_on_two_hosts
    proc, _ = _driver([str(script), head], prefix=["ip", "netns", "exec", "h1"], env=auth)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, out[-4000:]
    got = json.loads(line[-1][len("RESULT "):])
    assert [g["place"] for g in got] == [[0, 2, 0, 1, 0, 2], [1, 2, 0, 1, 1, 2]], got
    assert all(g["sum"] == [3.0, 3.0] for g in got), got
    assert sorted(g["host"] for g in got) == sorted(NODE_ADDR.values()), got
    assert all(g["iface"] == "dadt0" for g in got), got  # the interface of each node's IP
    assert {g["addr"] for g in got} == {got[0]["host"]}, got  # rank 0's node serves the store


def _kill_host(host):
    """A node's death: SIGKILL every process in the host's namespace but its sshd (its raylet, its
    `ray start`, the actors' workers). Returns what was killed."""
    killed = []
    for pid in subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout.split():
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            if "sshd" in cmd:
                continue
            os.kill(int(pid), signal.SIGKILL)
            killed.append("%s %s" % (pid, cmd[:60]))
        except (OSError, ProcessLookupError):
            pass
    return killed


def _job_processes_in(host):
    """The processes of a dadt job in the host's namespace: its actors' workers and its store."""
    left = []
    for pid in subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout.split():
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "DadtRayWorker" in cmd or "serve-store" in cmd:
            left.append("%s %s" % (pid, cmd[:80]))
    return left


def _story(text):
    """What an elastic driver's failure needs to be read: its own lines (rounds, losses), then the
    output's tail (the traceback)."""
    lines = [ln for ln in text.splitlines() if "dadt.ray: elastic:" in ln or "epoch " in ln]
    return "\n".join(lines[-60:]) + "\n...\n" + text[-3000:]


def test_elastic_node_lost_and_back(ray_on_two_hosts, tmp_path):
    """An elastic job on h1 and h2 (min_workers=1, max_workers=2, one rank per node); h2 is killed (raylet,
    actors) mid-training: the job goes on on h1 from its last commit; then h2's node starts again and the job
    takes it (a host-update notice, a third round of two ranks), and reaches >= 0.90."""
    head, auth, restart_h2 = ray_on_two_hosts
    progress = tmp_path / "progress"
    log = open(tmp_path / "driver.log", "w+")
    driver = subprocess.Popen(
        ["ip", "netns", "exec", "h1", PY, os.path.join(EXAMPLES, "train_digits_elastic_ray.py"), "--address", head,
         "--min-workers", "1", "--max-workers", "2", "--elastic-timeout", "60", "--timeout", "30", "--",
         "--epochs", "16", "--step-delay", "0.03", "--progress-file", str(progress)],
        env=worker_env(**dict(DRIVER_ENV, **auth)), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        cwd=REPO, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and driver.poll() is None:  # two ranks well into epoch 2
            if progress.exists() and sum(1 for ln in progress.read_text().splitlines() if ln.startswith("2 ")) >= 40:
                break
            time.sleep(0.2)
        log.seek(0)
        text = log.read()
        assert "round 1: 2 worker(s) on 10.211.0.11, 10.211.0.12" in text and driver.poll() is None, _story(text)
        assert _kill_host("h2"), "nothing to kill in h2"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and driver.poll() is None and "round 2: " not in text:
            time.sleep(0.2)
            log.seek(0)
            text = log.read()
        assert "round 2: 1 worker(s) on 10.211.0.11 (reset 1)" in text, _story(text)
        restart_h2()
        try:
            driver.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pass
        log.seek(0)
        text = log.read()
        assert driver.returncode == 0, _story(text)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        log.close()
    assert "worker 10.211.0.12/0/2 lost" in text, _story(text)
    assert "round 3: 2 worker(s) on 10.211.0.11, 10.211.0.12 (reset 2)" in text, _story(text)
    sizes = [int(m) for m in re.findall(r"epoch \d+ size (\d) ", text)]
    assert 1 in sizes and sizes[-1] == 2, sizes  # epochs ran at size 1 after the loss, at 2 once h2 was back
    last = [ln for ln in text.splitlines() if ln.startswith("ranks: ")]
    assert last and last[-1].startswith("ranks: 2; final test accuracy (rank 0): "), _story(text)
    assert float(last[-1].rsplit(" ", 1)[1]) >= 0.90, last
    deadline = time.monotonic() + 15  # the actors and the store end with the driver
    while (_job_processes_in("h1") or _job_processes_in("h2")) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not _job_processes_in("h1") and not _job_processes_in("h2"), (_job_processes_in("h1"),
                                                                          _job_processes_in("h2"))
