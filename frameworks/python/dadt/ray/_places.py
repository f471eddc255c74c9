"""Each Ray worker's place in a dadt job, from the hosts its workers landed on. Pure Python (no Ray):
the driver of `RayExecutor` and the Ray Train backend (`DadtConfig`) both compute the job's geometry
here, and test/python_unit/test_ray_places.py checks it without a cluster.

A host is a node IP address as Ray reports it (``ray.util.get_node_ip_address()`` in the worker), as
Ray Train groups its workers: two Ray nodes on one address (several raylets on one machine) are one
host. The definitions are dadtrun's and Horovod's (docs/running.md, "Running on several hosts"): the
local rank counts the ranks before this one on its host, the local size is the number of ranks on the
host, the cross rank counts the earlier hosts that also have a rank with this local rank, and the cross
size is the number of hosts that have one (with equal counts everywhere: the host's index and the
number of hosts).
"""
from typing import Dict, List, Optional, Sequence


def rank_order(hosts: Sequence[str]) -> List[int]:
    """The workers' indices in rank order: host by host, hosts in the order in which they first
    appear in ``hosts`` (the host of worker 0 first), and on each host in worker order. dadtrun fills
    the hosts the same way, so the ranks of one host are consecutive."""
    seen: Dict[str, List[int]] = {}
    for index, host in enumerate(hosts):
        seen.setdefault(host, []).append(index)
    return [index for indices in seen.values() for index in indices]


def places(hosts: Sequence[str]) -> List[Dict[str, int]]:
    """The place of the worker at each rank, where ``hosts[rank]`` is that rank's host. Ranks need
    not be grouped by host (Ray Train fixes its own rank order); each entry has rank, size,
    local_rank, local_size, cross_rank, cross_size."""
    size = len(hosts)
    by_host: Dict[str, List[int]] = {}
    local_rank = []
    for rank, host in enumerate(hosts):
        ranks = by_host.setdefault(host, [])
        local_rank.append(len(ranks))
        ranks.append(rank)
    host_order = list(by_host)
    result = []
    for rank, host in enumerate(hosts):
        lr = local_rank[rank]
        # hosts with a rank of this local rank, in host order
        having = [h for h in host_order if len(by_host[h]) > lr]
        result.append({"rank": rank, "size": size, "local_rank": lr, "local_size": len(by_host[host]),
                       "cross_rank": having.index(host), "cross_size": len(having)})
    return result


def contract_env(place: Dict[str, int]) -> Dict[str, str]:
    """The launcher -> worker variables of one place (dadtrun's names and torchrun's, as dadtrun
    sets them; docs/running.md, "The environment of each rank")."""
    return {
        "DADT_RANK": str(place["rank"]),
        "DADT_SIZE": str(place["size"]),
        "DADT_LOCAL_RANK": str(place["local_rank"]),
        "DADT_LOCAL_SIZE": str(place["local_size"]),
        "DADT_CROSS_RANK": str(place["cross_rank"]),
        "DADT_CROSS_SIZE": str(place["cross_size"]),
        "RANK": str(place["rank"]),
        "WORLD_SIZE": str(place["size"]),
        "LOCAL_RANK": str(place["local_rank"]),
        "LOCAL_WORLD_SIZE": str(place["local_size"]),
    }


# What a worker's environment may already choose for itself (node_info reports which are set there).
IFACE_VARS = ("DADT_IFACE", "HOROVOD_GLOO_IFACE")
SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
# The variables that only the driver sets: extra_env_vars cannot change a rank's place or the store.
CONTRACT_VARS = ("DADT_RANK", "DADT_SIZE", "DADT_LOCAL_RANK", "DADT_LOCAL_SIZE", "DADT_CROSS_RANK",
                 "DADT_CROSS_SIZE", "DADT_CONTROLLER", "DADT_RENDEZVOUS_ADDR", "DADT_RENDEZVOUS_PORT",
                 "DADT_SECRET", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def _iface_env(info: Dict, iface: Optional[str], multi_host: bool, extra: Dict[str, str]) -> Dict[str, str]:
    """The interface a rank binds: ``iface`` (Horovod's settings.nics), else across hosts the
    interface of its node IP, unless its environment or ``extra`` names one; torch's own groups get
    it too, as under dadtrun --network-interface."""
    chosen = iface
    if chosen is None and multi_host and not any(n in extra for n in IFACE_VARS) \
            and not any(n in info.get("env_set", ()) for n in IFACE_VARS):
        chosen = info.get("iface")
    if not chosen:
        return {}
    env = {"DADT_IFACE": chosen}
    env.update({name: chosen for name in SOCKET_IFNAME_VARS if name not in info.get("env_set", ())})
    return env


def job_envs(infos: Sequence[Dict], addr: str, port: int, secret: str, start_timeout_s: Optional[int] = None,
             iface: Optional[str] = None, use_gpu: bool = False,
             extra: Optional[Dict[str, str]] = None) -> List[Dict[str, str]]:
    """Every rank's environment, ``infos[rank]`` being what `dadt.ray.worker.node_info` reported in
    that rank's worker. ``iface``: the interface every rank binds (Horovod's settings.nics); None:
    across hosts, each rank binds the interface that holds its node's IP, unless its environment or
    ``extra`` names one. ``use_gpu``: each rank sees every GPU Ray gave the job's workers on its host,
    in local-rank order, so that device ``local_rank()`` is its own. ``extra`` (extra_env_vars)
    comes last, except for the contract variables."""
    extra = {k: str(v) for k, v in (extra or {}).items()}
    hosts = [info["ip"] for info in infos]
    multi_host = len(set(hosts)) > 1
    gpus_of_host: Dict[str, List[str]] = {}
    for info in infos:
        gpus_of_host.setdefault(info["ip"], []).extend(info.get("gpu_ids") or [])
    envs = []
    for info, place in zip(infos, places(hosts)):
        env = {"DADT_HOSTNAME": info["ip"]}
        if start_timeout_s is not None:
            env["DADT_START_TIMEOUT"] = str(int(start_timeout_s))
        env.update(_iface_env(info, iface, multi_host, extra))
        if use_gpu and gpus_of_host[info["ip"]]:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus_of_host[info["ip"]])
        env.update(extra)
        env.update(contract_env(place))
        env.update({"DADT_CONTROLLER": "gloo", "DADT_RENDEZVOUS_ADDR": addr, "DADT_RENDEZVOUS_PORT": str(port),
                    "DADT_SECRET": secret})
        envs.append(env)
    return envs


# What the rounds of an elastic job assign instead of the environment (docs/elastic.md, "Identities").
ELASTIC_UNSET = CONTRACT_VARS[:6] + CONTRACT_VARS[10:]


def elastic_env(info: Dict, worker_id: str, addr: str, port: int, secret: str, elastic_timeout_s: int,
                start_timeout_s: int, iface: Optional[str] = None,
                extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment of one worker of an elastic job, as dadtrun gives its elastic workers
    (dadtrun/elastic_launch.h): DADT_ELASTIC=1, its worker id, DADT_ELASTIC_TIMEOUT, the store and
    the secret, and no rank or size, which each round assigns. The job may span hosts at any round,
    so each worker binds the interface of its node IP unless ``iface``, its environment or ``extra``
    names one. ``extra`` (extra_env_vars) cannot change the contract variables."""
    extra = {k: str(v) for k, v in (extra or {}).items() if k not in CONTRACT_VARS + ELASTIC_UNSET}
    env = {"DADT_HOSTNAME": info["ip"], "DADT_START_TIMEOUT": str(int(start_timeout_s))}
    env.update(_iface_env(info, iface, True, extra))
    env.update(extra)
    env.update({"DADT_ELASTIC": "1", "DADT_ELASTIC_WORKER_ID": worker_id,
                "DADT_ELASTIC_TIMEOUT": str(int(elastic_timeout_s)), "DADT_CONTROLLER": "gloo",
                "DADT_RENDEZVOUS_ADDR": addr, "DADT_RENDEZVOUS_PORT": str(port), "DADT_SECRET": secret})
    return env
