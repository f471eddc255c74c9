"""dadt.common.torchrun: the job's place from torchrun's (or a PyTorchJob pod's) variables, and when init()
leaves the environment alone. The meeting itself is test/integration/test_torchrun.py."""
import os

import pytest

from dadt.common import torchrun

TORCH_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
               "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID")


def test_geometry_from_torchrun():
    env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
           "GROUP_WORLD_SIZE": "2"}
    assert torchrun._geometry(env) == {"DADT_RANK": 5, "DADT_SIZE": 8, "DADT_LOCAL_RANK": 1, "DADT_LOCAL_SIZE": 4,
                                       "DADT_CROSS_RANK": 1, "DADT_CROSS_SIZE": 2}


def test_geometry_without_group_names_follows_the_local_size():
    env = {"RANK": "6", "WORLD_SIZE": "8", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}
    got = torchrun._geometry(env)
    assert (got["DADT_CROSS_RANK"], got["DADT_CROSS_SIZE"]) == (1, 2)


def test_geometry_of_a_pod_without_torchrun_is_one_rank_per_node():
    # A PyTorchJob sets RANK to the pod's index and WORLD_SIZE to the number of pods.
    assert torchrun._geometry({"RANK": "2", "WORLD_SIZE": "3"}) == {
        "DADT_RANK": 2, "DADT_SIZE": 3, "DADT_LOCAL_RANK": 0, "DADT_LOCAL_SIZE": 1, "DADT_CROSS_RANK": 2,
        "DADT_CROSS_SIZE": 3}


@pytest.mark.parametrize("env, says", [
    ({"RANK": "2", "WORLD_SIZE": "2"}, "no place"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, "no place"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
])
def test_bad_geometry_is_refused(env, says):
    with pytest.raises(RuntimeError, match=says):
        torchrun._geometry(env)


@pytest.mark.parametrize("env", [
    {"DADT_RANK": "1", "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},  # dadtrun's
    {"DADT_CONTROLLER": "gloo", "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
    {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"},  # one rank: nothing to meet
    {"RANK": "1", "WORLD_SIZE": "2"},  # no torch store to meet in: the runtime says to use dadtrun
    {"OMPI_COMM_WORLD_SIZE": "2", "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},  # mpirun
])
def test_join_job_leaves_other_environments_alone(monkeypatch, env):
    for name in TORCH_NAMES + ("DADT_RANK", "DADT_CONTROLLER", "DADT_RENDEZVOUS_ADDR", "DADT_SECRET",
                               "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    torchrun.join_job()
    assert "DADT_RENDEZVOUS_ADDR" not in os.environ and "DADT_SECRET" not in os.environ
