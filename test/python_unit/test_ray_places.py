"""dadt.ray without a cluster: the ranks' places and environment from the hosts Ray put the workers on
(dadt/ray/_places.py), `import dadt.ray` without Ray, and RayExecutor's argument checks (these need Ray
installed, not running). The jobs themselves are test/integration/test_ray.py."""
import subprocess
import sys

import pytest

from dadt.ray import _places


def test_rank_order_groups_hosts_in_order_of_first_appearance():
    assert _places.rank_order(["a", "b", "a", "c", "b"]) == [0, 2, 1, 4, 3]
    assert _places.rank_order(["x"]) == [0]


def test_places_of_equal_hosts():
    got = _places.places(["a", "a", "b", "b"])
    assert [(p["rank"], p["local_rank"], p["local_size"], p["cross_rank"], p["cross_size"]) for p in got] == [
        (0, 0, 2, 0, 2), (1, 1, 2, 0, 2), (2, 0, 2, 1, 2), (3, 1, 2, 1, 2)]
    assert {p["size"] for p in got} == {4}


def test_places_of_unequal_hosts_follow_dadtrun():
    # dadtrun -H a:3,b:1: the cross rank counts earlier hosts with a rank of the same local rank.
    got = _places.places(["a", "a", "a", "b"])
    assert [(p["local_rank"], p["local_size"], p["cross_rank"], p["cross_size"]) for p in got] == [
        (0, 3, 0, 2), (1, 3, 0, 1), (2, 3, 0, 1), (0, 1, 1, 2)]


def test_places_keep_a_given_rank_order():
    # Ray Train fixes the ranks; hosts need not be consecutive.
    got = _places.places(["a", "b", "a"])
    assert [(p["local_rank"], p["local_size"], p["cross_rank"], p["cross_size"]) for p in got] == [
        (0, 2, 0, 2), (0, 1, 1, 2), (1, 2, 0, 1)]


def _info(ip, iface="eth0", gpus=(), env_set=()):
    return {"ip": ip, "iface": iface, "gpu_ids": list(gpus), "env_set": list(env_set)}


def test_job_envs_on_one_host():
    envs = _places.job_envs([_info("10.0.0.1"), _info("10.0.0.1")], addr="10.0.0.1", port=1234, secret="s" * 64,
                            start_timeout_s=45, extra={"DADT_CYCLE_TIME": 2, "DADT_RANK": "7"})
    for rank, env in enumerate(envs):
        assert env["DADT_RANK"] == env["RANK"] == str(rank)  # extra cannot change the contract
        assert env["DADT_SIZE"] == env["WORLD_SIZE"] == "2"
        assert (env["DADT_LOCAL_RANK"], env["DADT_LOCAL_SIZE"], env["DADT_CROSS_RANK"], env["DADT_CROSS_SIZE"]) \
            == (str(rank), "2", "0", "1")
        assert env["DADT_CONTROLLER"] == "gloo"
        assert (env["DADT_RENDEZVOUS_ADDR"], env["DADT_RENDEZVOUS_PORT"]) == ("10.0.0.1", "1234")
        assert env["DADT_SECRET"] == "s" * 64
        assert env["DADT_START_TIMEOUT"] == "45"
        assert env["DADT_CYCLE_TIME"] == "2"
        assert env["DADT_HOSTNAME"] == "10.0.0.1"
        assert "DADT_IFACE" not in env  # one host: loopback
        assert "CUDA_VISIBLE_DEVICES" not in env


def test_job_envs_across_hosts_bind_the_node_ip_interface():
    infos = [_info("10.0.0.1", "ens5"), _info("10.0.0.2", "eth1"), _info("10.0.0.3", "eth1", env_set=["DADT_IFACE"])]
    envs = _places.job_envs(infos, addr="10.0.0.1", port=1, secret="s" * 64)
    assert [e.get("DADT_IFACE") for e in envs] == ["ens5", "eth1", None]
    assert [e.get("GLOO_SOCKET_IFNAME") for e in envs] == ["ens5", "eth1", None]
    assert [e["DADT_CROSS_RANK"] for e in envs] == ["0", "1", "2"]
    # settings.nics: one interface everywhere; extra's DADT_IFACE wins over the automatic choice
    assert {e["DADT_IFACE"] for e in _places.job_envs(infos, "10.0.0.1", 1, "s" * 64, iface="ib0")} == {"ib0"}
    got = _places.job_envs(infos[:2], "10.0.0.1", 1, "s" * 64, extra={"DADT_IFACE": "lo"})
    assert [e["DADT_IFACE"] for e in got] == ["lo", "lo"]


def test_job_envs_share_a_host_s_gpus_in_local_rank_order():
    infos = [_info("a", gpus=["3"]), _info("a", gpus=["1"]), _info("b", gpus=["0"])]
    envs = _places.job_envs(infos, "a", 1, "s" * 64, use_gpu=True)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["3,1", "3,1", "0"]


def test_import_dadt_ray_needs_no_ray():
    code = "import sys, dadt.ray; assert 'ray' not in sys.modules, sorted(m for m in sys.modules if 'ray' in m)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 0, proc.stderr


def test_executor_arguments():
    pytest.importorskip("ray")
    from dadt.ray import RayExecutor
    settings = RayExecutor.create_settings(timeout_s=10)
    with pytest.raises(ValueError, match="num_workers.*num_hosts"):
        RayExecutor(settings, num_workers=2, num_hosts=2)
    with pytest.raises(ValueError, match="num_workers_per_host"):
        RayExecutor(settings, num_workers=2, num_workers_per_host=2)
    with pytest.raises(ValueError, match="num_workers must be"):
        RayExecutor(settings, num_workers=0)
    with pytest.raises(ValueError, match="gpus_per_worker"):
        RayExecutor(settings, num_workers=2, gpus_per_worker=1)
    with pytest.raises(ValueError, match="give num_workers"):
        RayExecutor(settings, use_current_placement_group=False)
    with pytest.raises(NotImplementedError, match="min_workers, max_workers.*docs/running.md"):
        RayExecutor(settings, min_workers=1, max_workers=4)
    with pytest.raises(ValueError, match="nics"):
        RayExecutor.create_settings(nics={"eth0", "eth1"})
    with pytest.raises(RuntimeError, match="start"):
        RayExecutor(settings, num_workers=2).run(print)
