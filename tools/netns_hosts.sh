#!/usr/bin/env bash
# Three test "hosts" on this machine: network namespaces h1, h2, h3, each with its own sshd, joined
# by veth pairs to a bridge in the root namespace. The multi-host integration tests launch across
# them with `dadtrun -H h1:2,h2:2,h3:2 --network-interface dadt0 ...`. DADT_NETNS_HOSTS=N (1 to 9)
# makes h1..hN instead (benchmarks over four hosts); `down` removes every hN there is.
#
#   tools/netns_hosts.sh up               create everything (idempotent; re-running repairs)
#   tools/netns_hosts.sh down             remove everything it created (idempotent)
#   tools/netns_hosts.sh stop-sshd h2     stop one host's sshd (a host that cannot be reached)
#   tools/netns_hosts.sh start-sshd h2    start it again
#   tools/netns_hosts.sh status           print what exists
#
# Layout: bridge "dadt0" 10.211.0.1/24 in the root namespace; in namespace hN the interface is also
# named "dadt0", address 10.211.0.1N. Every interface carrying job traffic has the same name, so one
# --network-interface works on every host. Namespaces share the filesystem, so the installed dadt
# and python are visible in each.
#
# ssh: a key pair and one host key under $STATE (generated on first `up`), an authorized_keys with
# that key (root login by key only), /etc/hosts lines for h1..h3 and an ssh_config drop-in
# (/etc/ssh/ssh_config.d/dadt-netns-hosts.conf) that points ssh at the key and a known_hosts file,
# so `ssh h1 true` works with no options, as on a set-up cluster. Needs root, ip(8) and sshd.
set -euo pipefail

COUNT="${DADT_NETNS_HOSTS:-3}"
case "$COUNT" in
    [1-9]) ;;
    *) echo "[netns_hosts] error: DADT_NETNS_HOSTS must be a number of hosts from 1 to 9, got '$COUNT'" >&2; exit 2 ;;
esac
HOSTS=()
for i in $(seq "$COUNT"); do HOSTS+=("h$i"); done
ANY_HOST=(h1 h2 h3 h4 h5 h6 h7 h8 h9)  # what `down` looks for, whatever count made them
BRIDGE=dadt0
NET=10.211.0
STATE=/run/dadt-netns
SSH_DROPIN=/etc/ssh/ssh_config.d/dadt-netns-hosts.conf
HOSTS_BEGIN="# dadt-netns-hosts begin"
HOSTS_END="# dadt-netns-hosts end"

log() { echo "[netns_hosts] $*"; }
die() { echo "[netns_hosts] error: $*" >&2; exit 1; }

addr_of() { echo "$NET.1${1#h}"; }   # h2 -> 10.211.0.12

require() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces and sshd need it)"
    command -v ip >/dev/null || die "ip(8) not found; install iproute2"
    [ -x /usr/sbin/sshd ] || die "/usr/sbin/sshd not found; install openssh-server"
    command -v ssh-keygen >/dev/null || die "ssh-keygen not found; install openssh-client"
}

ns_exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

make_keys() {
    mkdir -p "$STATE"
    chmod 700 "$STATE"
    [ -f "$STATE/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C dadt-netns-client -f "$STATE/id_ed25519"
    [ -f "$STATE/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C dadt-netns-host -f "$STATE/host_ed25519"
    cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"
    chmod 600 "$STATE/authorized_keys" "$STATE/id_ed25519" "$STATE/host_ed25519"
    : > "$STATE/known_hosts"
    local h
    for h in "${HOSTS[@]}"; do
        echo "$h,$(addr_of "$h") $(cut -d' ' -f1,2 "$STATE/host_ed25519.pub")" >> "$STATE/known_hosts"
    done
}

write_client_config() {
    mkdir -p "$(dirname "$SSH_DROPIN")"
    cat > "$SSH_DROPIN" <<EOF
# Written by dadt's tools/netns_hosts.sh; removed by 'tools/netns_hosts.sh down'.
Host ${HOSTS[*]}
    User root
    IdentityFile $STATE/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $STATE/known_hosts
    StrictHostKeyChecking yes
EOF
    remove_etc_hosts
    {
        echo "$HOSTS_BEGIN"
        local h
        for h in "${HOSTS[@]}"; do echo "$(addr_of "$h") $h"; done
        echo "$HOSTS_END"
    } >> /etc/hosts
}

remove_etc_hosts() {
    # In place (not a rename): /etc/hosts may be a bind mount.
    if grep -qF "$HOSTS_BEGIN" /etc/hosts 2>/dev/null; then
        local kept
        kept=$(sed "/^$HOSTS_BEGIN\$/,/^$HOSTS_END\$/d" /etc/hosts)
        printf '%s\n' "$kept" > /etc/hosts
    fi
}

write_sshd_config() {
    local h=$1 pam=no
    # Without PAM, sshd refuses key logins to an account whose password is locked ('!' in
    # /etc/shadow, as on some images); with PAM it does not look at the password.
    if getent shadow root 2>/dev/null | cut -d: -f2 | grep -q '^!'; then pam=yes; fi
    cat > "$STATE/sshd_$h.conf" <<EOF
ListenAddress $(addr_of "$h")
Port 22
HostKey $STATE/host_ed25519
PidFile $STATE/sshd_$h.pid
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM $pam
StrictModes no
X11Forwarding no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 100
EOF
}

sshd_running() {
    local pidfile="$STATE/sshd_$1.pid"
    [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

start_sshd() {
    local h=$1
    ns_exists "$h" || die "namespace $h does not exist; run '$0 up' first"
    sshd_running "$h" && return 0
    mkdir -p /run/sshd
    write_sshd_config "$h"
    # Like a separate machine, each host gets its own host name and its own /dev/shm (MPI's shared
    # memory transport names its segments by host; hosts sharing one /dev/shm would collide).
    ip netns exec "$h" unshare --uts --mount --propagation private /bin/sh -c \
        'hostname "$1" && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec /usr/sbin/sshd -f "$2" -E "$3"' \
        sh "$h" "$STATE/sshd_$h.conf" "$STATE/sshd_$h.log"
    local i
    for i in $(seq 50); do
        sshd_running "$h" && return 0
        sleep 0.1
    done
    die "sshd in namespace $h did not start; see $STATE/sshd_$h.log"
}

stop_sshd() {
    local h=$1 pidfile="$STATE/sshd_$1.pid"
    if sshd_running "$h"; then
        local pid
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        local i
        for i in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    rm -f "$pidfile"
}

up() {
    require
    make_keys
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
    fi
    ip addr replace "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    local h
    for h in "${HOSTS[@]}"; do
        ns_exists "$h" || ip netns add "$h"
        ip netns exec "$h" ip link set lo up
        if ! ip link show "dadt-$h" >/dev/null 2>&1; then
            ip link add "dadt-$h" type veth peer name "dadt-$h-in"
            ip link set "dadt-$h-in" netns "$h"
            ip netns exec "$h" ip link set "dadt-$h-in" name "$BRIDGE"
        fi
        ip link set "dadt-$h" master "$BRIDGE"
        ip link set "dadt-$h" up
        ip netns exec "$h" ip addr replace "$(addr_of "$h")/24" dev "$BRIDGE"
        ip netns exec "$h" ip link set "$BRIDGE" up
        ip netns exec "$h" ip route replace default via "$NET.1" dev "$BRIDGE"
    done
    write_client_config
    for h in "${HOSTS[@]}"; do start_sshd "$h"; done
    # Each host answers over ssh before we call it up.
    for h in "${HOSTS[@]}"; do
        local ok=0 i
        for i in $(seq 50); do
            if ssh -o BatchMode=yes -o ConnectTimeout=2 "$h" true </dev/null 2>/dev/null; then ok=1; break; fi
            sleep 0.2
        done
        [ "$ok" -eq 1 ] || die "ssh $h true fails; see $STATE/sshd_$h.log"
    done
    log "up: ${HOSTS[*]} reachable over ssh (bridge $BRIDGE $NET.1/24)"
}

down() {
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    local h removed=()
    for h in "${ANY_HOST[@]}"; do
        ns_exists "$h" || ip link show "dadt-$h" >/dev/null 2>&1 || [ -f "$STATE/sshd_$h.pid" ] || continue
        removed+=("$h")
        stop_sshd "$h"
        if ns_exists "$h"; then
            # Anything still running in the namespace (a leaked rank) goes with it.
            local pids
            pids=$(ip netns pids "$h" 2>/dev/null || true)
            [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
            ip netns del "$h"
        fi
        ip link del "dadt-$h" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    rm -f "$SSH_DROPIN"
    remove_etc_hosts
    rm -rf "$STATE"
    log "down: removed ${removed[*]:-nothing}"
}

status() {
    local h
    for h in "${HOSTS[@]}"; do
        local ns=absent sshd=stopped
        ns_exists "$h" && ns=present
        sshd_running "$h" && sshd=running
        echo "$h $(addr_of "$h") namespace=$ns sshd=$sshd"
    done
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    stop-sshd) require; stop_sshd "${2:?host name}" ;;
    start-sshd) require; start_sshd "${2:?host name}" ;;
    status) status ;;
    *) echo "usage: $0 up|down|status|stop-sshd HOST|start-sshd HOST" >&2; exit 2 ;;
esac
