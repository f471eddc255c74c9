"""A stand-in for an elastic dadt worker that speaks only the launcher <-> worker contract
(docs/elastic.md), so the driver is tested without the runtime.

    python fake_worker.py MARKER CONTROL_DIR

It follows the rounds dadtrun publishes: whenever elastic/round passes the last round it ran in and
it has an assignment there, it prints `ASSIGN <id> <round> <rank> <size> <local_rank> <local_size>
<cross_rank> <cross_size> <pid>`; a `removed` assignment prints `REMOVED <id> <round>` and exits 0
(what the Python `run` wrapper does); each new elastic/notice prints `NOTICE <id> <seq> <kind>`.
The test steers it through files in CONTROL_DIR: `finish` makes every worker exit 0 once it is in the
latest round; `exit-<id with / as _>` holding a number makes that worker exit with it.
"""
import os
import socket
import sys
import time

from dadt import _rendezvous_wire as wire


class Store:
    """The rendezvous protocol (runtime/common/rendezvous/protocol.h) over one TCP connection."""

    def __init__(self, addr, port, secret):
        self.sock = socket.create_connection((addr, int(port)), timeout=30)
        wire.handshake(self.sock, secret.encode(), "%s:%s" % (addr, port))

    def _call(self, op, key, value=b""):
        wire.send_frame(self.sock, wire.encode_request(op, key, value))
        status, answer = wire.decode_response(wire.read_frame(self.sock))
        if status not in (wire.OK, wire.NOT_FOUND):
            raise RuntimeError(f"store answered status {status} for {key!r}")
        return answer.decode() if status == wire.OK else None

    def get(self, key):
        return self._call(wire.GET, key)

    def set(self, key, value):
        self._call(wire.SET, key, value.encode())


def main():
    control = sys.argv[2]
    env = os.environ
    for name in ("DADT_RANK", "DADT_SIZE", "DADT_LOCAL_RANK", "DADT_CROSS_RANK", "RANK", "WORLD_SIZE"):
        if name in env:
            print(f"BADENV {name} is set", flush=True)
            return 3
    wid = env["DADT_ELASTIC_WORKER_ID"]
    assert env["DADT_ELASTIC"] == "1" and int(env["DADT_ELASTIC_TIMEOUT"]) > 0, env
    store = Store(env["DADT_RENDEZVOUS_ADDR"], env["DADT_RENDEZVOUS_PORT"], env["DADT_SECRET"])
    last_round, skipped, notice, current = 0, 0, "0", None
    exit_file = os.path.join(control, "exit-" + wid.replace("/", "_"))
    while True:
        latest = int(store.get("elastic/round") or 0)
        if latest > max(last_round, skipped):
            value = store.get(f"elastic/round/{latest}/assign/{wid}")
            if value == "removed":
                print(f"REMOVED {wid} {latest}", flush=True)
                return 0
            if value is None:
                skipped = latest  # spawned for a later round, or not in this one: wait
            else:
                last_round = current = latest
                print(f"ASSIGN {wid} {latest} {value} {os.getpid()}", flush=True)
        seen = store.get("elastic/notice") or "0"
        if seen != notice:
            notice = seen
            print(f"NOTICE {wid} {seen} {store.get('elastic/notice/' + seen)}", flush=True)
        if os.path.exists(exit_file):
            with open(exit_file) as f:
                return int(f.read().strip())
        if current is not None and current == latest and os.path.exists(os.path.join(control, "finish")):
            print(f"FINISH {wid} {current}", flush=True)
            return 0
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
