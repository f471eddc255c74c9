"""dadt.jax beyond the shared suite: pytrees, jit, the optax transformation, parameter broadcast."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dadt.jax as dadt


def _tree(rank):
    return {"w": jnp.full((2, 3), rank, jnp.float32), "b": [jnp.full((1,), rank, jnp.bfloat16),
                                                             jnp.arange(5, dtype=jnp.int32) + rank]}


def test_pytree_allreduce_broadcast_allgather(world, nm):
    summed = dadt.allreduce(_tree(world.rank), name=nm("ar"), op=dadt.Sum)
    root = dadt.broadcast(_tree(world.rank), world.size - 1, name=nm("bc"))
    gathered = dadt.allgather(_tree(world.rank), name=nm("ag"))
    total = sum(range(world.size))
    assert jax.tree_util.tree_structure(summed) == jax.tree_util.tree_structure(_tree(0))
    np.testing.assert_array_equal(summed["w"], np.full((2, 3), total, np.float32))
    assert summed["b"][0].dtype == jnp.bfloat16 and float(summed["b"][0][0]) == total
    np.testing.assert_array_equal(summed["b"][1], np.arange(5) * world.size + total)
    np.testing.assert_array_equal(root["w"], np.full((2, 3), world.size - 1, np.float32))
    assert gathered["w"].shape == (2 * world.size, 3)
    np.testing.assert_array_equal(gathered["w"][::2, 0], np.arange(world.size))


def test_pytree_under_jit(world, nm):
    f = jax.jit(lambda t: dadt.allreduce(t, name=nm(), op=dadt.Max))
    out = f(_tree(world.rank))
    np.testing.assert_array_equal(out["w"], np.full((2, 3), world.size - 1, np.float32))


def test_reducescatter_under_jit(world, nm):
    n = world.size
    x = jnp.ones((2 * n + 1, 2), jnp.float32) * (world.rank + 1)
    out = jax.jit(lambda t: dadt.reducescatter(t, name=nm(), op=dadt.Sum))(x)
    rows = 2 + (1 if world.rank == 0 else 0)
    np.testing.assert_array_equal(out, np.full((rows, 2), sum(range(1, n + 1)), np.float32))


def test_alltoall_under_jit_is_refused(world, nm):
    with pytest.raises(NotImplementedError, match="eagerly"):
        jax.jit(lambda t: dadt.alltoall(t, name=nm()))(jnp.ones((world.size, 1)))


def test_broadcast_parameters(world, nm):
    params = dadt.broadcast_parameters(_tree(world.rank), root_rank=0, name=nm())
    np.testing.assert_array_equal(params["b"][1], np.arange(5))
    np.testing.assert_array_equal(params["w"], np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_average_gradients(world, nm, jit):
    params = {"w": jnp.zeros(3), "v": jnp.zeros((2,), jnp.float64)}
    grads = {"w": jnp.full(3, float(world.rank + 1)), "v": jnp.full((2,), float(world.rank), jnp.float64)}
    tx = dadt.DistributedOptimizer(optax.sgd(1.0), name=nm())
    state = tx.init(params)
    update = jax.jit(tx.update) if jit else tx.update
    for _ in range(2):  # twice: the jitted step reuses its names
        updates, state = update(grads, state, params)
    mean = sum(range(1, world.size + 1)) / world.size
    np.testing.assert_allclose(updates["w"], np.full(3, -mean), rtol=1e-6)
    np.testing.assert_allclose(updates["v"], np.full(2, -(world.size - 1) / 2), rtol=1e-12)


def test_average_gradients_in_chain_sum(world, nm):
    tx = optax.chain(dadt.average_gradients(op=dadt.Sum, name=nm()), optax.scale(1.0))
    updates, _ = tx.update({"g": jnp.ones(2)}, tx.init({"g": jnp.zeros(2)}))
    np.testing.assert_array_equal(updates["g"], np.full(2, world.size, np.float32))


def test_objects(world, nm):
    obj = dadt.broadcast_object({"r": world.rank}, root_rank=world.size - 1, name=nm("b"))
    every = dadt.allgather_object(world.rank * 2, name=nm("g"))
    assert obj == {"r": world.size - 1} and every == [2 * r for r in range(world.size)]
