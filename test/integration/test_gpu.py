"""GPU jobs end to end: NCCL at one rank, CUDA tensors staged through Gloo and MPI at two ranks on
one GPU, and a name that is a CPU tensor on one rank and a GPU tensor on another.

Each test launches its own job with dadtrun and skips, with the reason, where torch sees no GPU
or dadt was built without CUDA (CI has neither a GPU nor needs one for the rest of the tier).
"""
import subprocess
import textwrap

import pytest

from conftest import PY, worker_env

PROBE = "import torch, dadt.torch as d; print(torch.cuda.is_available(), d.cuda_built())"


def _gpu_available():
    out = subprocess.run([PY, "-c", PROBE], env=worker_env(), capture_output=True, text=True, timeout=120)
    return out.stdout.split() == ["True", "True"], out.stdout.strip() or out.stderr[-300:]


@pytest.fixture(scope="module")
def gpu():
    ok, probe = _gpu_available()
    if not ok:
        pytest.skip("needs a GPU and dadt built with CUDA (torch.cuda.is_available(), "
                    "dadt.cuda_built() = %s)" % probe)


COLLECTIVES = textwrap.dedent("""
    import sys, torch, dadt.torch as dadt
    from dadt.common import basics
    dadt.init(all_reduce_executor=sys.argv[1])
    r, n = dadt.rank(), dadt.size()
    dev = torch.device("cuda", 0)
    x = torch.arange(1000, dtype=torch.float32, device=dev) + r
    s = dadt.allreduce(x, name="s", op=dadt.Sum)
    a = dadt.allreduce(x, name="a")
    g = dadt.allgather(torch.full((r + 1, 2), float(r), device=dev), name="g")
    b = torch.full((3,), float(r), device=dev)
    dadt.broadcast_(b, root_rank=n - 1, name="b")
    rs = dadt.reducescatter(torch.ones(2 * n, 4, device=dev), name="rs", op=dadt.Sum)
    at = dadt.alltoall(torch.full((n,), float(r), device=dev), name="at")  # no splits: one tensor
    base = torch.arange(1000, dtype=torch.float32)
    checks = {"sum": torch.equal(s.cpu(), base * n + n * (n - 1) / 2),
              "average": torch.allclose(a.cpu(), base + (n - 1) / 2),
              "allgather": g.shape[0] == n * (n + 1) // 2,
              "broadcast": torch.equal(b.cpu(), torch.full((3,), float(n - 1))),
              "reducescatter": torch.equal(rs.cpu(), torch.full((2, 4), float(n))),
              "alltoall": torch.equal(at.cpu(), torch.arange(n, dtype=torch.float32)),
              "devices": all(t.device == dev for t in (s, a, g, rs, at))}
    wrong = [k for k, good in checks.items() if not good]
    print("ok" if not wrong else "WRONG " + ",".join(wrong), "nccl" if basics.nccl_enabled() else "staged",
          flush=True)
    dadt.shutdown()
""")


def _run(dadtrun, tmp_path, args, executor):
    script = tmp_path / "gpu_job.py"
    script.write_text(COLLECTIVES)
    return subprocess.run([dadtrun] + args + [PY, str(script), executor], env=worker_env(),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_nccl_at_one_rank(gpu, dadtrun, tmp_path):
    proc = _run(dadtrun, tmp_path, ["--gloo", "-np", "1"], "nccl")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ok nccl" in proc.stdout, proc.stdout


def _mpi_built():
    out = subprocess.run([PY, "-c", "import dadt._core as c; print(c.built_backends())"], env=worker_env(),
                         capture_output=True, text=True, timeout=120)
    return "mpi" in out.stdout


@pytest.mark.parametrize("launch,executor", [(["--gloo"], "gloo"), (["--mpi"], "mpi")])
def test_two_ranks_on_one_gpu_staged_through_a_host_executor(gpu, dadtrun, tmp_path, launch, executor):
    if executor == "mpi" and not _mpi_built():
        pytest.skip("dadt was built without MPI (tools/device_build.sh leaves it out)")
    proc = _run(dadtrun, tmp_path, launch + ["-np", "2"], executor)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("ok staged") == 2, proc.stdout


MIXED = textwrap.dedent("""
    import torch, dadt.torch as dadt
    dadt.init()
    x = torch.ones(4, device="cuda:0") if dadt.rank() == 0 else torch.ones(4)
    try:
        dadt.allreduce(x, name="grad.mixed")
        print("accepted", flush=True)
    except Exception as e:
        print("refused:", e, flush=True)
    dadt.shutdown()
""")


def test_a_name_mixing_cpu_and_gpu_tensors_is_refused_on_every_rank(gpu, dadtrun, tmp_path):
    script = tmp_path / "mixed.py"
    script.write_text(MIXED)
    proc = subprocess.run([dadtrun, "--gloo", "-np", "2", PY, str(script)], env=worker_env(),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [l for l in proc.stdout.splitlines() if "refused:" in l]
    assert len(lines) == 2, proc.stdout
    for l in lines:
        assert "'grad.mixed'" in l and "CPU and GPU tensors cannot be mixed" in l and "rank 1: CPU" in l, l
