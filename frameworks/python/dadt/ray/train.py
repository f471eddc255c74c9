"""A Ray Train backend for dadt: Ray Train starts and supervises the workers (its ScalingConfig,
FailureConfig, checkpoints, datasets), dadt carries the gradients.

    import ray.train
    from ray.train import ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from dadt.ray import DadtConfig

    def train_fn(config):
        import dadt.torch as dadt
        dadt.init()                       # meets the other workers: DadtBackend.on_start set the environment
        ...                               # dadt.DistributedOptimizer, allreduce, ...
        ray.train.report({"loss": loss})

    DataParallelTrainer(train_fn, backend_config=DadtConfig(),
                        scaling_config=ScalingConfig(num_workers=2)).fit()

`DadtBackend.on_start` runs where Ray Train sets a backend up (V2: in the train controller, after the
worker group started, before the training function runs). It asks each worker where it runs, starts
the rendezvous store in worker 0 (the package docstring says why there), and sets every worker's
DADT_* environment, exactly as `RayExecutor.start` does. dadt's rank is Ray Train's world rank (the
worker group's order); local and cross ranks group the workers by node IP, as Ray Train does, so
``dadt.local_rank()`` is ``ray.train.get_context().get_local_rank()``.

Ray Train's workers are started with ``share_cuda_visible_devices``: each sees every GPU of its node's
workers, its own at index ``dadt.local_rank()``.
"""
import dataclasses
import logging
import secrets
from typing import Any, Dict, Optional

import ray
from ray.train.backend import Backend, BackendConfig

from dadt.ray import _places
from dadt.ray import worker as _worker

logger = logging.getLogger(__name__)

_STOP_TIMEOUT_S = 10


@dataclasses.dataclass
class DadtConfig(BackendConfig):
    """dadt as Ray Train's backend.

    Args:
        timeout_s: seconds the workers wait for each other at ``dadt.init()`` (DADT_START_TIMEOUT).
        nics: the network interface every worker binds (DADT_IFACE); None: across nodes, each
            worker binds the interface that holds its node's IP.
        extra_env_vars: more environment for every worker (dadt's knobs), as RayExecutor.start's.
    """
    timeout_s: int = 30
    nics: Optional[str] = None
    extra_env_vars: Optional[Dict[str, Any]] = None

    @property
    def backend_cls(self):
        return DadtBackend

    def to_dict(self) -> Dict[str, Any]:
        return {"timeout_s": self.timeout_s, "nics": self.nics}


class DadtBackend(Backend):
    share_cuda_visible_devices: bool = True

    def on_start(self, worker_group, backend_config: DadtConfig):
        extra = {str(k): str(v) for k, v in (backend_config.extra_env_vars or {}).items()}
        secret = extra.pop("DADT_SECRET", None) or secrets.token_hex(32)
        store_port = extra.pop("DADT_RENDEZVOUS_PORT", None)
        infos = worker_group.execute(_worker.node_info)
        envs = _places.job_envs(infos, addr=infos[0]["ip"], port=0, secret=secret,
                                start_timeout_s=backend_config.timeout_s, iface=backend_config.nics, extra=extra)
        server_env = {k: envs[0][k] for k in ("DADT_IFACE",) if k in envs[0]}
        if store_port is not None:
            server_env["DADT_RENDEZVOUS_PORT"] = store_port
        served = worker_group.execute_single(0, _worker.serve_store, secret, server_env)
        for env in envs:
            env["DADT_RENDEZVOUS_PORT"] = str(served["port"])
        ray.get([worker_group.execute_single_async(i, _worker.set_env, env) for i, env in enumerate(envs)])
        logger.info("dadt: %d workers on %d node(s) meet at %s:%d", len(envs), len({i["ip"] for i in infos}),
                    infos[0]["ip"], served["port"])

    def on_shutdown(self, worker_group, backend_config: DadtConfig):
        # The runtime (when the training function left it running) and worker 0's store; a worker
        # still stuck in a collective is left to Ray Train, which kills the workers next.
        try:
            ray.get(worker_group.execute_async(_stop_worker), timeout=_STOP_TIMEOUT_S)
        except Exception as e:
            logger.warning("dadt: stopping the workers' runtime: %s", e)


def _stop_worker():
    _worker.shutdown_dadt()
    _worker.stop_store()
