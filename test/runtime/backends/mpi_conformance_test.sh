#!/usr/bin/env bash
# Runs an MPI test binary (the conformance suite: sizes 1..4 each get their own
# sub-communicator; the controller transport test) under mpirun with 4 processes. Root needs
# --allow-run-as-root; 4 ranks on fewer cores need --oversubscribe.
set -euo pipefail
bin="$1"
command -v mpirun >/dev/null || { echo "mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
# Under --config=asan: Open MPI's own allocations are left out of LeakSanitizer's report (the file
# says which and why); dadt's are still reported. No effect on an uninstrumented build.
supp="$PWD/tools/sanitizers/lsan_openmpi.supp"
[ -f "$supp" ] && export LSAN_OPTIONS="suppressions=$supp:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
exec timeout -k 10 600 mpirun "${root[@]}" --oversubscribe --bind-to none -np 4 \
    --mca btl self,vader "$bin"
