#!/usr/bin/env bash
# Installs what dadt needs to build and test on Debian 12, and only what is missing (idempotent):
#   * Debian packages, checked one by one with `dpkg -s`; `apt-get update` runs only when one is missing;
#   * Python packages from requirements-test.txt (torch pinned to 2.13.0, the CPU build) plus the build
#     tools (setuptools, wheel), for the interpreter in $PYTHON (default python3), and where nvcc is
#     found requirements-cuda.txt (the NCCL wheel of the CUDA build);
#   * Intel MPI's runtime (requirements-impi.txt) into a prefix of its own, $DADT_IMPI_ROOT
#     (default /opt/dadt/impi), so that its mpirun shadows nothing;
#   * Open MPI kept as the default `mpirun`/`mpicc` (update-alternatives) next to MPICH.
# Runs as root; otherwise through sudo. Non-interactive (CI has no stdin).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"

APT_PACKAGES=(
    bazel-bootstrap g++ make
    libgloo-dev libcli11-dev nlohmann-json3-dev pybind11-dev libgtest-dev libdlpack-dev libeigen3-dev
    libyaml-cpp-dev libssl-dev   # libssl-dev: HMAC for the keyed handshakes (runtime/common/auth)
    libopenmpi-dev openmpi-bin
    mpich libmpich-dev   # the MPICH-ABI build of the MPI engine (dadt/_mpich/_core.so) and its tests
    openssh-client openssh-server iproute2 procps
    iptables   # the chaos tier's packet loss and partitions inside the namespace hosts (test/chaos)
    libnetfilter-queue-dev   # netfilterqueue (requirements-test.txt): the chaos tier's delay without netem
    slurmctld slurmd slurm-client munge   # the Slurm tests (tools/slurm_cluster.sh); apt starts no daemon here
    clang libclang-rt-14-dev   # the fuzz target (tools/run_fuzz.sh): Debian 12's clang 14 and its libFuzzer
)

log() { echo "[install_deps] $*"; }
# Up to 3 tries, for a mirror or index that fails once.
retry() {
    local i
    for i in 1 2 3; do
        "$@" && return 0
        [ "$i" -lt 3 ] && { log "failed (try $i of 3), retrying in 10 s: $*"; sleep 10; }
    done
    return 1
}

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)   # -n: fail instead of prompting when there is no terminal
else
    echo "[install_deps] error: not root and sudo is not installed" >&2
    exit 1
fi

# ---- Debian packages --------------------------------------------------------------------------
is_installed() { dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed$'; }

# A Debian-provided interpreter needs its headers (python3-dev) and pip from Debian too.
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    APT_PACKAGES+=(python3 python3-dev python3-pip python3-venv)
else
    case "$("$PYTHON" -c 'import sys; print(sys.executable)')" in
        /usr/bin/*)
            "$PYTHON" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
                || APT_PACKAGES+=(python3-dev)
            "$PYTHON" -m pip --version >/dev/null 2>&1 || APT_PACKAGES+=(python3-pip)
            ;;
    esac
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    is_installed "$pkg" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "apt: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    retry "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    retry "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"
else
    log "apt: all ${#APT_PACKAGES[@]} packages present"
fi

# MPICH's packages register their mpirun/mpicc as alternatives (priority 40, Open MPI's 50), so the
# automatic choice stays Open MPI; a machine set by hand to MPICH would run every other test's
# `mpirun` under MPICH, so Open MPI is set back explicitly.
keep_open_mpi() {
    local name="$1" want="$2" now
    [ -e "$want" ] || return 0
    now="$(update-alternatives --query "$name" 2>/dev/null | sed -n 's/^Value: //p')"
    [ "$now" = "$want" ] && return 0
    # Automatic mode first (it picks Open MPI by priority); pinned by hand where it does not.
    "${SUDO[@]}" update-alternatives --auto "$name" >/dev/null
    [ "$(update-alternatives --query "$name" 2>/dev/null | sed -n 's/^Value: //p')" = "$want" ] \
        || "${SUDO[@]}" update-alternatives --set "$name" "$want" >/dev/null
    log "update-alternatives: $name -> $want (was ${now:-unset})"
}
keep_open_mpi mpirun /usr/bin/mpirun.openmpi
keep_open_mpi mpi /usr/bin/mpicc.openmpi
keep_open_mpi mpi-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openmpi/include

# ---- Python packages ----------------------------------------------------------------------------
PIP=("$PYTHON" -m pip --no-input)
# Debian's own python3 is marked externally managed (PEP 668); CI installs into it as root on purpose.
if "$PYTHON" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))' 2>/dev/null; then
    export PIP_BREAK_SYSTEM_PACKAGES=1
fi
if [ "$(id -u)" -ne 0 ] && [ ! -w "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" ]; then
    PIP=("${SUDO[@]}" "${PIP[@]}")
fi

# Requirements not yet satisfied by what is installed (no network needed when all are present).
# Where nvcc is found, the CUDA/NCCL build's pinned wheels too (requirements-cuda.txt).
REQUIREMENTS=("$ROOT/requirements-test.txt")
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    log "nvcc found: adding requirements-cuda.txt (NCCL for the CUDA build)"
    REQUIREMENTS+=("$ROOT/requirements-cuda.txt")
fi
unsatisfied="$("$PYTHON" - "${REQUIREMENTS[@]}" <<'EOF'
import sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement

reqs = ["setuptools>=64", "wheel"]
for path in sys.argv[1:]:
    with open(path) as f:
        reqs += [l.split("#", 1)[0].strip() for l in f if l.split("#", 1)[0].strip()]
for line in reqs:
    req = Requirement(line)
    try:
        have = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        print(line)
        continue
    # ==2.13.0 accepts the local build 2.13.0+cpu (PEP 440).
    if req.specifier and not req.specifier.contains(have, prereleases=True):
        print(line)
        continue
    # ray[train]: the extra's own packages too (pandas, pyarrow), not only ray itself.
    for extra in req.extras:
        for dep in map(Requirement, metadata.requires(req.name) or []):
            if dep.marker is None or not dep.marker.evaluate({"extra": extra}):
                continue
            try:
                metadata.version(dep.name)
            except metadata.PackageNotFoundError:
                print(line)
                break
        else:
            continue
        break
EOF
)"
pip_missing=()
[ -z "$unsatisfied" ] || mapfile -t pip_missing <<<"$unsatisfied"
if [ "${#pip_missing[@]}" -gt 0 ]; then
    log "pip: installing ${pip_missing[*]}"
    retry "${PIP[@]}" install "${pip_missing[@]}"
else
    log "pip: all requirements present"
fi

# Intel MPI's runtime in its own prefix (requirements-impi.txt says why not beside this Python).
IMPI_ROOT="${DADT_IMPI_ROOT:-/opt/dadt/impi}"
impi_pin="$(sed -n 's/^impi-rt==\([^ #]*\).*/\1/p' "$ROOT/requirements-impi.txt")"
if compgen -G "$IMPI_ROOT/lib/python*/site-packages/impi_rt-$impi_pin.dist-info" >/dev/null \
        && [ -e "$IMPI_ROOT/lib/libmpi.so.12" ]; then
    log "pip: Intel MPI $impi_pin present in $IMPI_ROOT"
else
    log "pip: installing Intel MPI runtime $impi_pin into $IMPI_ROOT"
    retry "${PIP[@]}" install --no-deps --ignore-installed --prefix "$IMPI_ROOT" -r "$ROOT/requirements-impi.txt"
fi

# Fail here, not halfway through a build, if torch is not the pinned one.
"$PYTHON" -c 'import torch, sys; v = torch.__version__.split("+")[0]; sys.exit(0 if v == "2.13.0" else "torch %s installed, 2.13.0 required" % v)'
log "done"
