#!/usr/bin/env bash
# A real Slurm cluster on this machine, for the Slurm integration tests: slurmctld in the root network
# namespace and one slurmd per network namespace sn1..snN, each with its own host name, /dev/shm, spool
# and TmpFS, and a private munged. No sshd runs in these namespaces: jobs reach the nodes only
# through Slurm.
#
#   tools/slurm_cluster.sh up       bring it up (NODES=2, CPUS=4 per node by default); prints the
#                                   SLURM_CONF to export
#   tools/slurm_cluster.sh down     cancel every job, stop the daemons by recorded pid, remove the
#                                   namespaces, the bridge and the /etc/hosts lines (idempotent)
#   tools/slurm_cluster.sh status   sinfo, or "down"
#
# Layout: bridge "dslurm0" 10.212.0.1/24 in the root namespace, where slurmctld runs under host name
# "snctl"; node snI has address 10.212.0.1I on its "eth0", and no default route (nothing leaves the
# subnet). Client commands need `export SLURM_CONF=/tmp/dadt-slurm/etc/slurm.conf` (printed by `up`)
# and /usr/sbin on PATH for the daemons. Needs root and Debian's slurmctld, slurmd, slurm-client and
# munge (tools/install_deps.sh). Bring-up takes about 2 s, teardown about 3 s.
#
# Why each odd line is there (found making it work; Slurm 22.05):
#  - `ip netns exec` remounts /sys and hides /sys/fs/cgroup, and slurmd then dies ("Unable to
#    initialize cgroup plugin"): nodes are entered with nsenter, and sysfs is remounted with the
#    cgroup mount moved back.
#  - slurmctld has no -N: its host name must match SlurmctldHost, so it runs under `unshare --uts`.
#  - The nodes share one filesystem: spool, pid file and TmpFS are per node through a bind mount of
#    node/<name> on nodedir/ in each node's mount namespace (PMIx otherwise fails with "File exists").
#  - SlurmdParameters=config_overrides: the nodes share this machine's cores; without it they drain
#    ("Low CPUs").
#  - munged needs its socket directory world-executable and its key 0600; a system munged is left
#    alone (AuthInfo=socket=... points Slurm at ours).
#  - batch_sched_delay=0: sbatch jobs start in under a second.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin

STATE=${DADT_SLURM_STATE:-/tmp/dadt-slurm}
NODES=${NODES:-2}
CPUS=${CPUS:-4}
NET=10.212.0
BRIDGE=dslurm0
CTL=snctl
MARK="# dadt-slurm"
CONF=$STATE/etc/slurm.conf

log() { echo "[slurm_cluster] $*"; }
die() { echo "[slurm_cluster] error: $*" >&2; exit 1; }

require() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces and the Slurm daemons need it)"
    local c
    for c in slurmctld slurmd srun sinfo munged nsenter unshare ip; do
        command -v "$c" >/dev/null || die "$c not found; run tools/install_deps.sh (slurmctld slurmd slurm-client munge)"
    done
}

# A pid recorded by `up` that is still one of our daemons.
ours() { case "$(cat /proc/"$1"/comm 2>/dev/null)" in munged | slurmctld | slurmd) return 0 ;; esac; return 1; }

write_conf() {
    cat > "$CONF" <<EOF
ClusterName=dadtslurm
SlurmctldHost=$CTL($NET.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/sock/munge.socket
StateSaveLocation=$STATE/state
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdSpoolDir=$STATE/nodedir/spool
TmpFS=$STATE/nodedir/tmp
SlurmdPidFile=$STATE/nodedir/slurmd.pid
SlurmdLogFile=$STATE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=2
MinJobAge=60
SlurmctldDebug=info
SlurmdDebug=info
EOF
    local i
    for i in $(seq 1 "$NODES"); do
        echo "NodeName=sn$i NodeAddr=$NET.1$i CPUs=$CPUS RealMemory=2000 State=UNKNOWN"
    done >> "$CONF"
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$CONF"
}

up() {
    require
    [ -e "$STATE" ] && die "$STATE exists: run '$0 down' first"
    mkdir -p "$STATE"/{etc,state,log,run,node,nodedir}
    mkdir -p -m 700 "$STATE/munge" && mkdir -p -m 755 "$STATE/munge/sock"
    chmod 711 "$STATE/munge"
    chmod 755 "$STATE"
    dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
    chmod 600 "$STATE/munge/munge.key"
    munged --socket="$STATE/munge/sock/munge.socket" --key-file="$STATE/munge/munge.key" \
        --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/munged.seed"
    cat "$STATE/munge/munged.pid" > "$STATE/run/munged.bgpid"

    ip link add "$BRIDGE" type bridge
    ip addr add "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    local i n
    for i in $(seq 1 "$NODES"); do
        n=sn$i
        echo "$n" >> "$STATE/run/netns.list"
        ip netns add "$n"
        ip link add "veth-$n" type veth peer name eth0 netns "$n"
        ip link set "veth-$n" master "$BRIDGE" up
        ip -n "$n" addr add "$NET.1$i/24" dev eth0
        ip -n "$n" link set eth0 up
        ip -n "$n" link set lo up
        mkdir -p "$STATE/node/$n"/{spool,tmp,cg}
    done
    # In place (not a rename): /etc/hosts may be a bind mount.
    {
        echo "$NET.1 $CTL $MARK"
        for i in $(seq 1 "$NODES"); do echo "$NET.1$i sn$i $MARK"; done
    } >> /etc/hosts
    write_conf
    export SLURM_CONF=$CONF
    # setsid: the daemons survive a process-group kill of the caller; $! stays the daemon's pid.
    setsid unshare --uts sh -c "hostname $CTL; exec slurmctld -D -f $CONF" > "$STATE/log/slurmctld.out" 2>&1 &
    echo $! > "$STATE/run/slurmctld.bgpid"
    for i in $(seq 1 "$NODES"); do
        n=sn$i
        setsid nsenter --net=/run/netns/$n unshare --uts --mount --propagation private sh -c "
            hostname $n; mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm
            mount --rbind /sys/fs/cgroup $STATE/node/$n/cg; mount -t sysfs sysfs /sys
            mount --move $STATE/node/$n/cg /sys/fs/cgroup
            mount --bind $STATE/node/$n $STATE/nodedir
            exec slurmd -D -N $n -f $CONF" > "$STATE/log/slurmd-$n.out" 2>&1 &
        echo $! > "$STATE/run/slurmd-$n.bgpid"
    done
    local t st
    for t in $(seq 1 60); do
        st=$(sinfo -h -N -o '%T' 2>/dev/null | sort -u | tr '\n' ' ')
        if [ "$st" = "idle " ] && [ "$(sinfo -h -N -o %N | wc -l)" = "$NODES" ]; then
            log "up: $NODES nodes idle. export SLURM_CONF=$CONF"
            return 0
        fi
        sleep 0.5
    done
    tail -n 20 "$STATE"/log/*.out >&2 || true
    die "the cluster did not come up (node states: $st); '$0 down' cleans up"
}

down() {
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    export SLURM_CONF=$CONF
    if [ -f "$CONF" ] && [ -f "$STATE/run/slurmctld.bgpid" ] && ours "$(cat "$STATE/run/slurmctld.bgpid")"; then
        local ids i
        ids=$(timeout 5 squeue -h -o %i 2>/dev/null || true)
        [ -n "$ids" ] && timeout 10 scancel --quiet $ids || true
        for i in $(seq 20); do
            [ -z "$(timeout 5 squeue -h 2>/dev/null || true)" ] && break
            sleep 0.5
        done
    fi
    local f p alive i
    for f in "$STATE"/run/*.bgpid; do
        [ -f "$f" ] || continue
        p=$(cat "$f")
        ours "$p" && kill -TERM "$p" || true
    done
    for i in $(seq 20); do
        alive=0
        for f in "$STATE"/run/*.bgpid; do [ -f "$f" ] && ours "$(cat "$f")" && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.5
    done
    for f in "$STATE"/run/*.bgpid; do
        [ -f "$f" ] || continue
        p=$(cat "$f")
        ours "$p" && kill -KILL "$p" || true
    done
    # Anything left inside the node namespaces (a stray slurmstepd or task).
    local ns pids
    for ns in $(cat "$STATE/run/netns.list" 2>/dev/null); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
    done
    sleep 0.3
    for ns in $(cat "$STATE/run/netns.list" 2>/dev/null); do
        ip netns del "$ns" 2>/dev/null || true
        ip link del "veth-$ns" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    if grep -q "$MARK\$" /etc/hosts 2>/dev/null; then
        local kept
        kept=$(grep -v "$MARK\$" /etc/hosts)
        printf '%s\n' "$kept" > /etc/hosts
    fi
    rm -rf "$STATE"
    log "down"
}

status() {
    if [ -f "$CONF" ]; then SLURM_CONF=$CONF sinfo -N; else echo "down"; fi
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
