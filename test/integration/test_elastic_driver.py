"""dadtrun's elastic driver end to end, without the runtime: workers are test/integration/elastic/fake_worker.py,
which speaks only the launcher <-> worker contract (docs/elastic.md) through the rendezvous store.

Three local "hosts" (localhost, 127.0.0.1 and this machine's name: three host names dadtrun starts locally)
stand in for machines. Each test reads dadtrun's progress lines and the workers' ASSIGN/REMOVED/NOTICE lines
as they come, acts (kills a worker, rewrites the discovery script's host list), and checks that nothing of the
job is left running at the end. About 40 s in all.
"""
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import PY, pids_matching, wait_no_process, worker_env

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic", "fake_worker.py")
H1, H2, H3 = "localhost", "127.0.0.1", socket.gethostname()
LINE = re.compile(r"^\[([^\]]+)\]<stdout>:(.*)$")


class ElasticJob:
    def __init__(self, dadtrun, tmp_path):
        self.dadtrun = dadtrun
        self.tmp = tmp_path
        self.control = tmp_path / "control"
        self.control.mkdir()
        self.marker = "dadt-elastic-" + os.urandom(6).hex()
        self.out, self.err = [], []
        self.lock = threading.Lock()
        self.proc = None

    def start(self, *flags, command=None, env=None):
        """dadtrun FLAGS COMMAND; COMMAND is the fake worker unless given (then it must carry self.marker)."""
        cmd = [self.dadtrun, *flags, *(command or [PY, WORKER, self.marker, str(self.control)])]
        self.proc = subprocess.Popen(cmd, env=env or worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, stdin=subprocess.DEVNULL, start_new_session=True)
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    def _pump(self, stream, sink):
        for line in stream:
            with self.lock:
                sink.append(line.rstrip("\n"))

    def dump(self):
        with self.lock:
            return "stdout:\n" + "\n".join(self.out[-60:]) + "\nstderr:\n" + "\n".join(self.err[-60:])

    def worker_lines(self, kind):
        """[(worker id, fields after the kind)] of the workers' KIND lines, in order."""
        with self.lock:
            lines = list(self.out)
        found = []
        for line in lines:
            m = LINE.match(line)
            if m and m.group(2).startswith(kind + " "):
                found.append((m.group(1), m.group(2).split()[1:]))
        return found

    def wait_for(self, what, pattern, timeout=30):
        """Waits until a line of `what` ("err": dadtrun's own, "out": the workers') matches; returns the match."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while time.monotonic() < deadline:
            with self.lock:
                lines = list(self.err if what == "err" else self.out)
            for line in lines:
                m = rx.search(line)
                if m:
                    return m
            if self.proc.poll() is not None and time.monotonic() > deadline - timeout + 1:
                time.sleep(0.3)  # let the pumps take the last lines
                with self.lock:
                    lines = list(self.err if what == "err" else self.out)
                for line in lines:
                    if rx.search(line):
                        return rx.search(line)
                pytest.fail(f"dadtrun exited ({self.proc.returncode}) before {pattern!r}\n{self.dump()}")
            time.sleep(0.05)
        pytest.fail(f"no line matching {pattern!r} within {timeout} s\n{self.dump()}")

    def assignment(self, worker_id, round_no):
        for wid, f in self.worker_lines("ASSIGN"):
            if wid == worker_id and int(f[1]) == round_no:
                return " ".join(f[2:8]), int(f[8])
        pytest.fail(f"no ASSIGN of {worker_id} in round {round_no}\n{self.dump()}")

    def wait_assigned(self, worker_id, round_no, timeout=30):
        self.wait_for("out", rf"^\[{re.escape(worker_id)}\]<stdout>:ASSIGN \S+ {round_no} ", timeout)
        return self.assignment(worker_id, round_no)

    def finish(self):
        (self.control / "finish").write_text("")

    def wait_exit(self, timeout=30):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"dadtrun still running after {timeout} s\n{self.dump()}")

    def assert_nothing_left(self):
        left = wait_no_process(self.marker, seconds=5.0)
        assert not left, f"processes of the job still running: {left}\n{self.dump()}"

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in pids_matching(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def ejob(dadtrun, tmp_path):
    if H3 in (H1, H2):
        pytest.skip(f"this machine's host name is {H3!r}: no third local host name")
    j = ElasticJob(dadtrun, tmp_path)
    yield j
    j.cleanup()


def discovery(tmp_path, hosts):
    """A discovery script that prints tmp_path/hosts.txt and fails while tmp_path/fail exists."""
    listing = tmp_path / "hosts.txt"
    listing.write_text("".join(h + "\n" for h in hosts))
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\nif [ -e {tmp_path}/fail ]; then echo 'scheduler unreachable' >&2; exit 4; fi\n"
                      f"cat {listing}\n")
    script.chmod(0o755)
    return str(script), listing


def test_fixed_hosts_start_at_min_np_and_replace_a_killed_worker(ejob):
    ejob.start("--min-np", "2", "--max-np", "2", "-H", f"{H1}:1,{H2}:1,{H3}:1")
    ejob.wait_for("err", rf"^dadtrun: elastic: round 1: 2 workers on {H1}, {H2}$")
    assert ejob.wait_assigned(f"{H1}/0/1", 1)[0] == "0 2 0 1 0 2"
    _, victim = ejob.wait_assigned(f"{H2}/0/2", 1)
    assert ejob.assignment(f"{H2}/0/2", 1)[0] == "1 2 0 1 1 2"
    os.kill(victim, signal.SIGKILL)
    ejob.wait_for("err", rf"^dadtrun: elastic: host {H2} lost: rank 1 \(worker {H2}/0/2\) killed by SIGKILL$")
    ejob.wait_for("err", rf"^dadtrun: elastic: host {H2} blacklisted for the rest of the job")
    ejob.wait_for("err", rf"^dadtrun: elastic: round 2: 2 workers on {H1}, {H3} \(reset 1\)$")
    # The survivor keeps rank 0; the replacement on the third host is a new worker (new id).
    assert ejob.wait_assigned(f"{H1}/0/1", 2)[0] == "0 2 0 1 0 2"
    assert ejob.wait_assigned(f"{H3}/0/3", 2)[0] == "1 2 0 1 1 2"
    ejob.finish()
    assert ejob.wait_exit() == 0, ejob.dump()
    ejob.assert_nothing_left()
    assert not ejob.worker_lines("BADENV")


def test_discovery_adds_and_drops_hosts_with_notices(ejob, tmp_path):
    script, listing = discovery(tmp_path, [f"{H1}:1"])
    ejob.start("--min-np", "1", "--host-discovery-script", script)
    ejob.wait_for("err", rf"^dadtrun: elastic: round 1: 1 worker on {H1}$")
    ejob.wait_assigned(f"{H1}/0/1", 1)
    # A failing run later is logged and retried; the job goes on with the last list.
    (tmp_path / "fail").write_text("")
    ejob.wait_for("err", r"host discovery script '.*' exited with code 4 \(its last stderr line: 'scheduler "
                         r"unreachable'\); keeping the last host list and retrying every second")
    (tmp_path / "fail").unlink()
    ejob.wait_for("err", r"host discovery script works again")
    listing.write_text(f"{H1}:1\n{H2}:2\n")
    ejob.wait_for("err", rf"^dadtrun: elastic: host {H2} added \(2 slots\)$")
    ejob.wait_for("err", rf"^dadtrun: elastic: round 2: 3 workers on {H1}, {H2} \(reset 1\)$")
    ejob.wait_for("out", rf"^\[{H1}/0/1\]<stdout>:NOTICE {H1}/0/1 1 added$")
    assert ejob.wait_assigned(f"{H1}/0/1", 2)[0] == "0 3 0 1 0 2"
    assert ejob.wait_assigned(f"{H2}/0/2", 2)[0] == "1 3 0 2 1 2"
    assert ejob.wait_assigned(f"{H2}/1/3", 2)[0] == "2 3 1 2 0 1"
    # The script stops listing H2: its workers are removed (exit 0), the job goes on without them.
    listing.write_text(f"{H1}:1\n")
    ejob.wait_for("err", rf"^dadtrun: elastic: host {H2} removed \(no longer listed\)$")
    ejob.wait_for("out", rf"^\[{H2}/0/2\]<stdout>:REMOVED {H2}/0/2 3$")
    ejob.wait_for("out", rf"^\[{H2}/1/3\]<stdout>:REMOVED {H2}/1/3 3$")
    ejob.wait_for("out", rf"^\[{H1}/0/1\]<stdout>:NOTICE {H1}/0/1 2 removed$")
    assert ejob.wait_assigned(f"{H1}/0/1", 3)[0] == "0 1 0 1 0 1"
    time.sleep(1.0)
    assert ejob.proc.poll() is None, "a removed worker's exit 0 ended the job\n" + ejob.dump()
    ejob.finish()
    assert ejob.wait_exit() == 0, ejob.dump()
    ejob.assert_nothing_left()


def test_below_min_np_past_elastic_timeout_ends_the_job(ejob):
    ejob.start("-np", "2", "--min-np", "2", "--elastic-timeout", "3", "-H", f"{H1}:1,{H2}:1")
    ejob.wait_for("err", r"round 1: 2 workers")
    _, victim = ejob.wait_assigned(f"{H2}/0/2", 1)
    os.kill(victim, signal.SIGKILL)
    ejob.wait_for("err", r"^dadtrun: elastic: waiting for 2 slots \(have 1, need --min-np 2\); giving up in [23] s$")
    assert ejob.wait_exit() == 1, ejob.dump()
    ejob.wait_for("err", r"^dadtrun: elastic: elastic timeout: waited 3 s \(--elastic-timeout\) with 1 usable "
                         r"slot\(s\), fewer than --min-np 2; stopping$")
    ejob.assert_nothing_left()  # the survivor was stopped too


def test_reset_limit_ends_the_job_naming_the_limit(ejob):
    ejob.start("--min-np", "1", "--max-np", "2", "--reset-limit", "1", "-H", f"{H1}:1,{H2}:1,{H3}:1")
    ejob.wait_for("err", r"round 1: 2 workers")
    _, victim = ejob.wait_assigned(f"{H2}/0/2", 1)
    os.kill(victim, signal.SIGKILL)
    ejob.wait_for("err", rf"^dadtrun: elastic: round 2: 2 workers on {H1}, {H3} \(reset 1 of limit 1\)$")
    _, victim = ejob.wait_assigned(f"{H3}/0/3", 2)
    os.kill(victim, signal.SIGTERM)
    assert ejob.wait_exit() == 1, ejob.dump()
    ejob.wait_for("err", r"^dadtrun: elastic: reset limit reached: the job needs reset 2 but --reset-limit is 1; "
                         r"stopping$")
    ejob.assert_nothing_left()


def test_blacklisted_host_is_used_again_after_its_cooldown(ejob):
    ejob.start("--min-np", "1", "--blacklist-cooldown-range", "2", "4", "-H", f"{H1}:1,{H2}:1")
    ejob.wait_for("err", r"round 1: 2 workers")
    _, victim = ejob.wait_assigned(f"{H2}/0/2", 1)
    os.kill(victim, signal.SIGKILL)
    ejob.wait_for("err", rf"^dadtrun: elastic: host {H2} blacklisted until \d\d:\d\d:\d\d \(cooldown 2 s\)$")
    ejob.wait_for("err", rf"^dadtrun: elastic: round 2: 1 worker on {H1} \(reset 1\)$")
    ejob.wait_for("err", rf"^dadtrun: elastic: host {H2} added \(1 slot\)$", timeout=10)
    ejob.wait_for("err", rf"^dadtrun: elastic: round 3: 2 workers on {H1}, {H2} \(reset 2\)$")
    ejob.wait_for("out", rf"^\[{H1}/0/1\]<stdout>:NOTICE {H1}/0/1 1 added$")
    assert ejob.wait_assigned(f"{H2}/0/3", 3)[0] == "1 2 0 1 1 2"
    ejob.finish()
    assert ejob.wait_exit() == 0, ejob.dump()
    ejob.assert_nothing_left()


def test_failing_first_discovery_run_fails_the_launch(dadtrun, tmp_path):
    proc = subprocess.run([dadtrun, "-np", "1", "--host-discovery-script", "echo nope >&2; exit 2", PY, "-c", "0"],
                          env=worker_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert ("dadtrun: host discovery script 'echo nope >&2; exit 2' exited with code 2 (its last stderr line: "
            "'nope') on its first run; not starting the job") in proc.stderr.splitlines(), proc.stderr


def test_hosts_beside_a_discovery_script_are_ignored_as_horovodrun_does(dadtrun, tmp_path):
    """Horovod's elastic command lines give -H with --host-discovery-script: dadtrun takes the pair, says
    that -H is ignored, and asks the script (here one that fails, so the test ends at once)."""
    proc = subprocess.run([dadtrun, "-np", "1", "-H", "nowhere:4", "--host-discovery-script", "echo nope >&2; exit 2",
                           PY, "-c", "0"], env=worker_env(), capture_output=True, text=True, timeout=60)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1, proc.stderr
    assert lines[0] == ("dadtrun: -H/--hostfile ignored: --host-discovery-script names the hosts of an elastic job "
                        "(as with horovodrun)"), proc.stderr
    assert any("host discovery script 'echo nope >&2; exit 2' exited with code 2" in line for line in lines), proc.stderr
    assert "nowhere" not in proc.stderr


def test_mpi_is_refused_for_elastic_jobs(dadtrun):
    proc = subprocess.run([dadtrun, "--mpi", "-np", "2", "--min-np", "1", PY, "-c", "0"], env=worker_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "dadtrun: elastic training needs --gloo: MPI cannot change the size of its world"


def test_signal_to_dadtrun_stops_every_worker(ejob):
    ejob.start("--min-np", "1", "-H", f"{H1}:2,{H2}:1")
    ejob.wait_for("err", r"round 1: 3 workers")
    for wid in (f"{H1}/0/1", f"{H1}/1/2", f"{H2}/0/3"):
        ejob.wait_assigned(wid, 1)
    ejob.proc.send_signal(signal.SIGTERM)
    assert ejob.wait_exit() == 128 + signal.SIGTERM, ejob.dump()
    ejob.wait_for("err", r"^dadtrun: received SIGTERM; forwarding it to 3 worker\(s\)$")
    ejob.assert_nothing_left()


def test_remote_host_added_to_a_loopback_job_is_refused_clearly(ejob, tmp_path):
    script, listing = discovery(tmp_path, [f"{H1}:1"])
    ejob.start("--min-np", "1", "--host-discovery-script", script)
    ejob.wait_assigned(f"{H1}/0/1", 1)
    listing.write_text(f"{H1}:1\nfar-away-host:1\n")
    ejob.wait_for("err", r"^dadtrun: elastic: cannot start worker far-away-host/0/2: host far-away-host cannot reach "
                         r"the rendezvous server, which listens on 127.0.0.1 .* start dadtrun with --network-interface "
                         r"IFACE when the discovery script may add other hosts; host far-away-host blacklisted")
    ejob.finish()
    assert ejob.wait_exit() == 0, ejob.dump()
    ejob.assert_nothing_left()


def test_one_failed_slot_rests_alone_and_comes_back(ejob):
    ejob.start("--min-np", "1", "--blacklist-cooldown-range", "1", "8", "-H", f"{H1}:2")
    ejob.wait_for("err", rf"round 1: 2 workers on {H1}$")
    _, victim = ejob.wait_assigned(f"{H1}/1/2", 1)
    os.kill(victim, signal.SIGKILL)
    ejob.wait_for("err", rf"^dadtrun: elastic: rank 1 \(worker {H1}/1/2\) on host {H1} lost: killed by SIGKILL; "
                         rf"slot {H1}:1 rests until \d\d:\d\d:\d\d \(cooldown 1 s\)$")
    # The host's other slot keeps its worker: no blacklisting.
    ejob.wait_for("err", rf"^dadtrun: elastic: round 2: 1 worker on {H1} \(reset 1\)$")
    assert ejob.wait_assigned(f"{H1}/0/1", 2)[0] == "0 1 0 1 0 1"
    ejob.wait_for("err", rf"^dadtrun: elastic: slot {H1}:1 usable again \(its rest is over\)$", timeout=10)
    ejob.wait_for("err", rf"^dadtrun: elastic: round 3: 2 workers on {H1} \(reset 2\)$")
    assert ejob.wait_assigned(f"{H1}/1/3", 3)[0] == "1 2 1 2 0 1"
    with ejob.lock:
        assert not any("blacklisted" in line for line in ejob.err), ejob.dump()
    ejob.finish()
    assert ejob.wait_exit() == 0, ejob.dump()
    ejob.assert_nothing_left()
