"""A stranger on the job's ports. While a job across h3 and h4 starts and while it runs, another process
finds every TCP port that dadtrun or a rank listens on (what `ss -ltnp` shows for the job's pids, read
from /proc/PID/net/tcp and the pids' socket descriptors, every 20 ms so that the short-lived start-up
listeners are seen too) and, on each, opens 50 connections, sends random bytes, and sends frames that
look valid but prove a wrong secret (a rendezvous hello and request, a control-channel hello, and
the rendezvous request of the protocol's first version). The job must finish with the same allreduce
checksum as without the stranger; and each refused connection should be logged at most once per peer
address, which the second test checks.

Three phases, so that a failure says where: from the launch on, on dadtrun's ports only, then on the
ranks' ports only (rank 1 comes to init() 2 s late, which keeps rank 0's start-up listeners open), and
on every port once the job runs.
"""
import os
import random
import re
import socket
import struct
import threading
import time
from collections import Counter

import pytest

from dadt import _rendezvous_wire as wire

STEPS = 60
N = 5000

# argv: MARKER... then "start" (rank 1 comes to init() 2 s late, so that rank 0's start-up listeners
# stay open for the stranger) or "running". Every rank prints READY once init() has returned.
CHECKSUM = f"""
import os, sys, time
import torch
import dadt.torch as dadt
if sys.argv[1] == "start" and os.environ["DADT_RANK"] == "1":
    time.sleep(2)
dadt.init()
print("READY", flush=True)
rank = dadt.rank()
total = 0.0
for step in range({STEPS}):
    x = torch.arange({N}, dtype=torch.float64) * (rank + 1) + step
    total += float(dadt.allreduce(x, name="checksum", op=dadt.Sum).sum())
    time.sleep(0.05)
print("CHECKSUM %.1f" % total, flush=True)
"""


def expected_checksum():
    # sum over steps and elements of (i * 1 + step) + (i * 2 + step)
    return float(sum(3 * i + 2 * step for step in range(STEPS) for i in range(N)))


WRONG_SECRET = "0" * 64


def _frame(payload):
    return struct.pack("<I", len(payload)) + payload


def rendezvous_frames(secret=WRONG_SECRET, key="ready/0"):
    """What a client that knows dadt's rendezvous protocol (runtime/common/rendezvous/protocol.h)
    but not the secret sends: a hello whose proof is made with `secret` for a guessed challenge, then
    a GET; and the GET of the protocol's first version, which carried the secret itself."""
    nonce = os.urandom(wire.NONCE_BYTES)
    hello = bytes([wire.VERSION]) + nonce + wire.proof(secret.encode(), wire.CLIENT_LABEL, b"g" * 32, nonce)
    old = bytes([1, 2]) + struct.pack("<H", len(secret)) + secret.encode() + \
        struct.pack("<H", len(key)) + key.encode() + struct.pack("<I", 0)
    return [_frame(hello) + _frame(wire.encode_request(wire.GET, key)), _frame(old)]


def hello_frame(secret=WRONG_SECRET, rank=1):
    """A control-channel hello (runtime/backends/tcp/tcp_control_transport.cc): the rank, a nonce
    and a proof made with `secret` for a guessed challenge."""
    nonce = os.urandom(32)
    proof = wire.proof(secret.encode(), f"dadt control hello {rank}".encode(), b"g" * 32, nonce)
    return _frame(struct.pack("<I", rank) + nonce + proof)


def _socket_inodes(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def _hex_addr(text):
    addr, port = text.split(":")
    if len(addr) == 8:
        return socket.inet_ntoa(bytes.fromhex(addr)[::-1]), int(port, 16)
    return None, int(port, 16)  # IPv6: not attacked (the job listens on IPv4)


def listeners(pid):
    """[(netns, address, port)] that `pid` listens on."""
    inodes = _socket_inodes(pid)
    if not inodes:
        return []
    try:
        netns = os.readlink(f"/proc/{pid}/ns/net")
        with open(f"/proc/{pid}/net/tcp") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return []
    found = []
    for row in rows:
        cols = row.split()
        if len(cols) > 9 and cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
            addr, port = _hex_addr(cols[1])
            if addr:
                found.append((netns, addr, port))
    return found


def job_pids(job):
    pids = [job.proc.pid]
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if job.marker.encode() in f.read():
                        pids.append(int(name))
            except OSError:
                pass
    return set(pids)


class Stranger:
    """Watches the job's listeners and attacks each one, from this (the root) network namespace."""

    def __init__(self, job, host_addr, targets="all"):
        self.job = job
        self.targets = targets  # "all", "launcher" (dadtrun's ports) or "ranks" (the ranks' ports)
        self.host_addr = host_addr  # netns of a host -> its address, for 0.0.0.0 listeners
        self.seen = {}  # (netns, addr, port) -> target address
        self.attempts = Counter()  # target -> connections made
        self.refused = Counter()  # target -> connections refused at connect
        self.stop = threading.Event()
        self.threads = []

    def run(self):
        while not self.stop.is_set() and self.job.proc.poll() is None:
            pids = job_pids(self.job)
            if self.targets == "launcher":
                pids &= {self.job.proc.pid}
            elif self.targets == "ranks":
                pids -= {self.job.proc.pid}
            for pid in pids:
                for key in listeners(pid):
                    if key not in self.seen:
                        netns, addr, port = key
                        target = (self.host_addr.get(netns, addr) if addr == "0.0.0.0" else addr, port)
                        self.seen[key] = target
                        t = threading.Thread(target=self.attack, args=(target,), daemon=True)
                        t.start()
                        self.threads.append(t)
            time.sleep(0.02)

    def _connect(self, target):
        self.attempts[target] += 1
        try:
            return socket.create_connection(target, timeout=1.0)
        except OSError:
            self.refused[target] += 1
            return None

    def _send_and_close(self, target, data):
        s = self._connect(target)
        if s is None:
            return
        try:
            s.sendall(data)
            s.settimeout(0.3)
            try:
                s.recv(4096)
            except OSError:
                pass
        except OSError:
            pass
        finally:
            s.close()

    def probes(self, target):
        self._send_and_close(target, os.urandom(random.randint(1, 4096)))
        for frames in rendezvous_frames():
            self._send_and_close(target, frames)
        self._send_and_close(target, hello_frame())

    def attack(self, target):
        held = [s for s in (self._connect(target) for _ in range(50)) if s is not None]
        self.probes(target)
        time.sleep(0.5)
        for s in held:
            s.close()
        while not self.stop.is_set() and self.job.proc.poll() is None:  # again, while it still listens
            self.probes(target)
            self.stop.wait(1.0)


_runs = {}


def stranger_run(job, hosts, phase, repeat):
    """The job with a stranger, once per phase and repeat (the tests below read the same run). phase
    "start-launcher": from the launch on, on dadtrun's ports; "start-ranks": from the launch on, on the
    ranks' ports; "running": on every port, once every rank is past init()."""
    if (phase, repeat) in _runs:
        return _runs[(phase, repeat)]
    from conftest import ADDR, worker_env
    host_addr = {}
    for h in hosts:  # which network namespace is which host: the netns of each host's sshd
        with open(f"/run/dadt-netns/sshd_{h}.pid") as f:
            host_addr[os.readlink(f"/proc/{int(f.read())}/ns/net")] = ADDR[h]
    # At debug level every handshake is logged (dadtrun's store, each rank's pairs, rank 0's star).
    job.start(CHECKSUM, args=("start" if phase.startswith("start") else "running",),
              env=dict(worker_env(), DADT_LOG_LEVEL="debug"))
    stranger = Stranger(job, host_addr, {"start-launcher": "launcher", "start-ranks": "ranks"}.get(phase, "all"))
    watcher = threading.Thread(target=stranger.run, daemon=True)
    try:
        if phase == "running":
            job.wait_line(r"^\[0\]<stdout>:READY", timeout=60)
            job.wait_line(r"^\[1\]<stdout>:READY", timeout=30)
        watcher.start()
        rc = job.wait(120)
    finally:
        stranger.stop.set()
        if watcher.is_alive():
            watcher.join(10)
        for t in stranger.threads:
            t.join(10)
    _runs[(phase, repeat)] = (rc, job.stdout, job.stderr, stranger)
    return _runs[(phase, repeat)]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("phase", ["start-launcher", "start-ranks", "running"])
def test_stranger_leaves_the_job_unchanged(job, hosts, phase, repeat):
    rc, out, err, stranger = stranger_run(job, hosts, phase, repeat)
    print(f"stranger ({phase}): listeners {sorted(set(stranger.seen.values()))}; connections "
          f"{dict(stranger.attempts)}; refused at connect {dict(stranger.refused)}")
    assert stranger.seen, "the stranger found no port of the job to connect to"
    assert rc == 0, f"the job failed with a stranger on its ports ({phase}):\n{out[-3000:]}\n{err[-3000:]}"
    sums = re.findall(r"^\[(\d)\]<stdout>:CHECKSUM (\S+)$", out, re.M)
    assert sorted(sums) == [("0", "%.1f" % expected_checksum()), ("1", "%.1f" % expected_checksum())], out[-3000:]


# The warnings only: at debug level the later refusals of an address are logged too, as debug lines.
REFUSAL = re.compile(r"\[dadt warning\].*(rendezvous server: (?:closing|refusing) connection from "
                     r"(\d+\.\d+\.\d+\.\d+):\d+.*)$")


@pytest.mark.timeout(150)
def test_stranger_refusals_logged_once_per_peer(job, hosts, repeat):
    """Every connection the stranger makes to the running job comes from one address (this host's on
    the bridge); issue 33 asks for one log line per refused peer address, not one per connection."""
    rc, out, err, stranger = stranger_run(job, hosts, "running", repeat)
    per_peer = Counter(m.group(2) for line in err.splitlines() for m in [REFUSAL.search(line)] if m)
    examples = sorted({REFUSAL.search(line).group(1) for line in err.splitlines() if REFUSAL.search(line)})[:3]
    print(f"refusals logged per peer address: {dict(per_peer)}; connections made {sum(stranger.attempts.values())}")
    noisy = {peer: n for peer, n in per_peer.items() if n > 1}
    assert not noisy, (f"refused connections logged more than once per peer address: {noisy} "
                       f"(dadtrun/rendezvous_server.cc, RendezvousServer::Reject / Drop), e.g. {examples}")


@pytest.mark.timeout(150)
def test_every_connection_the_job_used_proved_the_secret(job, hosts, repeat):
    """The handshake, in the log of the job the stranger attacked: dadtrun's store heard a proof from
    every connection it served, each rank's Gloo pair and rank 0's control star were proved before use."""
    rc, out, err, stranger = stranger_run(job, hosts, "running", repeat)
    text = out + err
    store = re.findall(r"rendezvous server: \S+ proved the job secret", text)
    pairs = set(re.findall(r"\[(\d)\]<stderr>:.*gloo: 1 pair\(s\) of rank (\d) proved the job secret", text))
    star = re.findall(r"\[0\]<stderr>:.*control channel: 1 rank\(s\) proved the job secret", text)
    print(f"handshakes logged: store {len(store)}, Gloo pairs {sorted(pairs)}, control star {len(star)}")
    assert rc == 0
    assert len(store) >= 2, f"dadtrun's store logged {len(store)} proofs for 2 ranks:\n{err[-3000:]}"
    assert pairs == {("0", "0"), ("1", "1")}, f"each rank's pair proved: {pairs}\n{text[-3000:]}"
    assert len(star) == 1, text[-3000:]
