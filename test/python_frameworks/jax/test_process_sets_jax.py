"""Process sets in dadt.jax: allreduce eagerly and under jax.jit, allgather, and
average_gradients, on the even and the odd ranks as two sets at once."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dadt.jax as dadt


def test_allreduce_and_allgather_on_a_set(world, nm, halves):
    x = jnp.full((3,), float(world.rank))
    out = dadt.allreduce(x, name=nm("x"), op=dadt.Sum, process_set=halves)
    jitted = jax.jit(lambda v: dadt.allreduce(v, name=nm("jit"), process_set=halves))(x)
    gathered = dadt.allgather(jnp.full((1,), world.rank), name=nm("ag"), process_set=halves)
    np.testing.assert_array_equal(np.asarray(out), np.full(3, float(sum(halves.ranks))))
    np.testing.assert_allclose(np.asarray(jitted), np.full(3, np.mean(halves.ranks)))
    np.testing.assert_array_equal(np.asarray(gathered), np.array(halves.ranks))


def test_average_gradients_on_a_set(world, nm, halves):
    optax = pytest.importorskip("optax")
    tx = dadt.DistributedOptimizer(optax.sgd(1.0), name=nm("g"), process_set=halves)
    params = {"w": jnp.zeros(2)}
    updates, _ = tx.update({"w": jnp.full(2, float(world.rank))}, tx.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["w"]), np.full(2, -np.mean(halves.ranks)))


def test_rank_outside_the_set_keeps_its_gradients(world, nm):
    """Horovod's rule: a rank outside the set takes no part and keeps its own gradients (the set
    is every rank but the last; the last rank's update is its own gradient)."""
    optax = pytest.importorskip("optax")
    if world.size < 2:
        pytest.skip("a rank outside a set needs 2 ranks")
    members = list(range(world.size - 1))
    ps = dadt.add_process_set(members)
    try:
        tx = dadt.DistributedOptimizer(optax.sgd(1.0), name=nm("g"), process_set=ps)
        params = {"w": jnp.zeros(2)}
        updates, _ = tx.update({"w": jnp.full(2, float(world.rank))}, tx.init(params), params)
        want = -float(world.rank) if world.rank not in members else -np.mean(members)
        np.testing.assert_allclose(np.asarray(updates["w"]), np.full(2, want))
    finally:
        dadt.remove_process_set(ps)
