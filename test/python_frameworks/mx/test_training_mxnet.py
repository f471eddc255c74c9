"""DistributedTrainer, DistributedOptimizer and broadcast_parameters against a reference written from
the update rule: each rank computes every rank's gradient itself (a local net with the same weights
on that rank's batch), averages them in NumPy, and applies plain SGD,
    w' = w - lr * mean_r(grad_r) / batch_size,
which is what gluon.Trainer.step(batch_size) does with the averaged gradient."""
import numpy as np
import pytest

mx = pytest.importorskip("mxnet", reason="dadt.mxnet runs in the virtualenv of tools/mxnet_venv.sh")
from mxnet import autograd, gluon  # noqa: E402

LR, BATCH, IN, OUT = 0.1, 8, 5, 3


def batch(r, step=0):
    rng = np.random.RandomState(100 * r + step)
    return (mx.nd.array(rng.randn(BATCH, IN).astype(np.float32)),
            mx.nd.array(rng.randn(BATCH, OUT).astype(np.float32)))


def make_net(seed):
    """Explicit prefixes: MXNet 1.x otherwise names parameters from a process-wide counter
    (dense12_weight), and the reference below builds a different number of nets on each rank
    when process sets differ, so that later nets' names (broadcast_parameters' names) would
    differ across ranks."""
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(gluon.nn.Dense(4, in_units=IN, activation="tanh", prefix="hidden_"),
                gluon.nn.Dense(OUT, in_units=4, prefix="out_"))
    net.initialize(mx.init.Normal(0.5))
    return net


def params(net):
    """Position -> Parameter (MXNet 1.x names carry a global counter: each new net's differ)."""
    return dict(enumerate(net.collect_params().values()))


def weights(net):
    return {k: p.data().asnumpy().copy() for k, p in params(net).items()}


def grads_on(start, r, step=0):
    """The gradients of rank r's batch at weights `start`, computed locally."""
    net = make_net(0)
    for k, p in params(net).items():
        p.set_data(mx.nd.array(start[k]))
    x, y = batch(r, step)
    with autograd.record():
        loss = ((net(x) - y) ** 2).sum()
    loss.backward()
    return {k: p.grad().asnumpy().copy() for k, p in params(net).items()}


def reference(start, size, steps=1, ranks=None):
    """The weights after `steps` SGD steps on the gradients averaged over `ranks` (all)."""
    ranks = list(range(size)) if ranks is None else ranks
    w = {k: v.astype(np.float64) for k, v in start.items()}
    for step in range(steps):
        gs = [grads_on({k: v.astype(np.float32) for k, v in w.items()}, r, step) for r in ranks]
        for k in w:
            w[k] = w[k] - LR * np.mean([g[k] for g in gs], axis=0) / BATCH
    return w


def train(net, trainer, rank, steps=1, first=0):
    for step in range(first, first + steps):
        x, y = batch(rank, step)
        with autograd.record():
            loss = ((net(x) - y) ** 2).sum()
        loss.backward()
        trainer.step(BATCH)


def check(net, want, rtol=1e-5, atol=1e-6):
    got = weights(net)
    assert sorted(got) == sorted(want)
    for k in got:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)


def synced_net(fw, world, nm):
    net = make_net(seed=world.rank)  # different weights on every rank ...
    fw.dadt.broadcast_parameters(net.collect_params(), root_rank=0, prefix=nm("bcast."))
    return net                       # ... until rank 0's are broadcast


def test_broadcast_parameters(fw, world, nm):
    net = synced_net(fw, world, nm)
    check(net, weights(make_net(seed=0)), rtol=0, atol=0)


def test_broadcast_parameters_deferred_and_ndarrays(fw, world, nm):
    mx.random.seed(world.rank)
    net = gluon.nn.Dense(3, prefix="deferred_")  # in_units unknown: set at the first forward pass
    net.initialize()
    fw.dadt.broadcast_parameters(net.collect_params(), root_rank=1 % world.size, prefix=nm("d."))
    net(mx.nd.ones((2, 4)))
    gathered = fw.dadt.allgather(net.weight.data().expand_dims(0), name=nm("check")).asnumpy()
    assert all(np.array_equal(gathered[r], gathered[1 % world.size]) for r in range(world.size))
    arrays = {"b": mx.nd.full((2,), world.rank), "a": mx.nd.full((3, 2), 10 + world.rank)}
    fw.dadt.broadcast_parameters(arrays, root_rank=0, prefix=nm("nd."))
    assert (arrays["a"].asnumpy() == 10).all() and (arrays["b"].asnumpy() == 0).all()
    with pytest.raises(ValueError, match="dict or a ParameterDict"):
        fw.dadt.broadcast_parameters([mx.nd.ones(1)])


@pytest.mark.parametrize("options", [{}, {"num_groups": 2}, {"gradient_predivide_factor": 2.0},
                                     {"compression": "fp16"}],
                         ids=["plain", "groups", "predivide", "fp16"])
def test_distributed_trainer_matches_reference(fw, world, nm, options):
    net = synced_net(fw, world, nm)
    start = weights(net)
    options = dict(options)
    tol = {}
    if options.get("compression") == "fp16":
        options["compression"] = fw.dadt.Compression.fp16
        tol = dict(rtol=2e-3, atol=2e-3)
    trainer = fw.dadt.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": LR},
                                         prefix=nm("g."), **options)
    train(net, trainer, world.rank, steps=3)
    check(net, reference(start, world.size, steps=3), **tol)


def test_distributed_trainer_allreduce_grads_are_averages(fw, world, nm):
    net = synced_net(fw, world, nm)
    start = weights(net)
    trainer = fw.dadt.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": LR},
                                         prefix=nm("g."))
    x, y = batch(world.rank)
    with autograd.record():
        loss = ((net(x) - y) ** 2).sum()
    loss.backward()
    trainer.allreduce_grads()
    gs = [grads_on(start, r) for r in range(world.size)]
    for k, p in params(net).items():
        np.testing.assert_allclose(p.grad().asnumpy(), np.mean([g[k] for g in gs], axis=0),
                                   rtol=1e-5, atol=1e-6, err_msg=k)
    trainer.update(BATCH)
    check(net, reference(start, world.size))


@pytest.mark.parametrize("aggregate", [False, True], ids=["one_by_one", "aggregated"])
def test_distributed_optimizer_in_a_gluon_trainer(fw, world, nm, aggregate, tmp_path):
    net = synced_net(fw, world, nm)
    start = weights(net)
    sgd = mx.optimizer.SGD(learning_rate=LR)
    sgd.aggregate_num = 4 if aggregate else 0  # several tensors per update() call, or one
    opt = fw.dadt.DistributedOptimizer(sgd, num_groups=1 if aggregate else 0)
    assert isinstance(opt, mx.optimizer.Optimizer) and opt.learning_rate == LR
    trainer = gluon.Trainer(net.collect_params(), opt, kvstore=None)
    train(net, trainer, world.rank, steps=2)
    assert sgd.rescale_grad == pytest.approx(1.0 / BATCH)  # Trainer's write reached the wrapped SGD
    check(net, reference(start, world.size, steps=2))
    path = str(tmp_path / "states")  # the optimizer is pickled with the states, and comes back
    trainer.save_states(path)
    trainer.load_states(path)
    assert isinstance(trainer._optimizer, fw.dadt.DistributedOptimizer)
    train(net, trainer, world.rank, steps=1, first=2)
    check(net, reference(start, world.size, steps=3))


def test_trainer_unwraps_distributed_optimizer(fw, world, nm):
    net = synced_net(fw, world, nm)
    opt = fw.dadt.DistributedOptimizer(mx.optimizer.SGD(learning_rate=LR))
    with pytest.warns(UserWarning, match="unwrapped"):
        trainer = fw.dadt.DistributedTrainer(net.collect_params(), opt, prefix=nm("g."))
    start = weights(net)
    train(net, trainer, world.rank)
    check(net, reference(start, world.size))  # averaged once, not twice


@pytest.mark.parametrize("kind", ["trainer", "optimizer"])
def test_process_set(fw, world, nm, halves, kind):
    """Each half of the ranks averages among itself (Horovod's process_set=)."""
    net = synced_net(fw, world, nm)
    start = weights(net)
    if kind == "trainer":
        trainer = fw.dadt.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": LR},
                                             prefix=nm("g."), process_set=halves)
    else:
        opt = fw.dadt.DistributedOptimizer(mx.optimizer.SGD(learning_rate=LR), process_set=halves)
        trainer = gluon.Trainer(net.collect_params(), opt, kvstore=None)
    train(net, trainer, world.rank, steps=2)
    check(net, reference(start, world.size, steps=2, ranks=halves.ranks))
