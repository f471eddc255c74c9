"""`RayExecutor`: a dadt job whose ranks are Ray actors, with horovod.ray.RayExecutor's API.

    import ray
    import dadt.torch as dadt
    from dadt.ray import RayExecutor

    ray.init(address="auto")
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=4)
    executor.start()
    results = executor.run(train_fn, kwargs={"epochs": 3})   # train_fn calls dadt.init(); one result per rank
    executor.shutdown()

How `start()` makes the job (the package docstring, dadt/ray/__init__.py, says why this way):

1. A placement group: ``num_workers`` bundles of {CPU: cpus_per_worker, GPU: gpus_per_worker} packed
   (PACK), or ``num_hosts`` bundles of ``num_workers_per_host`` times that on distinct nodes
   (STRICT_SPREAD); or the placement group this driver runs in (use_current_placement_group).
2. One `dadt.ray.worker.DadtRayWorker` actor per rank in it. Each reports its node IP
   (``ray.util.get_node_ip_address()``), the interface holding it, and its GPUs.
3. Ranks: host by host (hosts in the order their first worker was created), then worker order
   (dadt/ray/_places.py); local and cross ranks by dadtrun's definitions.
4. Rank 0's actor starts ``dadtrun --serve-store`` (dadtrun/store_task.h), the job's rendezvous store,
   with a fresh 64-hex-digit secret (or extra_env_vars' DADT_SECRET).
5. Every actor gets DADT_RANK/SIZE, DADT_LOCAL_*, DADT_CROSS_*, DADT_CONTROLLER=gloo,
   DADT_RENDEZVOUS_ADDR (rank 0's node IP) and _PORT, DADT_SECRET, DADT_START_TIMEOUT (settings'
   timeout_s), DADT_HOSTNAME (its node IP), across hosts DADT_IFACE (the interface of its node IP),
   torchrun's RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE, then extra_env_vars.

The user's function calls ``dadt.init()`` itself and meets the other ranks in the store, exactly as
under dadtrun. With min_workers/max_workers the job is elastic instead: no placement group, the
workers follow Ray's live nodes, and `run` drives dadt's elastic rounds (dadt/ray/elastic.py).
"""
import dataclasses
import logging
import re
import secrets
from typing import Any, Callable, Dict, List, Optional, Set

import ray
from ray.util.placement_group import get_current_placement_group, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from dadt.ray import _places
from dadt.ray.worker import DadtRayWorker

logger = logging.getLogger(__name__)

_MIN_SECRET_LENGTH = 16  # dadtrun/store_task.h kMinSecretLength
_ELASTIC_ARGS = ("min_workers", "max_workers", "reset_limit", "cooldown_range", "elastic_timeout",
                 "override_discovery")


class WorkerError(RuntimeError):
    """A rank's function raised, or its actor died. ``rank`` is the rank; the message carries the
    worker's traceback (``__cause__`` is Ray's exception)."""

    def __init__(self, rank: int, size: int, what: str, error: BaseException, others_running: bool,
                 unit: str = "rank"):
        self.rank = rank
        self.size = size
        message = "%s %d of %d failed in %s: %s" % (unit, rank, size, what, _describe(error))
        if others_running:
            message += ("\n(the other ranks may still wait in a collective for rank %d: call shutdown() to "
                        "end the job)" % rank)
        super().__init__(message)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _describe(error: BaseException) -> str:
    """Ray's exception as a worker error's text: the worker's exception on the first line (for a
    function that raised, its last traceback line), then what Ray reports, with the worker's
    traceback, without colours or the caret lines under each frame."""
    lines = [ln.rstrip() for ln in _ANSI.sub("", str(error)).splitlines() if ln.strip(" ^~")]
    if not lines:
        return type(error).__name__
    first = lines[-1] if isinstance(error, ray.exceptions.RayTaskError) else lines[0]
    return "%s\nRay's report:\n%s" % (first, "\n".join("  " + ln for ln in lines))


@dataclasses.dataclass
class Settings:
    """What `RayExecutor.create_settings` makes (Horovod's MiniSettings). ``timeout_s``: seconds the
    ranks wait for each other at ``dadt.init()`` (DADT_START_TIMEOUT). ``placement_group_timeout_s``:
    seconds `start()` waits for the cluster to grant the placement group. ``nics``: the one network
    interface every rank binds (DADT_IFACE); None: each rank binds the interface of its node's IP when
    the job spans several hosts. ``ssh_identity_file``: accepted for Horovod's sake and unused (no ssh
    under Ray)."""
    timeout_s: int = 30
    placement_group_timeout_s: int = 100
    nics: Optional[Set[str]] = None
    ssh_identity_file: Optional[str] = None
    verbose: int = 1


def _whole(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError("%s must be an integer >= %d, got %r" % (name, minimum, value))
    return value


def _fn_name(fn: Callable) -> str:
    return "%s()" % getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))


def _gather(refs: List["ray.ObjectRef"], what: str, unit: str = "rank") -> List[Any]:
    """ray.get of one ref per rank, in rank order, raising WorkerError for the first rank that fails
    (as soon as it fails, not when the ranks before it are done)."""
    rank_of = {ref: rank for rank, ref in enumerate(refs)}
    results: List[Any] = [None] * len(refs)
    left = list(refs)
    while left:
        ready, left = ray.wait(left, num_returns=1)
        for ref in ready:
            rank = rank_of[ref]
            try:
                results[rank] = ray.get(ref)
            except ray.exceptions.RayError as e:
                raise WorkerError(rank, len(refs), what, e, bool(left), unit) from e
    return results


class RayExecutor:
    """A dadt job on a Ray cluster: one Ray actor per rank (horovod.ray.RayExecutor's API).

    Args:
        settings: `RayExecutor.create_settings(...)` (None: its defaults).
        num_workers: number of ranks, packed onto as few nodes as fit (PACK).
        num_hosts: instead of num_workers: this many nodes, each a different one (STRICT_SPREAD) ...
        num_workers_per_host: ... with this many ranks on each (default 1).
        cpus_per_worker: CPUs Ray reserves for each rank.
        use_gpu: reserve GPUs; each rank then sees every GPU of its host's ranks, its own at index
            ``dadt.local_rank()`` (CUDA_VISIBLE_DEVICES).
        gpus_per_worker: GPUs per rank (default 1 with use_gpu).
        use_current_placement_group: when this driver runs inside a placement group (a Ray Tune
            trial), start the ranks in it instead of creating one.
        min_workers, max_workers: an elastic job (Horovod's ElasticRayExecutor; dadt/ray/elastic.py):
            at least min_workers ranks (default 1), at most max_workers (default: a rank per free
            slot of every live node), one slot per cpus_per_worker CPUs (and gpus_per_worker GPUs);
            fn wraps its training in ``dadt.elastic.run``. Not with num_workers or num_hosts.
        reset_limit: the run fails instead of its (N+1)-th reset (default unlimited).
        cooldown_range: [MIN, MAX] s a node whose worker died rests, doubling on each repeat
            (default: not used again in that run, as in Horovod).
        elastic_timeout: seconds with fewer than min_workers ranks before the run fails (600).
        override_discovery: True or None only: the hosts are Ray's live nodes.
    """

    @classmethod
    def create_settings(cls, timeout_s: int = 30, ssh_identity_file: Optional[str] = None,
                        ssh_str: Optional[str] = None, placement_group_timeout_s: int = 100,
                        nics: Optional[Set[str]] = None) -> Settings:
        """Horovod's settings object. ``ssh_identity_file`` and ``ssh_str`` are accepted and ignored:
        the ranks are Ray actors, nothing is reached over ssh (and no key file is written)."""
        _whole("timeout_s", timeout_s)
        _whole("placement_group_timeout_s", placement_group_timeout_s)
        if nics is not None:
            nics = set([nics] if isinstance(nics, str) else nics)
            if len(nics) != 1:
                raise ValueError("nics: dadt binds one network interface on every rank (DADT_IFACE); got %r"
                                 % sorted(nics))
        return Settings(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s, nics=nics,
                        ssh_identity_file=ssh_identity_file)

    def __init__(self, settings: Optional[Settings] = None, num_workers: Optional[int] = None,
                 num_hosts: Optional[int] = None, num_workers_per_host: Optional[int] = None,
                 cpus_per_worker: float = 1, use_gpu: bool = False, gpus_per_worker: Optional[float] = None,
                 use_current_placement_group: bool = True, min_workers: Optional[int] = None,
                 max_workers: Optional[int] = None, reset_limit: Optional[int] = None,
                 cooldown_range: Optional[List[int]] = None, elastic_timeout: Optional[int] = None,
                 override_discovery: Optional[bool] = None):
        elastic = [n for n, v in zip(_ELASTIC_ARGS, (min_workers, max_workers, reset_limit, cooldown_range,
                                                      elastic_timeout, override_discovery)) if v is not None]
        self.elastic = None  # elastic.ElasticParams of an elastic job
        if elastic:
            if min_workers is None and max_workers is None:
                raise ValueError("%s go with min_workers/max_workers (an elastic job)" % ", ".join(elastic))
            if num_workers is not None or num_hosts is not None or num_workers_per_host is not None:
                raise ValueError("an elastic job (min_workers/max_workers) takes its ranks from Ray's live nodes; "
                                 "give no num_workers, num_hosts or num_workers_per_host")
            from dadt.ray import elastic as elastic_mod
            self.elastic = elastic_mod.check_params(min_workers, max_workers, reset_limit, cooldown_range,
                                                    elastic_timeout, override_discovery, _whole)
            use_current_placement_group = False
        if num_workers is not None and num_hosts is not None:
            raise ValueError("both num_workers (%r) and num_hosts (%r) given: give num_workers, or num_hosts "
                             "with num_workers_per_host" % (num_workers, num_hosts))
        if num_workers is not None and num_workers_per_host is not None:
            raise ValueError("num_workers_per_host goes with num_hosts, not with num_workers")
        if num_workers is not None:
            _whole("num_workers", num_workers)
        if num_hosts is not None:
            _whole("num_hosts", num_hosts)
        if num_workers_per_host is not None:
            _whole("num_workers_per_host", num_workers_per_host)
        if num_workers is None and num_hosts is None and not use_current_placement_group and self.elastic is None:
            raise ValueError("give num_workers, or num_hosts (and num_workers_per_host)")
        if not isinstance(cpus_per_worker, (int, float)) or isinstance(cpus_per_worker, bool) \
                or cpus_per_worker < 0:
            raise ValueError("cpus_per_worker must be a number >= 0, got %r" % (cpus_per_worker,))
        if gpus_per_worker is not None and not use_gpu:
            raise ValueError("gpus_per_worker is set (%r) but use_gpu is False; use_gpu must be True if "
                             "gpus_per_worker is set" % (gpus_per_worker,))
        if use_gpu and gpus_per_worker is not None and not gpus_per_worker > 0:
            raise ValueError("gpus_per_worker must be > 0, got %r" % (gpus_per_worker,))
        self.settings = settings if settings is not None else self.create_settings()
        self.num_workers = num_workers
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host or 1
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = bool(use_gpu)
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.use_current_placement_group = use_current_placement_group
        self.workers: List[Any] = []  # the actors, in rank order
        self.worker_info: List[Dict[str, Any]] = []  # node_info() of each rank
        self.store: Optional[Dict[str, Any]] = None  # {"addr", "port", "pid"}: rank 0's store
        self._placement_group = None
        self._created_placement_group = False
        self._elastic_store = None  # elastic.StoreHolder
        self._elastic_extra: Dict[str, str] = {}
        self._elastic_secret = ""
        self._elastic_store_env: Dict[str, str] = {}

    # ---- start --------------------------------------------------------------------------------

    def _resources(self, workers: int) -> Dict[str, float]:
        r = {"CPU": self.cpus_per_worker * workers}
        if self.use_gpu:
            r["GPU"] = self.gpus_per_worker * workers
        return {k: v for k, v in r.items() if v}

    def _make_placement_group(self):
        """(placement group, bundle index of each worker, created here?)."""
        current = get_current_placement_group() if self.use_current_placement_group else None
        if current is not None and self.num_hosts is None:
            num = self.num_workers or len(current.bundle_specs)
            logger.info("dadt.ray: starting %d ranks in the current placement group "
                        "(use_current_placement_group=False creates one instead)", num)
            return current, [-1] * num, False
        if self.num_hosts is not None:
            bundles = [self._resources(self.num_workers_per_host) for _ in range(self.num_hosts)]
            strategy = "STRICT_SPREAD"
            index = [b for b in range(self.num_hosts) for _ in range(self.num_workers_per_host)]
        else:
            if self.num_workers is None:
                raise ValueError("give num_workers, or num_hosts (and num_workers_per_host): this driver runs "
                                 "in no placement group to take the ranks from")
            bundles = [self._resources(1) for _ in range(self.num_workers)]
            strategy = "PACK"
            index = list(range(self.num_workers))
        bundles = [b or {"CPU": 0.001} for b in bundles]  # Ray refuses empty bundles
        pg = placement_group(bundles, strategy=strategy)
        ready, _ = ray.wait([pg.ready()], timeout=self.settings.placement_group_timeout_s)
        if not ready:
            remove_placement_group(pg)
            raise TimeoutError(
                "the Ray cluster did not grant the placement group (%d bundles of %s, %s) within %s s "
                "(placement_group_timeout_s); resources available now: %s"
                % (len(bundles), bundles[0], strategy, self.settings.placement_group_timeout_s,
                   ray.available_resources()))
        return pg, index, True

    def start(self, executable_cls: Optional[type] = None, executable_args: Optional[List] = None,
              executable_kwargs: Optional[Dict] = None, extra_env_vars: Optional[Dict[str, Any]] = None) -> None:
        """Starts the ranks' actors and sets their environment (see the module docstring).

        Args:
            executable_cls: a class instantiated in every actor after the environment is set (it may
                call ``dadt.init()`` in its constructor); `execute` passes the instance to its fn.
            executable_args, executable_kwargs: its constructor's arguments.
            extra_env_vars: more environment for every rank (dadt's knobs, DADT_IFACE, ...); it
                cannot change the contract variables (rank, size, the store), except that a
                DADT_SECRET of at least 16 characters replaces the drawn secret and a
                DADT_RENDEZVOUS_PORT fixes the store's port.
        """
        if self.workers:
            raise RuntimeError("this RayExecutor is already started; call shutdown() first")
        extra = {str(k): str(v) for k, v in (extra_env_vars or {}).items()}
        secret = extra.pop("DADT_SECRET", None) or secrets.token_hex(32)
        if len(secret) < _MIN_SECRET_LENGTH:
            raise ValueError("extra_env_vars: DADT_SECRET must have at least %d characters" % _MIN_SECRET_LENGTH)
        store_port = extra.pop("DADT_RENDEZVOUS_PORT", None)
        if self.elastic is not None:
            if executable_cls is not None:
                raise ValueError("executable_cls: an elastic job's ranks come and go; run() its function instead")
            if self._elastic_store is not None:
                raise RuntimeError("this RayExecutor is already started; call shutdown() first")
            from dadt.ray import elastic as elastic_mod
            try:
                self._elastic_store = elastic_mod.StoreHolder(self.settings)
            except BaseException:
                self.shutdown()
                raise
            self._elastic_extra, self._elastic_secret = extra, secret
            self._elastic_store_env = {"DADT_IFACE": next(iter(self.settings.nics))} if self.settings.nics else {}
            if store_port is not None:
                self._elastic_store_env["DADT_RENDEZVOUS_PORT"] = store_port
            return
        try:
            self._start(executable_cls, executable_args, executable_kwargs, extra, secret, store_port)
        except BaseException:
            self.shutdown()
            raise

    def _start(self, executable_cls, executable_args, executable_kwargs, extra, secret, store_port):
        pg, bundle_index, created = self._make_placement_group()
        self._placement_group, self._created_placement_group = pg, created
        actor_cls = ray.remote(DadtRayWorker)
        workers = []
        for index in bundle_index:
            strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=index,
                                                        placement_group_capture_child_tasks=False)
            workers.append(actor_cls.options(num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
                                             scheduling_strategy=strategy).remote())
        self.workers = workers  # creation order until ranked; shutdown() kills them either way
        infos = _gather([w.info.remote() for w in workers], "start() (starting its actor)", unit="worker")
        order = _places.rank_order([i["ip"] for i in infos])
        self.workers = [workers[i] for i in order]
        self.worker_info = [infos[i] for i in order]
        iface = next(iter(self.settings.nics)) if self.settings.nics else None
        envs = _places.job_envs(self.worker_info, addr=self.worker_info[0]["ip"], port=0, secret=secret,
                                start_timeout_s=self.settings.timeout_s, iface=iface, use_gpu=self.use_gpu,
                                extra=extra)
        server_env = {k: envs[0][k] for k in ("DADT_IFACE",) if k in envs[0]}
        if store_port is not None:
            server_env["DADT_RENDEZVOUS_PORT"] = store_port
        served = _gather([self.workers[0].serve_store.remote(secret, server_env)],
                         "start() (serving the rendezvous store)")[0]
        self.store = {"addr": self.worker_info[0]["ip"], "port": served["port"], "pid": served["pid"]}
        for env in envs:
            env["DADT_RENDEZVOUS_PORT"] = str(served["port"])
        _gather([w.set_env.remote(env) for w, env in zip(self.workers, envs)], "start() (setting the environment)")
        _gather([w.start_executable.remote(executable_cls, executable_args, executable_kwargs)
                 for w in self.workers], "start() (creating executable_cls)")

    # ---- running ------------------------------------------------------------------------------

    def _started(self) -> List[Any]:
        if self.elastic is not None:
            raise NotImplementedError("an elastic RayExecutor (min_workers/max_workers) runs functions with run() "
                                      "only, as Horovod's ElasticRayExecutor: its ranks change during the run")
        if not self.workers:
            raise RuntimeError("this RayExecutor is not started: call start() first")
        return self.workers

    def run(self, fn: Callable[..., Any], args: Optional[List] = None, kwargs: Optional[Dict] = None,
            callbacks: Optional[List[Callable]] = None) -> List[Any]:
        """fn(*args, **kwargs) on every rank at once; returns the results in rank order. A rank that
        raises (or whose actor dies) makes this raise WorkerError naming the rank, with its traceback,
        as soon as it happens. ``callbacks`` (Horovod's log callbacks) are not supported."""
        if callbacks:
            raise NotImplementedError("callbacks: dadt.ray does not forward the ranks' logs to callbacks; "
                                      "return values from fn instead")
        if self.elastic is not None:
            return self._run_elastic(fn, args, kwargs)
        return _gather(self.run_remote(fn, args, kwargs), _fn_name(fn))

    def run_remote(self, fn: Callable[..., Any], args: Optional[List] = None,
                   kwargs: Optional[Dict] = None) -> List["ray.ObjectRef"]:
        """As `run`, without waiting: one ObjectRef per rank, in rank order."""
        return [w.run.remote(fn, list(args or []), dict(kwargs or {})) for w in self._started()]

    def execute(self, fn: Callable[[Any], Any], callbacks: Optional[List[Callable]] = None) -> List[Any]:
        """fn(executable) on every rank, where executable is the instance of start()'s
        executable_cls (None without one); results in rank order."""
        if callbacks:
            raise NotImplementedError("callbacks: dadt.ray does not forward the ranks' logs to callbacks")
        return _gather([w.execute.remote(fn) for w in self._started()], _fn_name(fn))

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """fn(executable) on rank 0 only; its result."""
        return _gather([self._started()[0].execute.remote(fn)], _fn_name(fn))[0]

    def _run_elastic(self, fn, args, kwargs) -> List[Any]:
        """An elastic job's run (dadt/ray/elastic.py): the results of the last round's ranks, in rank
        order."""
        if self._elastic_store is None:
            raise RuntimeError("this RayExecutor is not started: call start() first")
        from dadt.ray import elastic as elastic_mod
        store = self._elastic_store
        store.serve(self._elastic_secret, self._elastic_store_env)
        self.store = {"addr": store.addr, "port": store.port, "pid": store.pid}
        job = elastic_mod.ElasticJob(self, self.elastic, store, self._elastic_extra, self._elastic_secret)
        return job.run(fn, list(args or []), dict(kwargs or {}))

    # ---- the end ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Kills every rank's actor (and with rank 0's the store it serves) and removes the placement
        group if start() created it. Safe to call twice, and after a failed start()."""
        workers, self.workers = self.workers, []
        for w in workers:
            try:
                ray.kill(w, no_restart=True)
            except Exception as e:  # already gone
                logger.debug("dadt.ray: killing an actor: %s", e)
        if self._placement_group is not None and self._created_placement_group:
            try:
                remove_placement_group(self._placement_group)
            except Exception as e:
                logger.debug("dadt.ray: removing the placement group: %s", e)
        self._placement_group, self._created_placement_group = None, False
        self.store = None
        store, self._elastic_store = self._elastic_store, None
        if store is not None:
            store.kill()

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
