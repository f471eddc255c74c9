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
