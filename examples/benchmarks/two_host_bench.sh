#!/usr/bin/env bash
# The training-modes table on two hosts joined by a slow link (docs/performance.md, "The training modes on a 10.5M-parameter MLP"; its sessions in docs/benchmarks/log.md):
# network namespaces h1 and h2 from tools/netns_hosts.sh, 1 rank each, every packet between them
# through a tc `tbf` qdisc on both veths (the egress towards each host), so each direction of the
# link is limited to RATE. Runs collectives_bench.py (all-gather, reduce-scatter and allreduce on
# the link), then train_bench.py (sync, async, dear and torch DDP interleaved, several launches),
# both under `dadtrun -H h1:1,h2:1 --network-interface dadt0`, and prints their tables.
#
#   sudo examples/benchmarks/two_host_bench.sh                   # the documented run
#   sudo examples/benchmarks/two_host_bench.sh --rounds 5        # extra options go to train_bench.py
#
# Environment: REALTIME (1: DADT_REALTIME_THREADS for the ranks), PYTHON (the interpreter with
# dadt installed; default: python3), DADTRUN (default: beside $PYTHON, else PATH), and
# shaped_hosts.sh's, which sets up the hosts and the link: RATE (1gbit), BURST, LATENCY. Hosts it
# had to create are removed at the end; the shaping is always removed, also on Ctrl-C or failure.
# Needs root, ip(8), tc(8) and sshd (tools/install_deps.sh installs them).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
# One rank per host and per core: the communication threads may run real-time
# (docs/backends.md, "Real-time threads"). REALTIME=0 measures without.
DADT_ARGS="-x DADT_REALTIME_THREADS=${REALTIME:-1}"

# First the hosts and the shaped link (shaped_hosts.sh), which then runs this script again inside.
if [ "${1:-}" != "--on-shaped-hosts" ]; then
    export PYTHON RATE="${RATE:-1gbit}" HOSTS=2
    exec bash "$ROOT/examples/benchmarks/shaped_hosts.sh" bash "${BASH_SOURCE[0]}" --on-shaped-hosts "$@"
fi
shift

# What the link carries: one TCP stream h1 -> h2 for ~100 MB (payload rate, MB/s).
LINK_MBPS=$(
    ip netns exec h2 "$PYTHON" - <<'PY' &
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.211.0.12", 5999)); s.listen(1); s.settimeout(30)
c, _ = s.accept(); got = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    got += len(b)
PY
    sleep 0.5
    ip netns exec h1 "$PYTHON" - <<'PY'
import socket, time
c = socket.create_connection(("10.211.0.12", 5999), timeout=30); buf = b"x" * (1 << 20)
t = time.perf_counter()
for _ in range(100): c.sendall(buf)
c.shutdown(socket.SHUT_WR); c.recv(1)
print("%.1f" % (100 * (1 << 20) / (time.perf_counter() - t) / 1e6))
PY
    wait
)
echo "link h1 -> h2: $LINK_MBPS MB/s (one TCP stream)"

# The collectives the modes are made of, on this link: 44 MB as tensors of 1 to 44 MB.
echo
"$PYTHON" "$ROOT/examples/benchmarks/collectives_bench.py" --np 2 \
    --dadtrun-args "-H h1:1,h2:1 --network-interface dadt0 $DADT_ARGS"
echo

# ~10M parameters (10 hidden Linear layers of width 1024 = 42 MB of fp32 gradients) and a batch
# of 240 per rank, so that one step's computation (about 240 ms) is of the order of one ring
# allreduce of the gradients over the link (about 360 ms), the regime these modes are for (the
# table's header states both). Every mode is timed in steady state (train_bench.py's banner).
"$PYTHON" "$ROOT/examples/benchmarks/train_bench.py" --np 2 --model mlp --layers 10 --width 1024 \
    --batch-size 240 --rounds 3 --chunks 4 --steps 4 --warmup-steps 2 --link-mb-per-s "$LINK_MBPS" \
    --dadtrun-args "-H h1:1,h2:1 --network-interface dadt0 $DADT_ARGS" "$@"
