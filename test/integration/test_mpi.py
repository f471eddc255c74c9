"""MPI: dadtrun --mpi, plain mpirun, init(comm=...) on mpi4py sub-communicators, --check-build, the
automatic controller choice, hierarchical allreduce on pretend hosts, and loud failures under mpirun.

Open MPI (openmpi-bin) and mpi4py come from tools/install_deps.sh and requirements-test.txt; as root,
mpirun needs --allow-run-as-root, and more ranks than cores need --oversubscribe.
"""
import os
import re
import shutil
import subprocess

import pytest

from conftest import PY, REPO, wait_no_process, worker_env

MPIRUN = shutil.which("mpirun")
ROOT_FLAGS = ["--allow-run-as-root"] if os.geteuid() == 0 else []
# mpirun's --tag-output prefix "[jobid,rank]<stdout>:" (or dadtrun's own "[rank]<stdout>:").
TAG = re.compile(r"\[(?:\d+,)?(\d+)\]<stdout>:")
TAGGED = re.compile(r"^\[(?:\d+,)?(\d+)\]<stdout>:(.*)$")

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun not found (apt-get install openmpi-bin)")


def lines_of(stdout, rank):
    """The lines `rank` printed. mpirun tags each chunk it reads from a rank, and a chunk may end
    mid-line (print() writes the text and the newline separately when unbuffered), so the chunks
    are joined per rank before splitting into lines."""
    parts = TAG.split(stdout)  # [before, rank, chunk, rank, chunk, ...]
    text = "".join(chunk for r, chunk in zip(parts[1::2], parts[2::2]) if int(r) == rank)
    return text.splitlines()


def mpirun(np, *cmd, env=None, timeout=300):
    argv = [MPIRUN, *ROOT_FLAGS, "--oversubscribe", "--bind-to", "none", "--tag-output", "-np", str(np), *cmd]
    return subprocess.run(argv, env=env or worker_env(), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=REPO)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


SPLIT_JOBS = """
import sys
import torch
from mpi4py import MPI
import dadt.torch as dadt

world = MPI.COMM_WORLD
color = world.Get_rank() % 2
sub = world.Split(color, world.Get_rank())
members = [r for r in range(world.Get_size()) if r % 2 == color]
# Three incarnations on the same communicator (or list): the later ones reuse the communicators
# dadt keeps on it, and the two jobs' re-inits must not mix either.
for cycle in range(3):
    dadt.init(comm=sub if sys.argv[1] == "comm" else members)  # a list, as Horovod accepts
    # Each job sums its own members' world ranks: the two jobs must not mix.
    out = dadt.allreduce(torch.tensor([float(world.Get_rank()), 1.0]), op=dadt.Sum, name="who")
    gathered = dadt.allgather(torch.tensor([world.Get_rank()]), name="members")
    if cycle == 2:
        # One write per line: with PYTHONUNBUFFERED, print() of several arguments writes each
        # separately.
        print(f"world {world.Get_rank()} color {color} rank {dadt.rank()} size {dadt.size()} "
              f"sum {int(out[0])} count {int(out[1])} members {gathered.tolist()} "
              f"backend {dadt.mpi_enabled()}", flush=True)
    else:
        assert int(out[0]) == sum(members) and gathered.tolist() == members, (cycle, out, gathered)
    dadt.shutdown()
sub.Free()  # frees dadt's communicators on it too (their attribute's delete callback)
"""


@pytest.mark.parametrize("how", ["comm", "ranks"])
def test_init_comm_runs_independent_jobs_on_sub_communicators(tmp_path, how):
    script = write(tmp_path, "split.py", SPLIT_JOBS)
    proc = mpirun(4, PY, script, how)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = {}
    for world_rank in range(4):
        lines = [ln for ln in lines_of(proc.stdout, world_rank) if ln.startswith("world ")]
        assert len(lines) == 1, proc.stdout
        f = lines[0].split()
        seen[world_rank] = dict(color=int(f[3]), rank=int(f[5]), size=int(f[7]), sum=int(f[9]),
                                count=int(f[11]), members=lines[0].split("members ")[1].split(" backend")[0],
                                mpi=f[-1])
    for world_rank, s in seen.items():
        members = [r for r in range(4) if r % 2 == s["color"]]
        assert s["size"] == 2 and s["count"] == 2, s
        assert s["rank"] == members.index(world_rank), s
        assert s["sum"] == sum(members), s
        assert s["members"] == str(members), s
        assert s["mpi"] == "True", s


GEOMETRY = """
import os
import torch
import dadt.torch as dadt
dadt.init()
x = dadt.allreduce(torch.arange(6, dtype=torch.int64) * (dadt.rank() + 1), op=dadt.Sum, name="x")
want = torch.arange(6, dtype=torch.int64) * sum(range(1, dadt.size() + 1))
print(f"rank {dadt.rank()} size {dadt.size()} local {dadt.local_rank()} {dadt.local_size()} "
      f"cross {dadt.cross_rank()} {dadt.cross_size()} ok {bool(torch.equal(x, want))} "
      f"mpi {dadt.mpi_enabled()} {dadt.mpi_threads_supported()}", flush=True)
"""


@pytest.mark.parametrize("launcher", ["mpirun", "dadtrun --mpi"])
def test_geometry_comes_from_mpi(tmp_path, dadtrun, launcher):
    script = write(tmp_path, "geometry.py", GEOMETRY)
    if launcher == "mpirun":
        proc = mpirun(3, PY, script)
    else:
        proc = subprocess.run([dadtrun, "--mpi", "-np", "3", PY, script], env=worker_env(), capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for r in range(3):
        lines = [ln for ln in lines_of(proc.stdout, r) if ln.startswith("rank ")]
        assert lines == [f"rank {r} size 3 local {r} 3 cross 0 1 ok True mpi True True"], proc.stdout


def test_check_build_lists_frameworks_controllers_and_operations(dadtrun):
    proc = subprocess.run([dadtrun, "--check-build"], env=worker_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for section in ("Available Frameworks:", "Available Controllers:", "Available Tensor Operations:"):
        assert section in out, out
    assert "[X] PyTorch" in out, out
    controllers = out.split("Available Controllers:")[1].split("Available Tensor Operations:")[0]
    assert re.search(r"\[X\] MPI", controllers) and "[X] Gloo" in controllers, out
    ops = out.split("Available Tensor Operations:")[1]
    nccl = "[X] NCCL" if "nccl" in _built_backends() else "[ ] NCCL"
    assert "[X] MPI" in ops and "[X] Gloo" in ops and nccl in ops, out


def test_without_flag_dadtrun_picks_mpi_when_mpirun_is_on_path(tmp_path, dadtrun):
    script = write(tmp_path, "which.py", "import dadt.torch as d\nd.init()\nprint(f'mpi {d.mpi_enabled()}')\n")
    proc = subprocess.run([dadtrun, "--verbose", "-np", "2", PY, script], env=worker_env(), capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "handing the launch to mpirun" in proc.stderr
    assert lines_of(proc.stdout, 0) == ["mpi True"], proc.stdout
    # Without mpirun on PATH: Gloo, started by dadtrun itself.
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(PY, bare / "python3")
    env = worker_env(PATH=str(bare))
    proc = subprocess.run([dadtrun, "-np", "2", PY, script], env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert lines_of(proc.stdout, 0) == ["mpi False"], proc.stdout


def test_mpi_args_are_passed_to_mpirun(tmp_path, dadtrun):
    script = write(tmp_path, "env.py", "import os\nprint('x ' + str(os.environ.get('DADT_IT_MPI_ARG')))\n")
    env = worker_env(DADT_IT_MPI_ARG="")
    env.pop("DADT_IT_MPI_ARG")
    proc = subprocess.run([dadtrun, "--mpi", "-np", "2", "--mpi-args", "-x DADT_IT_MPI_ARG=from_mpi_args",
                           PY, script], env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert lines_of(proc.stdout, 1) == ["x from_mpi_args"], proc.stdout


def test_output_filename_is_refused_through_mpirun(tmp_path, dadtrun):
    """The ranks' output goes through mpirun, not dadtrun's own files: the flag is refused, naming
    what to do, rather than ignored (with --mpi, and where MPI is chosen by default)."""
    out = tmp_path / "out"
    for flags in (["--mpi"], []):
        proc = subprocess.run([dadtrun, *flags, "-np", "2", "--output-filename", str(out), "true"],
                              env=worker_env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 2, (flags, proc.stdout, proc.stderr)
        assert "--output-filename is not available for a launch through mpirun" in proc.stderr, proc.stderr
        assert "--gloo" in proc.stderr and not out.exists()


def test_program_found_on_the_users_path_and_lines_arrive_whole(tmp_path, dadtrun):
    """`dadtrun --mpi -np 2 python3 ...` runs the python3 first on the user's PATH (not the one beside
    mpirun), and a print() of several pieces arrives as one tagged line."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(PY)
    env = worker_env()
    env["PATH"] = f"{bindir}:{env['PATH']}"
    script = write(tmp_path, "where.py", "import sys\nprint('exe', sys.executable, 'end', 1, 2, 3)\n")
    proc = subprocess.run([dadtrun, "--mpi", "-np", "2", "python3", script], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        whole = [m.group(2) for m in map(TAGGED.match, proc.stdout.splitlines()) if m and int(m.group(1)) == rank]
        assert whole == [f"exe {bindir / 'python3'} end 1 2 3"], proc.stdout


def test_a_dead_rank_ends_the_mpi_job_loudly_without_orphans(tmp_path, dadtrun):
    marker = "dadt-mpi-it-dead-rank"
    script = write(tmp_path, "die.py", """
import os, sys, time, torch
import dadt.torch as dadt
dadt.init()
dadt.allreduce(torch.ones(3), name="warm")
if dadt.rank() == 1:
    os._exit(7)
time.sleep(120)  # the others would wait here: mpirun must end them
""")
    proc = subprocess.run([dadtrun, "--mpi", "-np", "3", PY, script, marker], env=worker_env(), capture_output=True,
                          text=True, timeout=100, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    assert "rank 1" in proc.stderr or ",1]" in proc.stderr, proc.stderr[-3000:]
    assert "mpirun exited with code" in proc.stderr, proc.stderr[-3000:]
    assert wait_no_process(marker, 10) == [], "ranks left behind"


def _built_backends():
    out = subprocess.run([PY, "-c", "import dadt._core as c; print(','.join(c.built_backends()))"],
                         env=worker_env(), capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip().split(",")


def _cuda_visible():
    out = subprocess.run([PY, "-c", "import dadt._core as c; print(c.cuda_available()[0])"],
                         env=worker_env(), capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip() == "True"


# NCCL: refused as not built, or (CUDA build) as having no GPU to run on; CUDA-aware MPI: never built.
@pytest.mark.parametrize("executor,missing", [
    ("nccl", "no CUDA device visible" if "nccl" in _built_backends() else "NCCL"), ("mpicuda", "CUDA")])
def test_executors_this_build_lacks_are_refused(tmp_path, executor, missing):
    if executor == "nccl" and "nccl" in _built_backends() and _cuda_visible():
        pytest.skip("this machine has NCCL and a GPU: the nccl executor is accepted "
                    "(test/integration/test_gpu.py runs it)")
    script = write(tmp_path, "exec.py", f"""
import dadt.torch as dadt
try:
    dadt.init(all_reduce_executor={executor!r})
    print("accepted")
except ValueError as e:
    print("refused:", e)
""")
    proc = subprocess.run([PY, script], env=worker_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("refused:") and missing in proc.stdout, proc.stdout


def test_the_dadt_example_line_gives_the_nccl_message_on_a_cpu(tmp_path, dadtrun):
    """The original DADT's init(broad_cast_executor='nccl', all_reduce_executor='mpi') under an MPI
    launch: the executors may differ, so a machine without NCCL or a GPU is told that, naming the
    argument, not that the two must match."""
    if "nccl" in _built_backends() and _cuda_visible():
        pytest.skip("this machine has NCCL and a GPU: the line runs (test/integration/test_gpu.py)")
    script = write(tmp_path, "dadt_line.py", """
import dadt.torch as dadt
try:
    dadt.init(cycle_duration_ms=3, broad_cast_executor='nccl', all_reduce_executor='mpi',
              all_reduce_buffer_size=67108864, timeline_path=None)
    print("accepted")
except ValueError as e:
    print("refused:", e)
""")
    proc = subprocess.run([dadtrun, "--mpi", "-np", "2", PY, script], env=worker_env(),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = [m.group(2) for m in map(TAGGED.match, proc.stdout.splitlines()) if m]
    missing = "no CUDA device visible" if "nccl" in _built_backends() else "NCCL"
    assert len(out) == 2 and all("refused: broad_cast_executor='nccl'" in ln and missing in ln
                                 for ln in out), proc.stdout


def test_mpi_executor_under_gloo_launch_is_refused_clearly(tmp_path, dadtrun):
    script = write(tmp_path, "mpiexec.py", """
import dadt.torch as dadt
try:
    dadt.init(all_reduce_executor="mpi")
    print("accepted")
except Exception as e:
    print("refused:", type(e).__name__, e)
""")
    proc = subprocess.run([dadtrun, "--gloo", "-np", "2", PY, script], env=worker_env(), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = [m.group(2) for m in map(TAGGED.match, proc.stdout.splitlines()) if m]
    assert len(out) == 2 and all("refused:" in ln and "mpirun" in ln for ln in out), proc.stdout


HIERARCHICAL = """
import torch
import dadt.torch as dadt
dadt.init()
assert (dadt.local_size(), dadt.cross_size()) == (2, 2), (dadt.local_size(), dadt.cross_size())
r, n = dadt.rank(), dadt.size()
bad = []
for count in (1, 3, 1000, 100003):
    for dtype in (torch.int32, torch.int64):
        x = (torch.arange(count) % 97 + r).to(dtype)
        want = sum((torch.arange(count) % 97 + k).to(dtype) for k in range(n))
        got = dadt.allreduce(x, op=dadt.Sum, name=f"i{count}{dtype}")
        if not torch.equal(got, want):
            bad.append(("int", count, dtype))
        got = dadt.allreduce(x, op=dadt.Max, name=f"m{count}{dtype}")
        if not torch.equal(got, (torch.arange(count) % 97 + n - 1).to(dtype)):
            bad.append(("max", count, dtype))
    g = torch.Generator().manual_seed(count)
    xs = [torch.randn(count, generator=g) for _ in range(n)]
    want = torch.stack(xs).double().sum(0).float()
    got = dadt.allreduce(xs[r], op=dadt.Sum, name=f"f{count}")
    if not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
        bad.append(("float", count, (got - want).abs().max().item()))
    got = dadt.allreduce(xs[r], op=dadt.Average, name=f"a{count}")
    if not torch.allclose(got, want / n, rtol=1e-5, atol=1e-5):
        bad.append(("average", count))
print(f"hier {r} bad {bad}", flush=True)
"""
PRETEND_HOSTS = ('export DADT_LOCAL_RANK=$(( {rank} % 2 )) DADT_LOCAL_SIZE=2 '
                 'DADT_CROSS_RANK=$(( {rank} / 2 )) DADT_CROSS_SIZE=2; exec "$0" "$@"')


@pytest.mark.parametrize("launcher", ["gloo", "mpirun"])
def test_hierarchical_allreduce_on_two_pretend_hosts_equals_flat(tmp_path, dadtrun, launcher):
    script = write(tmp_path, "hier.py", HIERARCHICAL)
    if launcher == "gloo":
        wrap = ["sh", "-c", PRETEND_HOSTS.format(rank="$DADT_RANK"), PY, script]
        proc = subprocess.run([dadtrun, "--gloo", "-np", "4", "--hierarchical-allreduce", "--log-level", "info",
                               *wrap], env=worker_env(), capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
    else:
        wrap = ["sh", "-c", PRETEND_HOSTS.format(rank="$OMPI_COMM_WORLD_RANK"), PY, script]
        proc = mpirun(4, "-x", "DADT_HIERARCHICAL_ALLREDUCE=1", "-x", "DADT_LOG_LEVEL=info", *wrap)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "hierarchical allreduce over 2 hosts of 2 ranks" in proc.stdout + proc.stderr, proc.stderr[-3000:]
    for r in range(4):
        assert lines_of(proc.stdout, r) == [f"hier {r} bad []"], proc.stdout


def test_digits_example_trains_to_the_same_accuracy_three_ways(dadtrun):
    script = os.path.join(REPO, "examples", "pytorch", "train_digits.py")
    runs = {
        "gloo": [dadtrun, "--gloo", "-np", "2", PY, script],
        "dadtrun --mpi": [dadtrun, "--mpi", "-np", "2", PY, script],
        "mpirun": [MPIRUN, *ROOT_FLAGS, "--oversubscribe", "--bind-to", "none", "--tag-output", "-np", "2", PY, script],
    }
    accuracy = {}
    for name, argv in runs.items():
        proc = subprocess.run(argv, env=worker_env(), capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL, cwd=REPO)
        assert proc.returncode == 0, name + ": " + proc.stderr[-3000:]
        last = lines_of(proc.stdout, 0)[-1]
        m = re.fullmatch(r"final test accuracy: ([01]\.\d{4})", last)
        assert m, f"{name}: last line of rank 0: {last!r}"
        accuracy[name] = float(m.group(1))
    assert all(a >= 0.90 for a in accuracy.values()), accuracy
    assert max(accuracy.values()) - min(accuracy.values()) <= 0.02, accuracy
