#!/usr/bin/env bash
# Runs a command with network-namespace hosts (tools/netns_hosts.sh) joined by a shaped link:
# every packet towards a host leaves the bridge through a tc `tbf` qdisc on that host's veth, so
# each host receives at most RATE. The benchmarks that run across hosts start through it
# (time_to_accuracy.sh, and real_models.py as below); the command gets HOSTLIST (e.g. h1:1,h2:1)
# and RATE in its environment and runs on this host, its launcher reaching the hosts over ssh.
#
#   sudo RATE=1gbit examples/benchmarks/shaped_hosts.sh python3 examples/benchmarks/real_models.py \
#       --np 2 --hosts h1:1,h2:1 --network-interface dadt0 --link-mb-per-s 117
#   sudo HOSTS=4 RATE=100mbit examples/benchmarks/shaped_hosts.sh <command>
#
# Environment: RATE (1gbit; e.g. 100mbit, 10gbit), BURST (256kb), LATENCY (10ms: the tbf queue's
# bound), HOSTS (2: h1:1,h2:1; 3: h1..h3; 4: h1..h4, one rank each, the fourth namespace host made
# by tools/netns_hosts.sh with DADT_NETNS_HOSTS=4; HOSTLIST overrides the list). Hosts it had to
# create are removed at the end; the shaping is always removed (trap), also on Ctrl-C or failure.
# Needs root, ip(8), tc(8) and sshd (tools/install_deps.sh installs them).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RATE="${RATE:-1gbit}"
BURST="${BURST:-256kb}"
LATENCY="${LATENCY:-10ms}"
HOSTS="${HOSTS:-2}"
NETNS="$ROOT/tools/netns_hosts.sh"
me=$(basename "$0")

[ $# -gt 0 ] || { echo "$me: give the command to run" >&2; exit 2; }
case "$HOSTS" in
    2) DEFAULT_LIST=h1:1,h2:1 ;;
    3) DEFAULT_LIST=h1:1,h2:1,h3:1 ;;
    4) DEFAULT_LIST=h1:1,h2:1,h3:1,h4:1; export DADT_NETNS_HOSTS=4 ;;
    *) echo "$me: HOSTS must be 2, 3 or 4 (or set HOSTLIST)" >&2; exit 2 ;;
esac
HOSTLIST="${HOSTLIST:-$DEFAULT_LIST}"
USED=$(tr ',' '\n' <<<"$HOSTLIST" | cut -d: -f1 | sort -u)
DEVS=()
for h in $USED; do DEVS+=("dadt-$h"); done

[ "$(id -u)" -eq 0 ] || { echo "$me: must run as root (namespaces, tc)" >&2; exit 2; }
command -v tc >/dev/null || { echo "$me: tc(8) not found; install iproute2" >&2; exit 2; }

created=0
status=$(bash "$NETNS" status)
for h in $USED; do
    if ! grep -Eq "^$h .*namespace=present sshd=running" <<<"$status"; then
        grep -q 'namespace=present' <<<"$status" || created=1
        bash "$NETNS" up
        break
    fi
done

cleanup() {
    local dev
    for dev in "${DEVS[@]}"; do tc qdisc del dev "$dev" root 2>/dev/null || true; done
    if [ "$created" -eq 1 ]; then bash "$NETNS" down || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for dev in "${DEVS[@]}"; do
    tc qdisc replace dev "$dev" root tbf rate "$RATE" burst "$BURST" latency "$LATENCY"
done
echo "shaping: $(tc qdisc show dev "${DEVS[0]}" | head -1) (on ${DEVS[*]})"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
export HOSTLIST RATE
"$@"
