"""dadtrun across hosts: three network namespaces h1, h2, h3, each with its own sshd (tools/netns_hosts.sh).

Every rank runs on a "remote" host (dadtrun itself stays in the root namespace), so everything here goes
through the ssh spawner: placement and geometry, the Python collective suite, the digits example, failure
fan-out (no process left in any namespace), an unreachable host, the job secret kept off command lines,
awkward arguments, and the launcher's one-line errors. Placement, the collective suite, the digits example
and failure fan-out also run with --mpi, where mpirun starts the ranks on the same hosts over ssh.

Needs root, ip(8) with network namespaces, sshd and an ssh client (tools/install_deps.sh installs them; CI
runs as root). Without them the module is skipped, with the reason.
"""
import json
import os
import re
import shutil
import socket
import signal
import subprocess
import sys
import time

import pytest

from conftest import PY, REPO, pids_matching, rank_lines, wait_no_process, worker_env

NETNS = os.path.join(REPO, "tools", "netns_hosts.sh")
HOSTS = ["h1", "h2", "h3"]
IFACE = "dadt0"
ADDR = {"h1": "10.211.0.11", "h2": "10.211.0.12", "h3": "10.211.0.13"}
LIMIT_S = 10.0
# Each way to launch across the hosts: dadtrun's own ssh spawner, and mpirun (dadtrun --mpi).
LAUNCHERS = ["--gloo", "--mpi"]


def _why_no_namespaces():
    if os.geteuid() != 0:
        return "needs root to create network namespaces (CI runs as root)"
    if shutil.which("ip") is None:
        return "ip(8) not found (iproute2)"
    if not os.path.exists("/usr/sbin/sshd") or shutil.which("ssh") is None:
        return "sshd or ssh not installed (openssh-server, openssh-client)"
    name = f"dadt-probe-{os.getpid()}"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return "cannot create a network namespace here (`ip netns add`): " + probe.stderr.strip()
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


@pytest.fixture(scope="module")
def hosts():
    why = _why_no_namespaces()
    if why:
        pytest.skip(why)
    up = subprocess.run(["bash", NETNS, "up"], capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        subprocess.run(["bash", NETNS, "down"], capture_output=True, timeout=120)
        pytest.fail(f"tools/netns_hosts.sh up failed:\n{up.stdout}\n{up.stderr}")
    yield HOSTS
    down = subprocess.run(["bash", NETNS, "down"], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr


def namespace_processes(marker):
    """{namespace: [command lines]} of the processes in each namespace whose command line has `marker`."""
    found = {}
    for ns in HOSTS:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        lines = []
        for pid in out:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd:
                lines.append(f"{pid}: {cmd}")
        found[ns] = lines
    return found


def wait_namespaces_clean(marker, seconds=5.0):
    deadline = time.monotonic() + seconds
    while True:
        left = {ns: p for ns, p in namespace_processes(marker).items() if p}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def run(cmd, timeout=300, **kw):
    return subprocess.run(cmd, env=kw.pop("env", worker_env()), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=kw.pop("cwd", REPO), **kw)


def launcher_lines(stderr):
    return [ln for ln in stderr.splitlines() if ln.startswith("dadtrun:")]


GEOMETRY = """
import json, socket, subprocess, sys
import dadt.torch as dadt
import torch
dadt.init()
addr = subprocess.run(["ip", "-4", "-o", "addr", "show", "dadt0"], capture_output=True, text=True).stdout.split()
total = dadt.allreduce(torch.tensor([float(dadt.rank())]), name="sum.ranks", op=dadt.Sum)
print(json.dumps({"rank": dadt.rank(), "size": dadt.size(), "local_rank": dadt.local_rank(),
                  "local_size": dadt.local_size(), "cross_rank": dadt.cross_rank(), "cross_size": dadt.cross_size(),
                  "addr": addr[3].split("/")[0] if len(addr) > 3 else None, "sum": total.item()}), flush=True)
dadt.shutdown()
"""


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_geometry_on_every_host(hosts, dadtrun, tmp_path, launcher):
    script = tmp_path / "geometry.py"
    script.write_text(GEOMETRY)
    proc = run([dadtrun, launcher, "-np", "6", "-H", "h1:2,h2:2,h3:2", "--network-interface", IFACE, PY, str(script)],
               timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {}
    for line in rank_lines(proc.stdout):
        if line.startswith("{"):
            row = json.loads(line)
            rows[row["rank"]] = row
    assert sorted(rows) == list(range(6)), proc.stdout
    for r, row in rows.items():
        host = HOSTS[r // 2]
        assert row["addr"] == ADDR[host], f"rank {r} ran on {row['addr']}, expected {host}"
        assert (row["size"], row["local_rank"], row["local_size"]) == (6, r % 2, 2), row
        assert (row["cross_rank"], row["cross_size"]) == (r // 2, 3), row
        assert row["sum"] == 15.0, row
    if launcher == "--gloo":  # dadtrun's own progress lines; under --mpi, mpirun reaches the hosts
        lines = launcher_lines(proc.stderr)
        assert "dadtrun: hosts reached: 3/3" in lines, proc.stderr
        assert "dadtrun: rendezvous: 6/6 ranks" in lines, proc.stderr


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_python_collective_suite_across_hosts(hosts, dadtrun, launcher):
    proc = run([dadtrun, launcher, "-np", "6", "-H", "h1:2,h2:2,h3:2", "--network-interface", IFACE,
                PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test/python_multirank"], timeout=900)
    tail = "\n".join(proc.stdout.splitlines()[-30:])
    # A test that stalls past the suite's watchdog leaves every rank's stack dump on stderr, longer
    # than the tail shown: its frames in the suite's files name the test and the line it waited on.
    stalled = "\n".join(line for line in proc.stderr.splitlines() if "test/python_multirank/" in line)
    assert proc.returncode == 0, f"{tail}\nframes in the suite:\n{stalled}\n{proc.stderr[-3000:]}"
    assert any(re.search(r"\d+ passed", line) for line in rank_lines(proc.stdout, rank=0)), tail


def _final_accuracy(stdout):
    for line in rank_lines(stdout, rank=0):
        if line.startswith("final test accuracy:"):
            return float(line.split(":")[1])
    return None


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_digits_example_same_accuracy_as_one_host(hosts, dadtrun, launcher):
    example = [PY, "examples/pytorch/train_digits.py", "--epochs", "10"]
    one = run([dadtrun, "--gloo", "-np", "6", *example], timeout=600)
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-2000:]
    three = run([dadtrun, launcher, "-np", "6", "-H", "h1:2,h2:2,h3:2", "--network-interface", IFACE, *example], timeout=600)
    assert three.returncode == 0, three.stdout[-2000:] + three.stderr[-2000:]
    a1, a3 = _final_accuracy(one.stdout), _final_accuracy(three.stdout)
    assert a1 is not None and a3 is not None, one.stdout[-1000:] + three.stdout[-1000:]
    assert a1 > 0.9, f"one host reached only {a1}"
    assert abs(a1 - a3) <= 0.01, f"accuracy on one host {a1}, across three hosts {a3}"


# argv: MARKER HOW. Rank 3 (on h2) fails after init; the others wait in an allreduce it never joins.
FAILING = """
import os, signal, sys, time
import torch
import dadt.torch as dadt
how = sys.argv[2]
dadt.init()
if dadt.rank() == 3:
    time.sleep(1.0)
    print("FAILING_AT %.6f" % time.time(), flush=True)
    if how == "exception":
        raise RuntimeError("deliberate failure on rank 3")
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
if how == "sigint":
    print("READY", flush=True)
    time.sleep(300)
dadt.allreduce(torch.ones(4), name="never.completes")
print("NOT_REACHED", flush=True)
"""


def _start(dadtrun, tmp_path, script_text, args, hosts_spec="h1:2,h2:2,h3:2", np=6, flags=(), launcher="--gloo"):
    marker = "dadt-mh-" + os.urandom(6).hex()
    script = tmp_path / "job.py"
    script.write_text(script_text)
    cmd = [dadtrun, launcher, "-np", str(np), "-H", hosts_spec, "--network-interface", IFACE, *flags,
           PY, str(script), marker, *args]
    proc = subprocess.Popen(cmd, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
    return proc, marker


def _kill_leftovers(marker):
    for pid in pids_matching(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("how,launcher", [("sigkill", "--gloo"), ("exception", "--gloo"),
                                          ("sigkill", "--mpi"), ("exception", "--mpi")])
def test_failing_remote_rank_stops_every_host(hosts, dadtrun, tmp_path, how, launcher):
    proc, marker = _start(dadtrun, tmp_path, FAILING, [how], launcher=launcher)
    try:
        out, err = proc.communicate(timeout=120)
        ended = time.time()
        left = wait_namespaces_clean(marker)
    finally:
        _kill_leftovers(marker)
    failed_at = None
    for line in rank_lines(out, rank=3):
        if line.startswith("FAILING_AT "):
            failed_at = float(line.split()[1])
    assert failed_at is not None, out + err
    assert ended - failed_at < LIMIT_S, f"dadtrun took {ended - failed_at:.1f} s to stop after rank 3 failed"
    assert proc.returncode != 0
    assert "NOT_REACHED" not in out
    assert not left, f"processes of the job left behind: {left}"
    assert not wait_no_process(marker, 1.0), "processes of the job left behind"
    if launcher == "--mpi":
        # mpirun names the first rank that ended (a survivor may beat rank 3 to it); the survivors'
        # own errors name rank 3 as the cause.
        assert re.search(r"rank 3\b.*\bh2\b|\[\[\d+,1\],3\]|shut down by rank 3\b", err, re.S), err
        return
    report = "\n".join(launcher_lines(err))
    assert re.search(r"\brank 3 on host h2\b", report), err
    if how == "sigkill":
        assert "SIGKILL" in report, err
    else:
        assert re.search(r"exited with code 1\b", report), err


def test_sigint_stops_every_host(hosts, dadtrun, tmp_path):
    proc, marker = _start(dadtrun, tmp_path, FAILING, ["sigint"])
    try:
        deadline = time.monotonic() + 120
        ready = 0
        lines = []
        while ready < 6 and time.monotonic() < deadline:  # every rank up on every host
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            ready += line.rstrip().endswith(":READY")
        assert ready == 6, "".join(lines) + proc.stderr.read() if proc.poll() is not None else "".join(lines)
        assert all(namespace_processes(marker).values()), "every namespace should run ranks"
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
        left = wait_namespaces_clean(marker)
    finally:
        _kill_leftovers(marker)
    assert took < LIMIT_S, f"dadtrun took {took:.1f} s to stop after SIGINT"
    assert proc.returncode == 128 + signal.SIGINT, err
    assert not left, f"processes of the job left behind: {left}"
    assert "received SIGINT" in err, err


def test_unreachable_host_is_named(hosts, dadtrun):
    stop = subprocess.run(["bash", NETNS, "stop-sshd", "h2"], capture_output=True, text=True)
    assert stop.returncode == 0, stop.stderr
    try:
        start = time.monotonic()
        proc = run([dadtrun, "--gloo", "-np", "6", "-H", "h1:2,h2:2,h3:2", "--start-timeout", "10",
                    "--network-interface", IFACE, "true"], timeout=60)
        took = time.monotonic() - start
    finally:
        restart = subprocess.run(["bash", NETNS, "start-sshd", "h2"], capture_output=True, text=True)
    assert restart.returncode == 0, restart.stderr
    assert took < 10, f"took {took:.1f} s"
    assert proc.returncode >= 2, proc.stderr
    errors = [ln for ln in launcher_lines(proc.stderr) if "cannot reach" in ln]
    assert len(errors) == 1, proc.stderr
    assert "cannot reach 1 of 3 host(s) over ssh: h2 (" in errors[0], errors[0]
    assert "h1" not in errors[0].split("over ssh:")[1].split("; check")[0], errors[0]


def test_all_unreachable_hosts_in_one_error(hosts, dadtrun):
    proc = run([dadtrun, "--gloo", "-np", "3", "-H", "h1:1,nohost-a.invalid:1,nohost-b.invalid:1", "--start-timeout", "10",
                "true"], timeout=60)
    assert proc.returncode >= 2
    errors = [ln for ln in launcher_lines(proc.stderr) if "cannot reach" in ln]
    assert len(errors) == 1, proc.stderr
    assert "cannot reach 2 of 3 host(s)" in errors[0] and "nohost-a.invalid (" in errors[0] \
        and "nohost-b.invalid (" in errors[0], errors[0]


SECRET_PROBE = """
import hashlib, os, sys, time
import dadt.torch as dadt
dadt.init()
if dadt.rank() == 0:
    with open(sys.argv[2], "w") as f:
        f.write(os.environ["DADT_SECRET"] + "\\n" + os.environ["DADT_RENDEZVOUS_ADDR"] + " " +
                os.environ["DADT_RENDEZVOUS_PORT"])
print("READY", flush=True)
time.sleep(300)
"""


def _connects(addr, port):
    try:
        socket.create_connection((addr, port), timeout=2).close()
        return True
    except OSError:
        return False


def test_secret_hidden_and_rendezvous_on_the_chosen_interface(hosts, dadtrun, tmp_path):
    secret_file = tmp_path / "secret"
    proc, marker = _start(dadtrun, tmp_path, SECRET_PROBE, [str(secret_file)], hosts_spec="localhost:1,h2:1,h3:1",
                          np=3)
    try:
        ready = 0
        while ready < 3:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            ready += line.rstrip().endswith(":READY")
        secret, endpoint = secret_file.read_text().split("\n")
        assert len(secret) == 64
        # The rendezvous server listens on the chosen interface only.
        addr, port = endpoint.split()
        assert addr == "10.211.0.1", endpoint
        assert _connects(addr, int(port))
        assert not _connects("127.0.0.1", int(port)), "the rendezvous server also listens on loopback"
        for ns in [None, *HOSTS]:
            cmd = ["ps", "-ef", "--width", "100000"] if ns is None else ["ip", "netns", "exec", ns, "ps", "-ef", "--width", "100000"]
            listing = subprocess.run(cmd, capture_output=True, text=True).stdout
            assert marker in listing, "the job should be visible in the listing"
            assert secret not in listing, f"the job secret is visible in `ps -ef` ({ns or 'root namespace'})"
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        assert secret.encode() not in f.read(), f"secret on the command line of pid {pid}"
                except OSError:
                    pass
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
        _kill_leftovers(marker)
    assert not wait_namespaces_clean(marker)


AWKWARD = ["a b", "it's", 'say "hi"', "$HOME", "${X}", "a;b", "`id`", "$(id)", "", "*", "two\nlines", "tab\tx",
           "back\\slash", "-x", "&&", "|", "!", "~", "#c", "%s", "é ü"]

ECHO_ARGS = """
import json, os, sys
print("ARGS " + json.dumps({"argv": sys.argv[1:], "v": os.environ.get("AWK_V"), "w": os.environ.get("AWK_W"),
                            "cwd": os.getcwd()}), flush=True)
"""


@pytest.mark.parametrize("where", ["localhost:1", "h2:1"])
def test_awkward_arguments_round_trip(hosts, dadtrun, tmp_path, where):
    script = tmp_path / "echo_args.py"
    script.write_text(ECHO_ARGS)
    value = "v a l 'q' \"dq\" $PATH ; `x` \\ \n end"
    workdir = tmp_path / "dir with 'quote' $and space"
    workdir.mkdir()
    env = worker_env(AWK_W="w $x ;'\" y")
    proc = run([dadtrun, "--gloo", "-np", "1", "-H", where, "--network-interface", IFACE, "-x", "AWK_V=" + value,
                "-x", "AWK_W", PY, str(script), *AWKWARD], env=env, cwd=str(workdir), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    payloads = [ln[len("ARGS "):] for ln in rank_lines(proc.stdout) if ln.startswith("ARGS ")]
    assert len(payloads) == 1, proc.stdout
    got = json.loads(payloads[0])
    assert got["argv"] == AWKWARD
    assert got["v"] == value
    assert got["w"] == "w $x ;'\" y"
    assert got["cwd"] == str(workdir)


def test_launcher_errors_are_one_line(hosts, dadtrun, tmp_path):
    bad_hostfile = tmp_path / "hosts"
    bad_hostfile.write_text("h1 slots=2\nh2 slots=lots\n")
    cases = {
        "bad flag": ([dadtrun, "--gloo", "--no-such-flag", "-np", "2", "true"], "unknown flag '--no-such-flag'"),
        "bad hostfile line": ([dadtrun, "--gloo", "-np", "2", "--hostfile", str(bad_hostfile), "true"],
                              f"hostfile '{bad_hostfile}' line 2: the slot count in 'slots=lots' must be a positive"),
        "np over slots": ([dadtrun, "--gloo", "-np", "7", "-H", "h1:2,h2:2,h3:2", "true"],
                          "-np 7 is more than the 6 slots given by -H/--hosts 'h1:2,h2:2,h3:2'; lower -np or add slots"),
        "unknown host": ([dadtrun, "--gloo", "-np", "1", "-H", "no-such-host.invalid:1", "--start-timeout", "5", "true"],
                         "cannot reach 1 of 1 host(s) over ssh: no-such-host.invalid ("),
        "bad -x": ([dadtrun, "--gloo", "-np", "1", "-x", "DADT_NOT_SET_ANYWHERE", "true"],
                   "-x DADT_NOT_SET_ANYWHERE: DADT_NOT_SET_ANYWHERE is not set in dadtrun's environment"),
    }
    for name, (cmd, expected) in cases.items():
        proc = run(cmd, timeout=60)
        assert proc.returncode >= 2, f"{name}: exit {proc.returncode}\n{proc.stderr}"
        errors = [ln for ln in proc.stderr.splitlines()
                  if not ln.startswith("dadtrun: checking ")]
        assert len(errors) == 1, f"{name}: expected one error line, got:\n{proc.stderr}"
        assert expected in errors[0], f"{name}: {errors[0]}"
        assert proc.stdout == "", name


def test_hostfile_config_file_and_output_files(hosts, dadtrun, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two test hosts\nh1 slots=1\nh3 slots=2  # the other\n")
    config = tmp_path / "dadt.yaml"
    outdir = tmp_path / "out"
    config.write_text(f"num_proc: 2\nhostfile: {hostfile}\nnetwork_interface: {IFACE}\n"
                      f"output_filename: {outdir}\nenv:\n  CFG_VALUE: from-config\n")
    probe = "import os; print(os.environ['DADT_HOSTNAME'], os.environ['CFG_VALUE'], os.environ['DADT_LOCAL_RANK'])"
    # -np 3 on the command line overrides num_proc: 2 from the file.
    proc = run([dadtrun, "--gloo", "--config-file", str(config), "-np", "3", PY, "-c", probe], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {r: rank_lines(proc.stdout, rank=r) for r in range(3)}
    assert got == {0: ["h1 from-config 0"], 1: ["h3 from-config 0"], 2: ["h3 from-config 1"]}, proc.stdout
    for r in range(3):
        assert (outdir / f"rank.{r}" / "stdout").read_text() == got[r][0] + "\n"
