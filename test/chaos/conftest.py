"""The chaos tier (`make test-chaos`): jobs across two network-namespace hosts, h3 and h4
(tools/netns_hosts.sh with DADT_NETNS_HOSTS=4), while something goes wrong on purpose: a lossy link, a
short partition, a SIGKILLed launcher, a full or read-only checkpoint filesystem, a slow rank, a stranger
on the job's ports. Each scenario runs REPEATS times (the `repeat` parameter, DADT_CHAOS_REPEATS, default
3), each under its own time bound (pytest-timeout). One file (over 500 lines) because pytest finds
fixtures only in conftest.py: everything the scenarios share (hosts, faults, jobs) lives here.

What this file gives the tests:

- `hosts` (session): h3 and h4 up and reachable over ssh. Hosts that were already up are left as found;
  when this session made every namespace host, it removes them at the end (a fresh CI machine).
- `no_leftovers` (every test, automatically): after the scenario, no python or dadtrun process (a rank,
  or the `dadtrun-rank-N` wrapper) is left on h3 or h4, and no process of the job is left here. Left
  over ones are killed and the test fails, naming them.
- Faults, each a context manager that removes what it applied in a `finally`, then checks it is gone:
  `lossy_link(host)` (tc netem loss 5% delay 20ms 50ms; where the kernel has no netem, the same from
  user space through NFQUEUE (userspace_netem.py), or without netfilterqueue 5% loss each way with
  iptables' statistic match; `faults_applied` says which), `partition(host)` (every packet
  in and out of the host's dadt0 dropped with iptables, or the link set down where iptables is
  missing).
- `job`: a dadtrun launch across the hosts (`-H h3:1,h4:1 --network-interface dadt0`), marked with
  `python -X MARKER` so that its processes can be found; `clean_digits`: the reference lines of
  examples/pytorch/train_digits.py on a clean network; `liveness_flags()` / `needs_liveness` for the
  scenarios that need issue 33's liveness time-outs.

Faults are applied only inside the h3/h4 namespaces, on their dadt0: the bridge, the root namespace
and the other hosts are never touched.
"""
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PY = sys.executable
NETNS = os.path.join(REPO, "tools", "netns_hosts.sh")
HOSTS = ("h3", "h4")
ALL_HOSTS = ("h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8", "h9")
ADDR = {"h3": "10.211.0.13", "h4": "10.211.0.14"}
LAUNCHER_ADDR = "10.211.0.1"  # the bridge: dadtrun's side
IFACE = "dadt0"
REPEATS = int(os.environ.get("DADT_CHAOS_REPEATS", "3"))
HOSTS_SPEC = "h3:1,h4:1"


def _integration_helpers():
    """test/integration/conftest.py's launcher lookup and worker environment, loaded under its own name."""
    spec = importlib.util.spec_from_file_location(
        "dadt_integration_conftest", os.path.join(REPO, "test", "integration", "conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_it = _integration_helpers()
find_dadtrun = _it.find_dadtrun
worker_env = _it.worker_env
rank_lines = _it.rank_lines
pids_matching = _it.pids_matching


def pytest_generate_tests(metafunc):
    if "repeat" in metafunc.fixturenames:
        metafunc.parametrize("repeat", range(REPEATS), ids=lambda i: f"run{i + 1}")


# ---------------------------------------------------------------------------------------------------
# Hosts


def _why_no_namespaces():
    if os.geteuid() != 0:
        return "needs root to create network namespaces (CI runs as root)"
    if shutil.which("ip") is None:
        return "ip(8) not found (iproute2)"
    if not os.path.exists("/usr/sbin/sshd") or shutil.which("ssh") is None:
        return "sshd or ssh not installed (openssh-server, openssh-client)"
    name = f"dadt-chaos-probe-{os.getpid()}"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return "cannot create a network namespace here (`ip netns add`): " + probe.stderr.strip()
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _reachable(host):
    if subprocess.run(["getent", "hosts", host], capture_output=True).returncode != 0:
        return False
    return subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3", host, "true"],
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=20).returncode == 0


@pytest.fixture(scope="session")
def hosts():
    why = _why_no_namespaces()
    if why:
        pytest.skip(why)
    found = _namespaces() & set(ALL_HOSTS)
    env = dict(os.environ, DADT_NETNS_HOSTS="4")
    if not all(h in found and _reachable(h) for h in HOSTS):
        up = subprocess.run(["bash", NETNS, "up"], capture_output=True, text=True, timeout=180, env=env)
        if up.returncode != 0:
            pytest.fail(f"DADT_NETNS_HOSTS=4 tools/netns_hosts.sh up failed:\n{up.stdout}\n{up.stderr}")
        for h in HOSTS:
            assert _reachable(h), f"{h} does not answer over ssh after tools/netns_hosts.sh up"
    for h in HOSTS:
        _clear_faults(h)  # a fault left by a killed earlier session
    yield HOSTS
    if not found:  # this session made them all (a fresh machine): remove them again
        subprocess.run(["bash", NETNS, "down"], capture_output=True, text=True, timeout=180, env=env)


@pytest.fixture
def dadtrun():
    path = find_dadtrun()
    if path is None:
        pytest.fail("dadtrun not found: set DADTRUN, install dadt (make install) or `bazel build //dadtrun`")
    return path


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None


def host_processes(host):
    """[(pid, command line)] of the python and dadtrun processes (ranks, `dadtrun-rank-N` wrappers) in a
    host's namespace; sshd itself is not one of them."""
    out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout.split()
    found = []
    for pid in out:
        cmd = _cmdline(pid)
        if cmd and not cmd.startswith("sshd") and re.search(r"python|dadtrun", cmd):
            found.append((int(pid), cmd))
    return found


def leftovers(markers=(), seconds=5.0):
    """{where: [command lines]} still there after `seconds`: rank processes on h3/h4, and here the
    processes whose command line holds one of `markers`."""
    deadline = time.monotonic() + seconds
    while True:
        left = {h: [f"{p}: {c[:200]}" for p, c in host_processes(h)] for h in HOSTS}
        left["here"] = [f"{p}: {(_cmdline(p) or '')[:200]}" for m in markers for p in pids_matching(m)]
        left = {k: v for k, v in left.items() if v}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def kill_leftovers(markers=()):
    pids = [p for h in HOSTS for p, _ in host_processes(h)]
    pids += [p for m in markers for p in pids_matching(m)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(autouse=True)
def no_leftovers(request):
    """Runs the scenario on clean hosts; afterwards fails it if any rank process is left anywhere."""
    if "hosts" not in request.fixturenames:
        yield
        return
    stale = leftovers(seconds=0)
    kill_leftovers()
    if stale:
        print(f"chaos: killed processes left by an earlier run before this scenario: {stale}")
    markers = []
    request.node.chaos_markers = markers
    yield
    for h in HOSTS:  # a fault still applied by a scenario that failed half-way
        _clear_faults(h)
    left = leftovers(markers, seconds=5.0)
    kill_leftovers(markers)
    assert not left, f"processes left after the scenario (killed now): {left}"


# ---------------------------------------------------------------------------------------------------
# Faults. Every command runs inside the host's namespace, on its dadt0 only.


def ns(host, *cmd, check=True):
    assert host in HOSTS, f"faults go on {HOSTS} only, not {host}"
    proc = subprocess.run(["ip", "netns", "exec", host, *cmd], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip netns exec {host} {' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


NETEM = ["netem", "loss", "5%", "delay", "20ms", "50ms"]
# The same in user space where the kernel has no netem: iptables hands the host's outgoing packets to
# NFQUEUE queue 7, and test/chaos/userspace_netem.py (inside the host's namespace) drops or delays them.
NETEM_QUEUE = "7"
USERSPACE_NETEM = [os.path.join(HERE, "userspace_netem.py"), "--queue", NETEM_QUEUE, "--loss", "0.05",
                   "--delay-ms", "20", "--jitter-ms", "50"]
QUEUE_RULES = [["OUTPUT", "-o", IFACE, "-j", "NFQUEUE", "--queue-num", NETEM_QUEUE, "--queue-bypass"]]
LOSS_RULES = [["INPUT", "-i", IFACE, "-m", "statistic", "--mode", "random", "--probability", "0.05", "-j", "DROP"],
              ["OUTPUT", "-o", IFACE, "-m", "statistic", "--mode", "random", "--probability", "0.05", "-j", "DROP"]]
PARTITION_RULES = [["INPUT", "-i", IFACE, "-j", "DROP"], ["OUTPUT", "-o", IFACE, "-j", "DROP"]]
RULE_TAG = ["-m", "comment", "--comment", "dadt-chaos"]


def _has_iptables():
    return shutil.which("iptables") is not None


def _clear_faults(host):
    """Removes whatever this tier may have left on a host: its tagged iptables rules, a root qdisc, a
    downed link."""
    if _has_iptables():
        rules = ns(host, "iptables", "-S", check=False).stdout.splitlines()
        for rule in rules:
            if "dadt-chaos" in rule and rule.startswith("-A "):
                ns(host, "iptables", "-D", *rule.split()[1:], check=False)
    qdisc = ns(host, "tc", "qdisc", "show", "dev", IFACE, check=False).stdout
    if "netem" in qdisc:
        ns(host, "tc", "qdisc", "del", "dev", IFACE, "root", check=False)
    _link_up(host)


def _link_up(host):
    ns(host, "ip", "link", "set", IFACE, "up", check=False)
    # Setting the link down drops the routes through it; the connected route comes back by itself.
    ns(host, "ip", "route", "replace", "default", "via", LAUNCHER_ADDR, "dev", IFACE, check=False)


def _rules_applied(host):
    return [r for r in ns(host, "iptables", "-S", check=False).stdout.splitlines() if "dadt-chaos" in r]


@contextlib.contextmanager
def _iptables_rules(host, rules):
    added = []
    try:
        for rule in rules:
            ns(host, "iptables", "-A", rule[0], *RULE_TAG, *rule[1:])
            added.append(rule)
        yield
    finally:
        for rule in added:
            ns(host, "iptables", "-D", rule[0], *RULE_TAG, *rule[1:], check=False)
        assert not _rules_applied(host), f"iptables rules left on {host}: {_rules_applied(host)}"


@pytest.fixture
def faults_applied():
    """What each fault of the test actually was (for the report), e.g. ['h4: tc netem ...']."""
    return []


@contextlib.contextmanager
def _userspace_netem(host):
    """test/chaos/userspace_netem.py in the host's namespace, fed by an NFQUEUE rule on its outgoing
    packets; both removed in a finally (the process lets its held packets go when it stops)."""
    proc = subprocess.Popen(["ip", "netns", "exec", host, PY, *USERSPACE_NETEM], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        ready = proc.stdout.readline()
        if "READY" not in ready:
            raise RuntimeError(f"userspace_netem.py on {host} did not start: {ready}{proc.stdout.read()}")
        with _iptables_rules(host, QUEUE_RULES):
            yield
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0]
        print(f"userspace netem on {host}: {out.strip()}")


def _has_nfqueue():
    return _has_iptables() and importlib.util.find_spec("netfilterqueue") is not None


@contextlib.contextmanager
def lossy_link(host, applied=None):
    """5% loss and 20 ms +- 50 ms delay on the host's dadt0 (tc netem, the host's outgoing packets). A
    kernel without netem (sch_netem) gets the same from user space (test/chaos/userspace_netem.py
    through NFQUEUE); without netfilterqueue, 5% loss each way from iptables, without the delay."""
    applied = applied if applied is not None else []
    netem = ns(host, "tc", "qdisc", "add", "dev", IFACE, "root", *NETEM, check=False)
    if netem.returncode == 0:
        applied.append(f"{host}: tc qdisc add dev {IFACE} root {' '.join(NETEM)}")
        try:
            yield applied
        finally:
            ns(host, "tc", "qdisc", "del", "dev", IFACE, "root", check=False)
            left = ns(host, "tc", "qdisc", "show", "dev", IFACE, check=False).stdout
            assert "netem" not in left, f"netem left on {host}: {left}"
        return
    if _has_nfqueue():
        applied.append(f"{host}: no netem in this kernel ({netem.stderr.strip()}); iptables NFQUEUE on "
                       f"OUTPUT -o {IFACE} to userspace_netem.py: 5% loss, 20 ms +- 50 ms delay")
        with _userspace_netem(host):
            yield applied
        return
    if not _has_iptables():
        pytest.skip(f"no way to lose packets here: tc netem failed ({netem.stderr.strip()}) and iptables "
                    "is not installed")
    applied.append(f"{host}: no netem in this kernel ({netem.stderr.strip()}); iptables statistic "
                   "5% DROP on INPUT and OUTPUT of dadt0, no delay")
    with _iptables_rules(host, LOSS_RULES):
        yield applied


@contextlib.contextmanager
def partition(host, applied=None):
    """Cuts the host off: every packet in and out of its dadt0 dropped (iptables), or, without
    iptables, its dadt0 set down. Both are undone in a finally."""
    applied = applied if applied is not None else []
    if _has_iptables():
        applied.append(f"{host}: iptables DROP on INPUT -i {IFACE} and OUTPUT -o {IFACE}")
        with _iptables_rules(host, PARTITION_RULES):
            yield applied
        return
    applied.append(f"{host}: ip link set {IFACE} down")
    try:
        ns(host, "ip", "link", "set", IFACE, "down")
        yield applied
    finally:
        _link_up(host)
        state = ns(host, "ip", "-o", "link", "show", IFACE, check=False).stdout
        assert ",UP" in state or "state UP" in state, f"{host}'s {IFACE} is still down: {state}"


def timed_fault(fault_cm, start_after, seconds, log):
    """Runs `fault_cm` for `seconds` once `start_after` (an Event) is set; returns the thread. `log`
    gets (start, end) monotonic times, or an exception."""

    def body():
        if not start_after.wait(120):
            return
        try:
            with fault_cm:
                log.append(("start", time.monotonic()))
                time.sleep(seconds)
            log.append(("end", time.monotonic()))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            log.append(("error", e))

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


# ---------------------------------------------------------------------------------------------------
# Jobs


class Job:
    """One dadtrun launch across h3 and h4. The marker goes on python's command line as `-X MARKER`
    (an -X option python ignores), so that `pgrep -f MARKER` finds the job's processes here without
    changing the script's own arguments."""

    def __init__(self, dadtrun, tmp_path, request):
        self.dadtrun = dadtrun
        self.tmp_path = tmp_path
        self.marker = "dadt-chaos-" + uuid.uuid4().hex[:12]
        request.node.chaos_markers.append(self.marker)
        self.proc = None
        self.out_lines, self.err_lines = [], []
        self.started_at = None
        self._readers = []

    def command(self, script, args=(), flags=(), hosts_spec=HOSTS_SPEC, np=2):
        if not os.path.isabs(script) and not script.endswith(".py"):
            path = self.tmp_path / "job_script.py"
            path.write_text(script)
            script = str(path)
        where = ["-H", hosts_spec] if hosts_spec else []  # None: the flags say (a discovery script)
        return [self.dadtrun, "--gloo", "-np", str(np), *where, "--network-interface", IFACE, *flags,
                PY, "-X", self.marker, script, *map(str, args)]

    def start(self, script, args=(), flags=(), env=None, **kw):
        """Starts dadtrun in its own session; output is read by two threads (see lines())."""
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(self.command(script, args, flags, **kw), env=env or worker_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
        for stream, sink in ((self.proc.stdout, self.out_lines), (self.proc.stderr, self.err_lines)):
            t = threading.Thread(target=self._read, args=(stream, sink), daemon=True)
            t.start()
            self._readers.append(t)
        return self.proc

    @staticmethod
    def _read(stream, sink):
        for line in stream:
            sink.append((time.monotonic(), line.rstrip("\n")))

    def wait_line(self, pattern, timeout=60, stream="out"):
        """Waits for a line matching `pattern`; returns the match."""
        sink = self.out_lines if stream == "out" else self.err_lines
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            while seen < len(sink):
                m = rx.search(sink[seen][1])
                seen += 1
                if m:
                    return m
            if self.proc.poll() is not None and all(not t.is_alive() for t in self._readers) and seen >= len(sink):
                break
            time.sleep(0.02)
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s\n{self.dump()}")

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"dadtrun still running after {timeout} s\n{self.dump()}") from None
        for t in self._readers:
            t.join(10)
        return rc

    def run(self, script, args=(), flags=(), timeout=120, env=None, **kw):
        """Runs to the end; returns (exit code, seconds)."""
        self.start(script, args, flags, env=env, **kw)
        rc = self.wait(timeout)
        return rc, time.monotonic() - self.started_at

    @property
    def stdout(self):
        return "\n".join(line for _, line in self.out_lines)

    @property
    def stderr(self):
        return "\n".join(line for _, line in self.err_lines)

    def dump(self, n=4000):
        return f"--- stdout (tail) ---\n{self.stdout[-n:]}\n--- stderr (tail) ---\n{self.stderr[-n:]}"

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def job(hosts, dadtrun, tmp_path, request):
    made = []

    def make():
        j = Job(dadtrun, tmp_path, request)
        made.append(j)
        return j

    first = make()
    first.another = make
    yield first
    for j in made:
        j.cleanup()


# The reference every scenario that trains compares with: examples/pytorch/train_digits.py across h3 and
# h4 on a clean network. Sync mode with a fixed seed is deterministic (the two ranks' gradients are
# summed, and a + b == b + a in floating point), so a faulty network must give the same lines exactly.
DIGITS = os.path.join(REPO, "examples", "pytorch", "train_digits.py")
DIGITS_EPOCHS = 20


def digits_lines(stdout):
    return [ln for ln in rank_lines(stdout, rank=0) if ln.startswith(("epoch ", "final test accuracy:"))]


@pytest.fixture(scope="session")
def clean_digits(hosts):
    """rank 0's epoch lines and final accuracy line of a clean run across h3 and h4."""
    dadtrun = find_dadtrun()
    cmd = [dadtrun, "--gloo", "-np", "2", "-H", HOSTS_SPEC, "--network-interface", IFACE, PY, DIGITS,
           "--epochs", str(DIGITS_EPOCHS)]
    proc = subprocess.run(cmd, env=worker_env(), capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = digits_lines(proc.stdout)
    assert len(lines) == DIGITS_EPOCHS + 1, proc.stdout
    accuracy = float(lines[-1].split(":")[1])
    assert accuracy >= 0.90, lines[-1]
    return lines


def launcher_lines(text):
    return [ln for ln in text.splitlines() if ln.startswith("dadtrun:")]


def liveness_flag_present(dadtrun_path=None):
    """Whether this dadtrun has liveness time-outs (issue 33 item 1)."""
    path = dadtrun_path or find_dadtrun()
    if path is None:
        return False
    out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30).stdout
    return "--liveness-timeout-seconds" in out


# Every rank prints READY after its first allreduce, then allreduces in a loop until killed: a job that
# would not end by itself (the liveness scenarios).
ENDLESS = """
import time
import torch
import dadt.torch as dadt
dadt.init()
x = torch.ones(1000)
dadt.allreduce(x, name="first")
print("READY", flush=True)
while True:
    dadt.allreduce(x, name="loop")
    time.sleep(0.05)
"""

LIVENESS_REASON = "needs liveness time-outs (issue 33 item 1)"
needs_liveness = pytest.mark.skipif(not liveness_flag_present(), reason=LIVENESS_REASON)
LIVENESS_WARN_S = 2  # --liveness-timeout-seconds: the warning
LIVENESS_END_S = 6  # --liveness-shutdown-time-seconds: the end of the job


def liveness_flags():
    """Warn after LIVENESS_WARN_S of silence; end the job after LIVENESS_END_S (where dadtrun has a
    separate flag for the end; otherwise the time-out itself is expected to end the job)."""
    path = find_dadtrun()
    out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30).stdout if path else ""
    if "--liveness-shutdown-time-seconds" in out:
        return ("--liveness-timeout-seconds", str(LIVENESS_WARN_S),
                "--liveness-shutdown-time-seconds", str(LIVENESS_END_S)), LIVENESS_END_S
    return ("--liveness-timeout-seconds", str(LIVENESS_END_S)), LIVENESS_END_S


# An elastic job of test/chaos/elastic_committer.py on h3 and h4 (--min-np 1, liveness time-outs),
# for the scenarios where one worker stops answering and the job must go on without it.
ELASTIC_STEPS = 300


def start_elastic_committer(job):
    """Starts the job and waits for its 20th step; returns the liveness end time in seconds."""
    flags, end_s = liveness_flags()
    script = os.path.join(REPO, "test", "chaos", "elastic_committer.py")
    job.start(script, args=("--steps", ELASTIC_STEPS, "--commit-every", "5", "--step-delay", "0.03"),
              flags=("--min-np", "1", "--host-discovery-script", "printf 'h3\\nh4\\n'", *flags),
              hosts_spec=None)
    job.wait_line(r"<stdout>:COMMITTED 20 ", timeout=90)
    return end_s


def check_went_on_without_rank_1(job, rc):
    """The job finished on h3 after rank 1 on h4 was named and dropped, with every commit once and
    in order (the survivor rolls back to its last commit and goes on from there)."""
    assert rc == 0, job.dump()
    err = job.stderr
    assert re.search(r"liveness: no heartbeat from rank 1 on host h4", err), job.dump()
    assert re.search(r"elastic: rank 1 \(worker h4/\S+\) on host h4 stopped answering", err), job.dump()
    rounds = re.findall(r"elastic: round (\d+): .* on (.*?)(?: \(reset|$)", err, re.M)
    assert ("2", "h3") in rounds and all(hosts == "h3" for n, hosts in rounds if n != "1"), rounds
    steps = [int(m.group(1)) for _, ln in job.out_lines for m in [re.search(r"<stdout>:COMMITTED (\d+) ", ln)] if m]
    assert steps == list(range(5, ELASTIC_STEPS + 1, 5)), steps
    assert f"FINISHED {ELASTIC_STEPS}" in job.stdout, job.dump()
