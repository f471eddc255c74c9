"""dadt.torch.SyncBatchNorm against torch's BatchNorm over the whole global batch.

Every rank builds the same global batch; rank r holds rows of its own (r + 2 of them, so that the
ranks' batches differ in size). The synchronised layer
on the local rows must give the rows the reference layer gives them on the whole batch: the same
outputs, input gradients and running statistics, and weight gradients whose sum over ranks is the
reference's.
"""
import pytest
import torch

import dadt.torch as dadt


def _global_batch(world, shape_tail, seed):
    counts = [r + 2 for r in range(world.size)]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(counts), *shape_tail, generator=g, dtype=torch.float64) * 3 + 5
    start = sum(counts[:world.rank])
    return x, slice(start, start + counts[world.rank])


def _reference(bn_cls, channels, x, weight_out):
    ref = bn_cls(channels, momentum=0.3).double()
    xr = x.clone().requires_grad_()
    out = ref(xr)
    (out * weight_out).sum().backward()
    return ref, xr, out


@pytest.mark.parametrize("shape_tail,bn_cls", [((4,), torch.nn.BatchNorm1d),
                                               ((3, 5), torch.nn.BatchNorm1d),
                                               ((2, 3, 3), torch.nn.BatchNorm2d)],
                         ids=["NC", "NCL", "NCHW"])
def test_training_matches_batch_norm_over_the_global_batch(world, nm, shape_tail, bn_cls):
    channels = shape_tail[0]
    x, mine = _global_batch(world, shape_tail, seed=1)
    weight_out = torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ref, xr, out_ref = _reference(bn_cls, channels, x, weight_out)

    sync = dadt.SyncBatchNorm(channels, momentum=0.3).double()
    xs = x[mine].clone().requires_grad_()
    for _ in range(2):  # the second pass checks the running statistics' momentum update again
        out = sync(xs)
    (out * weight_out[mine]).sum().backward()
    ref(x)  # the reference takes a second step too
    w_grad = dadt.allreduce(sync.weight.grad, name=nm("w"), op=dadt.Sum)
    b_grad = dadt.allreduce(sync.bias.grad, name=nm("b"), op=dadt.Sum)

    torch.testing.assert_close(out, out_ref[mine].detach())
    torch.testing.assert_close(xs.grad, xr.grad[mine])
    torch.testing.assert_close(w_grad, ref.weight.grad)
    torch.testing.assert_close(b_grad, ref.bias.grad)
    torch.testing.assert_close(sync.running_mean, ref.running_mean)
    torch.testing.assert_close(sync.running_var, ref.running_var)
    assert int(sync.num_batches_tracked) == 2


def test_eval_uses_the_running_statistics_without_communicating(world):
    sync = dadt.SyncBatchNorm(3)
    sync.running_mean.fill_(1.0)
    sync.running_var.fill_(4.0)
    sync.eval()
    x = torch.full((2, 3), 5.0) + world.rank  # different on every rank: no collective may run
    torch.testing.assert_close(sync(x), (x - 1.0) / torch.sqrt(torch.tensor(4.0 + sync.eps)))


def test_float16_input_keeps_its_dtype(world):
    sync = dadt.SyncBatchNorm(2)
    x = (torch.arange(8, dtype=torch.float32).reshape(4, 2) + world.rank).half()
    out = sync(x)
    assert out.dtype == torch.float16 and torch.isfinite(out.float()).all()


def test_convert_sync_batchnorm_keeps_parameters_and_statistics(world):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Flatten(), torch.nn.BatchNorm1d(16)))
    model[1].running_mean.fill_(0.5)
    converted = dadt.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(converted[1], dadt.SyncBatchNorm) and isinstance(converted[3][1], dadt.SyncBatchNorm)
    assert converted[1].weight is model[1].weight
    assert torch.equal(converted[1].running_mean, torch.full((4,), 0.5))
    converted(torch.randn(2, 1, 4, 4))  # runs (and synchronises) on every rank


def test_wrong_channel_count_is_refused_with_the_shapes(world):
    with pytest.raises(ValueError, match=r"num_features=3\) got 2 channels"):
        dadt.SyncBatchNorm(3)(torch.ones(4, 2))
