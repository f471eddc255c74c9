"""A plain torch DDP script (no dadt import) under dadtrun: torchrun's variables reach every rank in
every launch mode, on one host and across the namespace hosts of tools/netns_hosts.sh.

"auto" is dadtrun with no controller flag: it picks MPI by itself when mpirun is on PATH (as here, from
tools/install_deps.sh), and then mpirun starts the ranks through dadtrun's relay, which sets RANK,
LOCAL_RANK, GROUP_RANK, ... from Open MPI's variables. "--gloo" is dadtrun's own local/ssh spawner.
Across hosts, --network-interface must also reach torch's own Gloo (GLOO_SOCKET_IFNAME).
"""
import json
import re
import shutil
import subprocess

import pytest

from conftest import PY, REPO, rank_lines, worker_env
from test_multihost import ADDR, HOSTS, IFACE, hosts  # noqa: F401  (the module-scoped fixture)

DDP = """
import json, os, subprocess, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.Generator().manual_seed(100 + rank)  # every rank its own batches
for _ in range(5):
    x = torch.randn(16, 8, generator=data)
    opt.zero_grad()
    ((model(x) - x.sum(1, keepdim=True)) ** 2).mean().backward()
    opt.step()
params = torch.cat([p.detach().flatten() for p in model.parameters()])
every = [torch.zeros_like(params) for _ in range(world)]
dist.all_gather(every, params)
addr = subprocess.run(["ip", "-4", "-o", "addr", "show", "dadt0"], capture_output=True, text=True).stdout.split()
names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
         "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"]
row = {n: os.environ.get(n) for n in names}
row.update(dist_rank=rank, dist_world=world, in_sync=all(torch.equal(every[0], p) for p in every),
           moved=not torch.equal(every[0], every[0] * 0), addr=addr[3].split("/")[0] if len(addr) > 3 else None)
print(json.dumps(row), flush=True)
dist.destroy_process_group()
"""

LAUNCHERS = {"auto": [], "--gloo": ["--gloo"]}


def _run_ddp(dadtrun, tmp_path, flags, np, timeout=300):
    script = tmp_path / "plain_ddp.py"
    script.write_text(DDP)
    proc = subprocess.run([dadtrun, *flags, "-np", str(np), PY, str(script)], env=worker_env(), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {}
    for line in rank_lines(proc.stdout):
        if line.startswith("{"):
            row = json.loads(line)
            rows[row["dist_rank"]] = row
    assert sorted(rows) == list(range(np)), proc.stdout[-3000:]
    for r, row in rows.items():
        assert row["RANK"] == str(r) and row["ROLE_RANK"] == str(r), row
        assert row["WORLD_SIZE"] == row["ROLE_WORLD_SIZE"] == str(np) and row["dist_world"] == np, row
        assert row["in_sync"] and row["moved"], f"rank {r}: DDP did not keep the replicas equal: {row}"
        assert row["MASTER_ADDR"] == rows[0]["MASTER_ADDR"] and row["MASTER_PORT"] == rows[0]["MASTER_PORT"], row
    if not flags or flags[0] != "--gloo":
        # No controller flag: dadtrun picks mpirun whenever it is on PATH (its tags carry a job id).
        picked_mpi = re.search(r"^\[\d+,\d+\]<stdout>:", proc.stdout, re.M) is not None
        assert picked_mpi == (shutil.which("mpirun") is not None), proc.stdout[-2000:]
    return rows, proc


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_plain_ddp_script_on_one_host(dadtrun, tmp_path, launcher):
    rows, _ = _run_ddp(dadtrun, tmp_path, LAUNCHERS[launcher], np=3)
    for r, row in rows.items():
        assert (row["LOCAL_RANK"], row["LOCAL_WORLD_SIZE"]) == (str(r), "3"), row
        assert (row["GROUP_RANK"], row["GROUP_WORLD_SIZE"]) == ("0", "1"), row
        assert row["MASTER_ADDR"] == "127.0.0.1", row
        assert row["GLOO_SOCKET_IFNAME"] is None, row


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_plain_ddp_script_across_hosts(hosts, dadtrun, tmp_path, launcher):  # noqa: F811
    # Uneven hosts, so that the node rank is not rank // local size.
    rows, _ = _run_ddp(dadtrun, tmp_path, [*LAUNCHERS[launcher], "-H", "h1:2,h2:1,h3:1",
                                              "--network-interface", IFACE], np=4)
    where = ["h1", "h1", "h2", "h3"]
    local = [("0", "2"), ("1", "2"), ("0", "1"), ("0", "1")]
    for r, row in rows.items():
        assert row["addr"] == ADDR[where[r]], f"rank {r} ran on {row['addr']}, expected {where[r]}"
        assert (row["LOCAL_RANK"], row["LOCAL_WORLD_SIZE"]) == local[r], row
        assert (row["GROUP_RANK"], row["GROUP_WORLD_SIZE"]) == (str(HOSTS.index(where[r])), "3"), row
        # Rank 0's host, and torch's own Gloo on the named interface.
        assert row["MASTER_ADDR"] == "h1", row
        assert row["GLOO_SOCKET_IFNAME"] == IFACE, row
