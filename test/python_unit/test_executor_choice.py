"""init(broad_cast_executor=..., all_reduce_executor=...): each checked on its own (a refusal names
its argument), and the two may differ where one is 'nccl': the other's collectives then stage
their GPU tensors through host memory. The runtime's engine choice is replaced by a table here
(runtime/backends/engine_choice.h has its own table test)."""
import pytest

from dadt.common import basics
from dadt.common.util import (OP_ALLGATHER, OP_ALLREDUCE, OP_ALLTOALL, OP_BROADCAST,
                              OP_REDUCESCATTER)


@pytest.fixture
def engines(monkeypatch):
    """A machine with a GPU and NCCL, launched by mpirun: (control, host, device) per executor."""
    table = {None: ("mpi", "mpi", "nccl"), "mpi": ("mpi", "mpi", ""), "nccl": ("mpi", "mpi", "nccl")}

    def choose(executor, with_comm):
        if executor not in table:
            error = basics._core.CoreError()
            error.code, error.message = 3, "executor %r is not available here" % executor
            raise error
        return table[executor]

    monkeypatch.setattr(basics._core, "choose_engines", choose)
    monkeypatch.setattr(basics, "is_initialized", lambda: False)
    monkeypatch.setattr(basics, "_host_staged_ops", frozenset())
    return table


def test_the_same_executor_twice_stages_nothing(engines):
    assert basics._pick_backend("nccl", "nccl", False) == "nccl"
    assert not any(basics.host_staged(op) for op in (OP_ALLREDUCE, OP_BROADCAST))


def test_nccl_broadcast_with_mpi_allreduce_stages_the_reductions(engines):
    assert basics._pick_backend("nccl", "mpi", False) == "nccl"
    assert not basics.host_staged(OP_BROADCAST)
    for op in (OP_ALLREDUCE, OP_ALLGATHER, OP_ALLTOALL, OP_REDUCESCATTER):
        assert basics.host_staged(op)


def test_mpi_broadcast_with_nccl_allreduce_stages_the_broadcasts(engines):
    assert basics._pick_backend("MPI", "nccl", False) == "nccl"
    assert basics.host_staged(OP_BROADCAST) and not basics.host_staged(OP_ALLREDUCE)


def test_a_host_engine_other_than_the_launchs_is_refused(engines):
    engines["gloo"] = ("tcp", "gloo", "")
    with pytest.raises(ValueError, match="broad_cast_executor='gloo'.*this launch's host engine, 'mpi'"):
        basics._pick_backend("gloo", "nccl", False)
    with pytest.raises(ValueError, match="may differ only where one of them is 'nccl'"):
        basics._pick_backend("gloo", "mpi", False)


def test_each_refusal_names_its_argument(engines):
    with pytest.raises(Exception, match="all_reduce_executor='mpicuda': executor 'mpicuda' is not"):
        basics._pick_backend("nccl", "mpicuda", False)
