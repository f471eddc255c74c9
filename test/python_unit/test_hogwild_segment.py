"""mode="hogwild"'s shared segment and update rule in one process, with no runtime.

Two "ranks" are two mappings of one segment in this process, each with its own torch optimizer
over its own Parameter objects: what one steps, the other reads. The weights are compared with
the rule written out (x <- x - lr * b_i, b_i = mu * b_i + g_i, one x, a momentum per rank);
test/python_multirank/test_hogwild.py checks the same across real ranks.
"""
import os
import uuid

import pytest
import torch

from dadt.torch.training_modes import hogwild


@pytest.fixture
def path():
    name = "%stest-%s" % (hogwild.SEGMENT_PREFIX, uuid.uuid4().hex)
    p = os.path.join(hogwild.segment_dir(), name)
    yield p
    if os.path.exists(p):
        os.unlink(p)


def _params():
    return [torch.nn.Parameter(t) for t in (
        torch.zeros(3, 5), torch.zeros(7, dtype=torch.float64),
        torch.zeros((), dtype=torch.bfloat16), torch.zeros(0))]


def test_layout_puts_every_parameter_on_its_own_aligned_cache_line():
    offsets, total = hogwild.layout(_params())
    assert offsets == [0, 64, 128, 192]  # 60 B, 56 B, 2 B, 0 B: each rounded up to 64
    assert total == 192
    assert hogwild.layout([])[1] == hogwild.ALIGN  # never an empty mapping


def test_two_mappings_are_one_memory_and_outlive_the_name(path):
    params = _params()
    offsets, nbytes = hogwild.layout(params)
    mine = hogwild.views(hogwild.create_segment(path, nbytes), params, offsets)
    theirs = hogwild.views(hogwild.open_segment(path, nbytes), params, offsets)
    os.unlink(path)
    for i, (a, b) in enumerate(zip(mine, theirs)):
        assert a.shape == params[i].shape and a.dtype == params[i].dtype
        a.fill_(i + 1)
        assert torch.equal(b, torch.full_like(b, i + 1))
    assert mine[0].data_ptr() != theirs[0].data_ptr()  # two mappings, not one tensor


def test_a_name_is_never_reused_or_made_by_a_reader(path):
    hogwild.create_segment(path, 64)
    with pytest.raises(FileExistsError):
        hogwild.create_segment(path, 64)
    with pytest.raises(OSError, match="holds 64 bytes, expected 128"):
        hogwild.open_segment(path, 128)
    os.unlink(path)
    with pytest.raises(FileNotFoundError):
        hogwild.open_segment(path, 64)
    assert not os.path.exists(path)  # the failed open created nothing


def test_steps_of_two_ranks_on_one_segment_follow_the_rule(path):
    """Rank 0 and rank 1 alternate SGD steps with momentum on loss 0.5 ||x - c_i||^2."""
    lr, mu = 0.1, 0.9
    ranks = [[torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))] for _ in range(2)]
    offsets, nbytes = hogwild.layout(ranks[0])
    segments = [hogwild.create_segment(path, nbytes), hogwild.open_segment(path, nbytes)]
    for params, segment in zip(ranks, segments):
        for p, v in zip(params, hogwild.views(segment, params, offsets)):
            p.data = v
    with torch.no_grad():
        ranks[0][0].copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    opts = [torch.optim.SGD(params, lr=lr, momentum=mu) for params in ranks]
    targets = [torch.tensor([0.0, 1.0, -1.0, 2.0], dtype=torch.float64) * (i + 1) for i in range(2)]

    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    buffers = [None, None]
    for t in range(6):
        i = t % 2
        w = ranks[i][0]
        opts[i].zero_grad()
        (0.5 * ((w - targets[i]) ** 2).sum()).backward()
        opts[i].step()
        g = x - targets[i]
        buffers[i] = g if buffers[i] is None else mu * buffers[i] + g
        x = x - lr * buffers[i]
        for params in ranks:
            assert torch.allclose(params[0].detach(), x, rtol=0, atol=1e-12), (t, params[0], x)
