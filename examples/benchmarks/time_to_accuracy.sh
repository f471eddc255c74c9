#!/usr/bin/env bash
# time_to_accuracy.py over a shaped link between network-namespace hosts (tools/netns_hosts.sh):
# every packet towards a host leaves the bridge through a tc `tbf` qdisc on that host's veth, so
# each host receives at most RATE. Runs the benchmark under
# `dadtrun -H <hosts> --network-interface dadt0` and prints its tables.
#
#   sudo examples/benchmarks/time_to_accuracy.sh                          # 2 hosts, 1gbit
#   sudo RATE=100mbit examples/benchmarks/time_to_accuracy.sh --rounds 3 --json run.json --plot run.png
#   sudo HOSTS=4 RATE=100mbit examples/benchmarks/time_to_accuracy.sh --samples 8192
#
# Environment: PYTHON (python3), and shaped_hosts.sh's, which sets up the hosts and the link: RATE
# (1gbit; e.g. 100mbit), BURST, LATENCY, HOSTS (2, 3 or 4), HOSTLIST. Extra options go to
# time_to_accuracy.py (its --link is set from RATE).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHON="${PYTHON:-python3}" RATE="${RATE:-1gbit}"
# shellcheck disable=SC2016  # expanded by the inner shell, after shaped_hosts.sh set HOSTLIST
exec bash "$ROOT/examples/benchmarks/shaped_hosts.sh" bash -c \
    '"$PYTHON" "$0/examples/benchmarks/time_to_accuracy.py" --hosts "$HOSTLIST" --network-interface dadt0 --link "$RATE" "$@"' \
    "$ROOT" "$@"
