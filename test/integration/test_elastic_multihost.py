"""The elastic driver across the network-namespace hosts h1, h2, h3 (tools/netns_hosts.sh), with real ssh:
workers are test/integration/elastic/fake_worker.py on every host, so only the launcher is under test. A
SIGKILLed worker on h2 gives a new round on h1 and h3; a fatal end (the reset limit) leaves no process of the
job on any host. Skipped, with the reason, where namespaces cannot be made (test_multihost.py's rules).
About 15 s.
"""
import os
import signal
import subprocess

import pytest

from test_elastic_driver import ElasticJob
from test_multihost import HOSTS, IFACE, NETNS, _why_no_namespaces, wait_namespaces_clean


def _namespaces_up():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return all(any(line.split()[0] == h for line in out.splitlines() if line.strip()) for h in HOSTS)


@pytest.fixture(scope="module")
def netns_hosts():
    why = _why_no_namespaces()
    if why:
        pytest.skip(why)
    were_up = _namespaces_up()  # another module's (or engineer's) hosts: leave them as found
    up = subprocess.run(["bash", NETNS, "up"], capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        pytest.fail(f"tools/netns_hosts.sh up failed:\n{up.stdout}\n{up.stderr}")
    yield HOSTS
    if not were_up:
        subprocess.run(["bash", NETNS, "down"], capture_output=True, text=True, timeout=120)


@pytest.fixture
def ejob(dadtrun, tmp_path):
    j = ElasticJob(dadtrun, tmp_path)
    yield j
    j.cleanup()


def test_killed_remote_worker_gives_a_round_without_its_host(netns_hosts, ejob):
    ejob.start("-np", "3", "--min-np", "2", "-H", "h1:1,h2:1,h3:1", "--network-interface", IFACE)
    ejob.wait_for("err", r"^dadtrun: elastic: round 1: 3 workers on h1, h2, h3$", timeout=60)
    assert ejob.wait_assigned("h1/0/1", 1)[0] == "0 3 0 1 0 3"
    _, victim = ejob.wait_assigned("h2/0/2", 1)
    os.kill(victim, signal.SIGKILL)
    ejob.wait_for("err", r"^dadtrun: elastic: host h2 lost: rank 1 \(worker h2/0/2\) killed by SIGKILL$")
    ejob.wait_for("err", r"^dadtrun: elastic: round 2: 2 workers on h1, h3 \(reset 1\)$")
    assert ejob.wait_assigned("h1/0/1", 2)[0] == "0 2 0 1 0 2"
    assert ejob.wait_assigned("h3/0/3", 2)[0] == "1 2 0 1 1 2"
    ejob.finish()
    assert ejob.wait_exit(60) == 0, ejob.dump()
    left = wait_namespaces_clean(ejob.marker)
    assert not left, f"processes left on the hosts: {left}"


def test_fatal_end_leaves_nothing_on_any_host(netns_hosts, ejob):
    ejob.start("-np", "3", "--min-np", "1", "--reset-limit", "0", "-H", "h1:1,h2:1,h3:1", "--network-interface", IFACE)
    ejob.wait_for("err", r"round 1: 3 workers", timeout=60)
    for wid in ("h1/0/1", "h3/0/3"):
        ejob.wait_assigned(wid, 1)
    _, victim = ejob.wait_assigned("h2/0/2", 1)
    os.kill(victim, signal.SIGKILL)
    assert ejob.wait_exit(60) == 1, ejob.dump()
    ejob.wait_for("err", r"reset limit reached: the job needs reset 1 but --reset-limit is 0; stopping")
    left = wait_namespaces_clean(ejob.marker, seconds=10)
    assert not left, f"processes left on the hosts: {left}"
    ejob.assert_nothing_left()
