#!/usr/bin/env bash
# Runs the MPI conformance suite built for the MPICH ABI under MPICH's Hydra launcher with 4
# processes (the Open MPI build runs under mpirun: mpi_conformance_test.sh). Debian's MPICH
# installs its launcher as mpiexec.mpich; plain `mpiexec` stays Open MPI's. Skips (exit 0, saying
# so) where MPICH is not installed: tools/install_deps.sh installs it.
set -euo pipefail
bin="$1"
mpiexec="$(command -v mpiexec.mpich || true)"
if [ -z "$mpiexec" ]; then
    echo "SKIPPED: mpiexec.mpich not found (apt-get install mpich libmpich-dev)" >&2
    exit 0
fi
# Under --config=asan: MPICH's own allocations in MPI_Init are left out of LeakSanitizer's report
# (the file says which); dadt's are still reported. No effect on an uninstrumented build.
supp="$PWD/tools/sanitizers/lsan_mpich.supp"
[ -f "$supp" ] && export LSAN_OPTIONS="suppressions=$supp:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# Debian's MPICH runs over UCX, whose memory hooks (libucm) intercept the madvise of an exiting
# thread and take a lock there; under --config=tsan that lock lands in ThreadSanitizer's state of a
# finished thread and the process segfaults at exit after every test passed. The hooks serve UCX's
# registration cache for network transfers, unused by 4 ranks on one host: off, in every build.
export UCX_MEM_EVENTS="${UCX_MEM_EVENTS:-no}"
exec timeout -k 10 600 "$mpiexec" -n 4 "$bin"
