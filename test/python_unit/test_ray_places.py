"""dadt.ray without a cluster: the ranks' places and environment from the hosts Ray put the workers on
(dadt/ray/_places.py), `import dadt.ray` without Ray, and RayExecutor's argument checks (these need Ray
installed, not running), and an elastic job's rounds (dadt/ray/_elastic_plan.py): the rank order, the keys
published, and the client that writes them. The jobs themselves are test/integration/test_ray.py."""
import socket
import struct
import subprocess
import sys
import threading

import pytest

from dadt.ray import _elastic_plan, _places


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
    # an elastic job (dadt/ray/elastic.py)
    assert RayExecutor(settings, min_workers=1, max_workers=4).elastic.elastic_timeout == 600
    assert RayExecutor(settings, max_workers=4).elastic.min_workers == 1
    with pytest.raises(ValueError, match="give no num_workers"):
        RayExecutor(settings, num_workers=2, min_workers=1)
    with pytest.raises(ValueError, match="max_workers .1. is less than min_workers .2."):
        RayExecutor(settings, min_workers=2, max_workers=1)
    with pytest.raises(ValueError, match="go with min_workers/max_workers"):
        RayExecutor(settings, num_workers=2, reset_limit=3)
    with pytest.raises(ValueError, match="override_discovery=False"):
        RayExecutor(settings, min_workers=1, override_discovery=False)
    with pytest.raises(ValueError, match="cooldown_range"):
        RayExecutor(settings, min_workers=1, cooldown_range=[10, 1])
    with pytest.raises(ValueError, match="nics"):
        RayExecutor.create_settings(nics={"eth0", "eth1"})
    with pytest.raises(RuntimeError, match="start"):
        RayExecutor(settings, num_workers=2).run(print)



def _c(wid, host, slot, survivor):
    return _elastic_plan.Candidate(wid, host, slot, survivor)


def test_round_puts_survivors_first_and_rank_0_on_the_oldest_surviving_host():
    # h1 lost its survivor; h2 keeps one; a new worker on h1 and one on h3
    cands = [_c("h1/1/4", "h1", 1, False), _c("h2/0/2", "h2", 0, True), _c("h2/1/5", "h2", 1, False),
             _c("h3/0/6", "h3", 0, False)]
    members, left = _elastic_plan.plan_round(cands, ["h1", "h2", "h3"])
    assert [wid for wid, _ in members] == ["h2/0/2", "h2/1/5", "h1/1/4", "h3/0/6"] and left == []
    assert [(p["rank"], p["local_rank"], p["local_size"], p["cross_rank"], p["cross_size"]) for _, p in members] == [
        (0, 0, 2, 0, 3), (1, 1, 2, 0, 1), (2, 0, 1, 1, 3), (3, 0, 1, 2, 3)]
    # within a host: survivors before new workers, whatever the slot
    members, _ = _elastic_plan.plan_round([_c("a/0/3", "a", 0, False), _c("a/1/1", "a", 1, True)], ["a"])
    assert [wid for wid, _ in members] == ["a/1/1", "a/0/3"]


def test_round_caps_at_max_workers_keeping_survivors():
    cands = [_c("a/0/3", "a", 0, False), _c("b/0/1", "b", 0, True), _c("c/0/4", "c", 0, False)]
    members, left = _elastic_plan.plan_round(cands, ["a", "b", "c"], max_workers=2)
    assert [wid for wid, _ in members] == ["b/0/1", "a/0/3"] and left == ["c/0/4"]


def test_round_items_follow_the_contract_order():
    members, _ = _elastic_plan.plan_round([_c("x/0/1", "x", 0, True), _c("y/0/2", "y", 0, False)], ["x", "y"])
    items = _elastic_plan.round_items(3, members, removed=["z/0/3"])
    assert items == [("elastic/round/3/assign/x/0/1", "0 2 0 1 0 2"), ("elastic/round/3/assign/y/0/2", "1 2 0 1 1 2"),
                     ("elastic/round/3/assign/z/0/3", "removed"), ("elastic/round/3/size", "2"),
                     ("elastic/round", "3")]
    assert _elastic_plan.notice_items(2, "added") == [("elastic/notice/2", "added"), ("elastic/notice", "2")]
    assert _elastic_plan.finished_items(3, "x/0/1") == [("elastic/round/3/finished", "x/0/1")]


def test_store_client_never_sends_the_secret_and_checks_the_store_s_proof():
    """A listener that does not know the secret (it answers the handshake with a made-up proof) is
    not taken for dadt's store, and what the client sent it does not contain the secret."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    received = []

    def serve():
        conn, _ = server.accept()
        with conn:
            challenge = bytes([2]) + b"n" * 32
            conn.sendall(struct.pack("<I", len(challenge)) + challenge)
            (n,) = struct.unpack("<I", conn.recv(4, socket.MSG_WAITALL))
            received.append(conn.recv(n, socket.MSG_WAITALL))
            welcome = struct.pack("<BI", 0, 32) + b"p" * 32
            conn.sendall(struct.pack("<I", len(welcome)) + welcome)
            conn.recv(1)
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    secret = "s" * 16
    with pytest.raises(ConnectionError, match="did not prove that it knows the job secret"):
        _elastic_plan.store_set("127.0.0.1", server.getsockname()[1], secret, [("elastic/round", "1")])
    thread.join(5)
    assert len(received) == 1 and len(received[0]) == 1 + 32 + 32
    assert secret.encode() not in received[0]


def test_store_get_reads_what_store_set_wrote_in_dadtruns_store():
    """The driver's reads (a survivor's report of a silent rank) against the real store, dadtrun --serve-store."""
    from dadt.ray import worker
    secret = "k" * 32
    port = worker.serve_store(secret, {"DADT_IFACE": ""})["port"]
    try:
        key = _elastic_plan.unresponsive_key(3, 1)
        assert key == "elastic/3/unresponsive/1"
        assert _elastic_plan.store_get("127.0.0.1", port, secret, [key]) == {}
        _elastic_plan.store_set("127.0.0.1", port, secret, [(key, "rank 1 on host h2 stopped answering")])
        got = _elastic_plan.store_get("127.0.0.1", port, secret, [_elastic_plan.unresponsive_key(3, 0), key])
        assert got == {key: "rank 1 on host h2 stopped answering"}
        # One connection, in order: what the ranks see of a round's publication.
        _elastic_plan.store_set("127.0.0.1", port, secret, [("elastic/round/1/size", "2"), ("elastic/round", "1")])
        assert _elastic_plan.store_get("127.0.0.1", port, secret, ["elastic/round", "elastic/round/1/size"]) == {
            "elastic/round": "1", "elastic/round/1/size": "2"}
        with pytest.raises(ConnectionError, match="refused the job secret"):
            _elastic_plan.store_get("127.0.0.1", port, "x" * 32, [key])
    finally:
        worker.stop_store()


def test_elastic_env_has_no_rank():
    info = {"ip": "10.0.0.2", "iface": "eth1", "env_set": []}
    env = _places.elastic_env(info, "10.0.0.2/0/3", "10.0.0.1", 4242, "k" * 64, 630, 30,
                              extra={"DADT_RANK": "5", "DADT_FUSION_THRESHOLD": "0"})
    assert env["DADT_ELASTIC"] == "1" and env["DADT_ELASTIC_WORKER_ID"] == "10.0.0.2/0/3"
    assert env["DADT_ELASTIC_TIMEOUT"] == "630" and env["DADT_IFACE"] == "eth1" and env["DADT_FUSION_THRESHOLD"] == "0"
    assert env["DADT_RENDEZVOUS_ADDR"] == "10.0.0.1" and env["DADT_RENDEZVOUS_PORT"] == "4242"
    assert not any(n in env for n in _places.ELASTIC_UNSET), env
