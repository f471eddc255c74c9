"""broadcast_object / allgather_object, broadcast_parameters / broadcast_optimizer_state."""
import pytest
import torch

import dadt.torch as dadt
from collective_utils import assert_equal, assert_rows_identical, gather_rows


def _payload(rank):
    return {
        "rank": rank,
        "text": "x" * (rank * 1000),
        "nested": [rank, (rank, str(rank)), {"k": [1.5] * rank}],
        "tensor": torch.arange(rank + 2, dtype=torch.float64),
    }


def _same_payload(a, b):
    return (a["rank"] == b["rank"] and a["text"] == b["text"] and a["nested"] == b["nested"]
            and torch.equal(a["tensor"], b["tensor"]))


def test_broadcast_object_every_root(world, nm):
    got = []
    for root in range(world.size):
        obj = _payload(world.rank) if world.rank == root else None
        got.append(dadt.broadcast_object(obj, root_rank=root, name=nm(f"root{root}")))
    for root, obj in enumerate(got):
        assert _same_payload(obj, _payload(root)), f"broadcast_object from root {root}: {obj!r:.200}"


def test_broadcast_object_default_root_and_large(world, nm):
    big = bytes(range(256)) * 4096 if world.rank == 0 else b""  # 1 MiB on the root only
    out = dadt.broadcast_object(big, name=nm())
    assert out == bytes(range(256)) * 4096


def test_allgather_object(world, nm):
    objs = dadt.allgather_object(_payload(world.rank), name=nm("payload"))
    small = dadt.allgather_object(world.rank * 7, name=nm("int"))
    nones = dadt.allgather_object(None, name=nm("none"))
    assert isinstance(objs, list) and len(objs) == world.size
    for r, obj in enumerate(objs):
        assert _same_payload(obj, _payload(r)), f"allgather_object entry {r}"
    assert small == [r * 7 for r in range(world.size)]
    assert nones == [None] * world.size


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(5, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def _net(seed):
    torch.manual_seed(seed)
    net = _Net()
    # Make buffers rank-dependent too (running stats and the int64 counter).
    net.train()
    net(torch.randn(6, 5))
    return net


def _flat_state(net):
    return torch.cat([t.detach().reshape(-1).to(torch.float64) for t in net.state_dict().values()])


@pytest.mark.parametrize("form", ["state_dict", "named_parameters"])
def test_broadcast_parameters(world, nm, form):
    root = world.size - 1
    net = _net(100 + world.rank)
    if form == "state_dict":
        dadt.broadcast_parameters(net.state_dict(), root_rank=root)
        reference = _flat_state(_net(100 + root))
        mine = _flat_state(net)
    else:
        dadt.broadcast_parameters(list(net.named_parameters()), root_rank=root)
        ref_net = _net(100 + root)
        reference = torch.cat([p.detach().reshape(-1).double() for p in ref_net.parameters()])
        mine = torch.cat([p.detach().reshape(-1).double() for p in net.parameters()])
    rows = gather_rows(mine, nm("check"))
    assert_rows_identical(rows, "parameters after broadcast_parameters")
    assert_equal(mine, reference, "parameters equal the root's initialisation")


def _optimizer_state_rows(opt, name):
    """Every tensor/number in the optimizer state, flattened in a fixed order, gathered from all ranks."""
    parts = []
    for group in opt.param_groups:
        for p in group["params"]:
            state = opt.state[p]
            for key in sorted(state):
                v = state[key]
                parts.append(torch.as_tensor(v, dtype=torch.float64).reshape(-1))
        parts.append(torch.tensor([float(group["lr"])], dtype=torch.float64))
    return gather_rows(torch.cat(parts), name)


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam"])
def test_broadcast_optimizer_state(world, nm, opt_name):
    net = _net(7)  # same init everywhere
    lr = 0.01 * (world.rank + 1)  # rank-dependent hyper-parameter
    if opt_name == "adam":
        opt = torch.optim.Adam(net.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    torch.manual_seed(1000 + world.rank)  # rank-dependent data -> rank-dependent state
    for _ in range(world.rank + 1):  # rank-dependent number of steps (Adam's step counter differs)
        opt.zero_grad()
        net(torch.randn(8, 5)).square().sum().backward()
        opt.step()

    dadt.broadcast_parameters(net.state_dict(), root_rank=0)
    dadt.broadcast_optimizer_state(opt, root_rank=0)
    rows = _optimizer_state_rows(opt, nm("state"))

    # A further step with the same data everywhere keeps every rank identical.
    torch.manual_seed(5)
    opt.zero_grad()
    net(torch.randn(8, 5)).square().sum().backward()
    opt.step()
    params = gather_rows(_flat_state(net), nm("params"))

    assert_rows_identical(rows, f"{opt_name} state after broadcast_optimizer_state")
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01), "hyper-parameters come from the root"
    assert_rows_identical(params, "parameters after one more step")


def test_broadcast_optimizer_state_before_any_step(world, nm):
    net = _net(7)
    opt = torch.optim.SGD(net.parameters(), lr=0.1 * (world.rank + 1), momentum=0.5)
    dadt.broadcast_optimizer_state(opt, root_rank=0)
    lrs = dadt.allgather_object(opt.param_groups[0]["lr"], name=nm())
    assert lrs == [pytest.approx(0.1)] * world.size


def test_broadcast_optimizer_state_leaves_zero_grads_where_there_were_none(world):
    # As Horovod's zero-gradient step does: scripts read p.grad right afterwards.
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    trained = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([frozen, trained], lr=0.1, momentum=0.9)
    dadt.broadcast_optimizer_state(opt, root_rank=0)
    assert frozen.grad is None
    assert trained.grad is not None and trained.grad.tolist() == [0.0, 0.0, 0.0]
