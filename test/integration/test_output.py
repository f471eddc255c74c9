"""Every line a rank prints reaches dadtrun's output whole, prefixed with [rank]<stdout>: or [rank]<stderr>:."""
import re

from conftest import rank_lines, wait_no_process

LINES = 200

CHATTY = """
import os, sys
rank = int(os.environ["DADT_RANK"])
long = "x" * 10000
for i in range(%d):
    print("line", rank, i, long if i %% 50 == 7 else "", flush=(i %% 3 == 0))
    if i %% 20 == 0:
        print("err", rank, i, file=sys.stderr, flush=True)
sys.stdout.write("tail %%d" %% rank)  # last line without a newline
""" % LINES


def test_every_line_prefixed_whole_and_in_order(job):
    np = 3
    proc, _ = job.run(CHATTY, np=np, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in proc.stdout.splitlines():
        assert re.match(r"^\[\d+\]<stdout>:", line), f"stdout line without a rank prefix: {line[:120]!r}"
    for r in range(np):
        got = rank_lines(proc.stdout, rank=r)
        body = [ln for ln in got if ln.startswith("line ")]
        assert len(body) == LINES, f"rank {r}: {len(body)} of {LINES} lines arrived"
        for i, ln in enumerate(body):
            fields = ln.split()
            assert fields[:3] == ["line", str(r), str(i)], f"rank {r} line {i} arrived as {ln[:80]!r}"
            if i % 50 == 7:
                assert fields[3] == "x" * 10000, f"rank {r}: a 10000-character line was cut or mixed"
        assert f"tail {r}" in got, f"rank {r}: the last line (no trailing newline) was lost"
        err = [ln for ln in rank_lines(proc.stderr, rank=r, stream="stderr") if ln.startswith("err ")]
        assert err == [f"err {r} {i}" for i in range(0, LINES, 20)], f"rank {r} stderr: {err}"
    assert wait_no_process(job.marker) == []


def test_worker_environment(job):
    script = """
import os
keys = ["DADT_RANK", "DADT_SIZE", "DADT_LOCAL_RANK", "DADT_LOCAL_SIZE", "RANK", "WORLD_SIZE",
        "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS"]
print(" ".join("%s=%s" % (k, os.environ.get(k)) for k in keys))
"""
    np = 4
    proc, _ = job.run(script, np=np, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for r in range(np):
        (line,) = rank_lines(proc.stdout, rank=r)
        env = dict(kv.split("=", 1) for kv in line.split())
        assert env["DADT_RANK"] == env["RANK"] == env["DADT_LOCAL_RANK"] == env["LOCAL_RANK"] == str(r), line
        assert env["DADT_SIZE"] == env["WORLD_SIZE"] == env["DADT_LOCAL_SIZE"] == env["LOCAL_WORLD_SIZE"] == str(np)
        assert env["OMP_NUM_THREADS"] == "1", line


def test_ranks_reuse_freed_memory(job):
    # A training step frees its gradients and allocates them again. Under dadtrun's malloc
    # settings the pages stay with the process; with glibc's own (GLIBC_TUNABLES naming a malloc
    # tunable makes dadtrun leave malloc alone) every step faults all 40 MB in again.
    script = """
import resource, torch
def step():
    grads = [torch.ones(1 << 20) for _ in range(10)]  # 10 x 4 MiB, freed on return
    return float(sum(g[0] for g in grads))
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print("faults_per_step", (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 10)
"""
    faults = {}
    for setting, flags in (("dadtrun", ()), ("glibc", ("-x", "GLIBC_TUNABLES=glibc.malloc.check=0"))):
        proc, _ = job.run(script, np=2, flags=flags, timeout=120)
        assert proc.returncode == 0, proc.stderr
        faults[setting] = [int(rank_lines(proc.stdout, rank=r)[0].split()[1]) for r in range(2)]
    # 10,240 pages move per step when freed memory goes back to the kernel. A rank's own
    # bookkeeping (the interpreter, torch's allocator caches) faults in a few hundred at most.
    assert all(f < 1000 for f in faults["dadtrun"]), faults
    assert all(f > 5000 for f in faults["glibc"]), faults


def test_dadt_ranks_print_with_their_prefix(job):
    script = """
import torch
import dadt.torch as dadt
dadt.init()
total = dadt.allreduce(torch.tensor([float(dadt.rank())]), name="sum.of.ranks", op=dadt.Sum)
print("rank %d of %d sum %d" % (dadt.rank(), dadt.size(), int(total.item())), flush=True)
dadt.shutdown()
"""
    np = 3
    proc, _ = job.run(script, np=np, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(np):
        assert rank_lines(proc.stdout, rank=r) == [f"rank {r} of {np} sum {np * (np - 1) // 2}"], proc.stdout
    assert wait_no_process(job.marker) == []


def test_exit_status_zero_when_every_rank_succeeds(job):
    proc, _ = job.run("print('ok')\n", np=4, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(rank_lines(proc.stdout)) == ["ok"] * 4
