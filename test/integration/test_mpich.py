"""MPICH and Intel MPI: plain Hydra launches (`mpiexec -n 2 python3 train.py`, Intel MPI's
`mpirun -np 2 -ppn 2 -hosts localhost python3 train.py`) run dadt's ranks on its MPICH-ABI build
(dadt/_mpich/_core.so over the launcher's libmpi.so.12), with the launcher's rank, local rank and
size; and a launcher/ABI mismatch fails loudly on every rank instead of training as 1-rank jobs.

MPICH is Debian's (mpich, libmpich-dev: /usr/bin/mpiexec.mpich; the default `mpirun` stays Open
MPI's), Intel MPI the runtime from PyPI (impi-rt) that tools/install_deps.sh installs into its own
prefix, /opt/dadt/impi (DADT_IMPI_ROOT, or I_MPI_ROOT, points elsewhere). Each test skips, saying
which, only where that MPI is not installed.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import PY, REPO, worker_env

DIGITS = os.path.join(REPO, "examples", "pytorch", "train_digits.py")
# Where tools/install_deps.sh puts Intel MPI's runtime (requirements-impi.txt).
DEFAULT_IMPI_ROOT = "/opt/dadt/impi"


def mpich_mpiexec():
    """Debian's MPICH launcher (mpiexec.mpich; plain `mpiexec` is Open MPI's alternative)."""
    for name in ("mpiexec.mpich", "mpirun.mpich"):
        path = shutil.which(name)
        if path:
            return path
    return None


def impi_root():
    """The prefix of an Intel MPI runtime (bin/mpirun, bin/impi_info, lib/libmpi.so.12), or None."""
    for root in (os.environ.get("DADT_IMPI_ROOT"), os.environ.get("I_MPI_ROOT"), DEFAULT_IMPI_ROOT, sys.prefix):
        if root and all(os.path.exists(os.path.join(root, p))
                        for p in ("bin/mpirun", "bin/impi_info", "lib/libmpi.so.12")):
            return root
    return None


MPIEXEC = mpich_mpiexec()
IMPI = impi_root()
needs_mpich = pytest.mark.skipif(
    MPIEXEC is None, reason="MPICH is not installed (apt-get install mpich libmpich-dev; tools/install_deps.sh does)")
needs_impi = pytest.mark.skipif(
    IMPI is None, reason="Intel MPI is not installed (tools/install_deps.sh puts impi-rt in %s; or set "
                         "DADT_IMPI_ROOT)" % DEFAULT_IMPI_ROOT)


def hydra_env(name="mpich", **extra):
    """The workers' environment, one compute thread per rank (2 ranks on 2 cores). For Intel MPI its
    bin/ comes first on PATH, as its vars.sh (or an activated virtualenv holding impi-rt) does: its
    mpirun script starts `mpiexec.hydra` from PATH, and /usr/bin has MPICH's of that name."""
    env = {k: v for k, v in worker_env(**extra).items() if not k.startswith(("OMPI_", "PMIX_", "I_MPI_"))}
    env.setdefault("OMP_NUM_THREADS", "1")
    if name == "impi":
        env["PATH"] = os.path.join(IMPI, "bin") + os.pathsep + env.get("PATH", "")
    return env


# The seed command lines: MPICH's from its guide, Intel MPI's from the DADT paper.
def mpich_cmd(*argv):
    return [MPIEXEC, "-n", "2", *argv]


def impi_cmd(*argv):
    return [os.path.join(IMPI, "bin", "mpirun"), "-np", "2", "-ppn", "2", "-hosts", "localhost", *argv]


LAUNCHERS = [
    pytest.param("mpich", mpich_cmd, marks=needs_mpich, id="mpich"),
    pytest.param("impi", impi_cmd, marks=needs_impi, id="intel-mpi"),
]


def run(argv, env, timeout=240):
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=REPO)


ALLREDUCE = """
import os
import torch
import dadt
import dadt.torch as hvd
hvd.init()
r, n = hvd.rank(), hvd.size()
ok = True
for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.uint8):
    for count in (0, 1, 3, 1000, 65537):  # 0, 1, not divisible by the ranks, and one of 256 KiB
        x = (torch.arange(count) % 7 + r + 1).to(dtype)
        got = hvd.allreduce(x, op=hvd.Sum, name="sum.%s.%d" % (dtype, count))
        want = sum((torch.arange(count) % 7 + k + 1).to(dtype) for k in range(n)) if count else x
        ok = ok and torch.equal(got, want)
avg = hvd.allreduce(torch.full((5,), float(r)), name="avg")
ok = ok and torch.allclose(avg, torch.full((5,), (n - 1) / 2))
gathered = hvd.allgather(torch.tensor([r]), name="who")
ok = ok and gathered.tolist() == list(range(n))
abi, library, version = dadt._mpi_abi.chosen
# One write per line: the two ranks share the launcher's stdout, and print() writes the text and
# the newline separately when unbuffered.
os.write(1, ("rank %d size %d local %d %d pmi %s %s localid %s ok %s mpi %s abi %s library %s version %s end\\n" % (
    r, n, hvd.local_rank(), hvd.local_size(), os.environ.get("PMI_RANK"), os.environ.get("PMI_SIZE"),
    os.environ.get("MPI_LOCALRANKID"), ok, hvd.mpi_enabled(), abi, library, "_".join(version.split()))).encode())
hvd.shutdown()
"""

LINE = re.compile(r"rank (\d) size (\d) local (\d) (\d) pmi (\S+) (\S+) localid (\S+) ok (\S+) mpi (\S+) "
                  r"abi (\S+) library (\S+) version (\S+?) end")


@pytest.mark.parametrize("name,cmd", LAUNCHERS)
def test_allreduce_and_geometry_under_hydra(tmp_path, name, cmd):
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    proc = run(cmd(PY, str(script)), hydra_env(name))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = {}
    for m in LINE.finditer(proc.stdout):
        seen[int(m.group(1))] = m.groups()
    assert sorted(seen) == [0, 1], proc.stdout
    for rank, g in seen.items():
        # dadt's geometry is the launcher's: PMI_RANK/PMI_SIZE/MPI_LOCALRANKID.
        assert g[1:4] == ("2", str(rank), "2"), g
        assert g[4:7] == (str(rank), "2", str(rank)), g
        assert g[7] == "True" and g[8] == "True", g  # the sums; MPI as controller and data plane
        assert g[9] == "mpich", g  # dadt/_mpich/_core.so
        if name == "impi":
            assert g[10].startswith(IMPI), g  # Intel MPI's own libmpi.so.12, beside its launcher
            assert "Intel" in g[11], g
        else:
            assert g[10] == "libmpich.so.12" and "MPICH" in g[11], g


@pytest.mark.parametrize("name,cmd", LAUNCHERS)
def test_train_digits_seed_command(name, cmd):
    # `python3` as the user types it: this interpreter's, first on PATH.
    env = hydra_env(name, PATH=os.path.dirname(PY) + os.pathsep + os.environ.get("PATH", ""))
    proc = run(cmd("python3", DIGITS, "--epochs", "12"), env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    epochs = re.findall(r"^epoch \d+ loss \d+\.\d{4} accuracy [01]\.\d{4}$", proc.stdout, re.M)
    assert len(epochs) == 12, proc.stdout[-3000:]  # rank 0 prints, once per epoch
    m = re.findall(r"^final test accuracy: ([01]\.\d{4})$", proc.stdout, re.M)
    assert len(m) == 1, proc.stdout[-3000:]
    assert float(m[0]) >= 0.90, (name, m[0])


MISMATCH = "import dadt.torch as hvd; hvd.init(); print('trained as rank', hvd.rank(), 'of', hvd.size())"


@needs_mpich
def test_open_mpi_build_under_hydra_fails_on_every_rank():
    """DADT_MPI_ABI=openmpi under MPICH's launcher: the Open MPI build would come up as two
    1-rank jobs; instead init() refuses on each rank, naming the launcher and the build."""
    proc = run(mpich_cmd(PY, "-c", MISMATCH), hydra_env(DADT_MPI_ABI="openmpi"), timeout=120)
    assert proc.returncode != 0
    assert "trained as rank" not in proc.stdout, proc.stdout
    out = proc.stdout + proc.stderr
    assert out.count("started by a Hydra launcher") == 2, out[-3000:]
    assert "PMI_RANK=0, PMI_SIZE=2" in out and "PMI_RANK=1, PMI_SIZE=2" in out, out[-3000:]
    assert "built for Open MPI" in out, out[-3000:]


@needs_mpich
def test_missing_mpich_library_fails_on_every_rank():
    proc = run(mpich_cmd(PY, "-c", MISMATCH), hydra_env(DADT_MPI_LIBRARY="/nonexistent/libmpi.so.12"),
               timeout=120)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert out.count("needs an MPICH-ABI MPI library (libmpi.so.12)") == 2, out[-3000:]
    assert "/nonexistent/libmpi.so.12" in out and "apt-get install libmpich12" in out, out[-3000:]


@needs_mpich
def test_mpich_build_under_open_mpi_fails_on_every_rank():
    mpirun = shutil.which("mpirun.openmpi")
    if mpirun is None:
        pytest.skip("Open MPI's mpirun.openmpi is not installed")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    argv = [mpirun, *root, "--oversubscribe", "-np", "2", PY, "-c", MISMATCH]
    proc = run(argv, worker_env(DADT_MPI_ABI="mpich"), timeout=120)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "trained as rank" not in out, out[-3000:]
    assert out.count("started by Open MPI's mpirun") == 2, out[-3000:]
