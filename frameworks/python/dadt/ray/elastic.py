"""An elastic `RayExecutor` job: ``RayExecutor(settings, min_workers=.., max_workers=..)`` (Horovod's
ElasticRayExecutor semantics). The ranks are Ray actors on Ray's live nodes; the job goes on when a
node dies, as long as ``min_workers`` remain, and takes new nodes up to ``max_workers``.

    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), min_workers=1, max_workers=4)
    executor.start()
    results = executor.run(train_fn)   # train_fn wraps its loop in dadt.elastic.run; one result per rank
    executor.shutdown()

The ranks run dadt's elastic protocol unchanged (docs/elastic.md): each worker's ``init()`` joins the
rounds that a driver publishes in the job's rendezvous store, and ``dadt.elastic.run`` restores the
last commit and re-inits after a peer's death or a host update. Here the driver is this module, on
the Ray driver, in place of dadtrun's (dadtrun/elastic_driver.h), because dadtrun starts its workers
as processes, here or over ssh, and these workers are Ray actors placed by Ray. It keeps dadtrun's
rules (the round's keys and rank order in dadt/ray/_elastic_plan.py):

1. Store. `start()` starts one actor on Ray's head node (0 CPUs) that serves the store
   (``dadtrun --serve-store``) for every run; the head node is the one node whose loss ends the Ray
   cluster anyway, so the store never dies before the job's workers. Each `run()` serves a fresh
   store there (a new port); the driver writes into it through that actor (`DadtRayWorker.publish`),
   so it needs no route to the nodes.
2. Discovery, every second: ``ray.nodes()``'s live nodes; a node has
   ``CPU // cpus_per_worker`` slots (and ``GPU // gpus_per_worker`` with use_gpu). A free slot on a
   node that is not blacklisted gets a worker actor pinned to the node (NodeAffinity, not soft),
   up to ``max_workers`` workers in all.
3. A worker actor that is up (it answered `info`) gets its environment (dadt/ray/_places.py
   `elastic_env`: DADT_ELASTIC=1, its id ``<node ip>/<slot>/<n>``, the store, no rank) and runs
   fn; its ``init()`` waits for a round that names it.
4. Rounds. A round is published 0.3 s after the last event (so a node that loses several workers
   costs one reset) once ``min_workers`` workers are up and no worker is still being placed (or
   every one being placed has waited ``timeout_s``): first the notice ``added`` when new workers
   join a running job (the survivors' next ``commit()`` raises HostsUpdatedInterrupt), then the
   round's keys. Every round after the first is a reset; ``reset_limit`` ends the job before more.
5. A worker whose actor dies (its node died, its process was killed) is lost: the survivors'
   collectives fail, they re-init, and the next round goes without it. So is a worker of the latest
   round that the survivors' liveness watch names silent for the shutdown time (a frozen process,
   ``elastic/<round>/unresponsive/<rank>``, read every second): its actor is killed first. And so is
   a worker whose function raised DadtInternalError (its world failed where ``dadt.elastic.run``
   cannot retry: a first ``init()`` that came after its round's other ranks gave up on it). Its node rests: for the rest
   of the run without ``cooldown_range`` (Horovod's default), else MIN seconds, doubling on each
   repeat up to MAX. A node that left Ray is lost for good (a node that rejoins has a new id).
6. Fewer than ``min_workers`` workers up for ``elastic_timeout`` seconds: the run fails with
   RuntimeError naming the nodes lost.
7. The end: the first worker of the latest round that returns marks the round finished (a rank
   whose world failed after that learns from its ``init()`` that no round will come); `run` waits
   for the rest of that round and returns their results in rank order. A worker of that round
   whose function raised (not a peer's failure, which ``dadt.elastic.run`` handles) ends the run at
   once with WorkerError (any other exception: a bug every rank would hit). Every worker actor of the run is killed before `run` returns or raises.
"""
import dataclasses
import logging
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from dadt.common.exceptions import DadtInternalError
from dadt.ray import _elastic_plan, _places
from dadt.ray.worker import DadtRayWorker

logger = logging.getLogger(__name__)

SETTLE_S = 0.3      # dadtrun's wait for more events before it plans a round
DISCOVERY_S = 1.0   # dadtrun runs its discovery script every second too
TICK_S = 0.1
# A worker waits for its next round this much longer than elastic_timeout (DADT_ELASTIC_TIMEOUT), so
# that the driver's verdict (step 6, naming the nodes lost) ends the run, not a rank's own time-out.
WORKER_TIMEOUT_MARGIN_S = 30


def say(settings, message: str) -> None:
    """The driver's lines, as dadtrun's ("dadtrun: elastic: ..."), on the Ray driver's stderr."""
    logger.info(message)
    if getattr(settings, "verbose", 1):
        print("dadt.ray: elastic: " + message, file=sys.stderr, flush=True)


@dataclasses.dataclass
class ElasticParams:
    min_workers: int
    max_workers: Optional[int]
    reset_limit: Optional[int]
    cooldown_range: Optional[List[int]]
    elastic_timeout: int


@dataclasses.dataclass
class _Worker:
    id: str
    actor: Any
    node_id: str
    ip: str
    slot: int
    created: float
    ready_ref: Any
    info: Optional[Dict[str, Any]] = None
    run_ref: Any = None
    survivor: bool = False  # was in a published round
    gone: bool = False


def head_node_id() -> Optional[str]:
    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return node["NodeID"]
    return None


class StoreHolder:
    """The actor on the head node that serves each run's store (step 1)."""

    def __init__(self, settings):
        strategy = None
        head = head_node_id()
        if head is not None:
            strategy = NodeAffinitySchedulingStrategy(node_id=head, soft=False)
        self.actor = ray.remote(DadtRayWorker).options(num_cpus=0, scheduling_strategy=strategy,
                                                      max_restarts=0).remote()
        self.info = ray.get(self.actor.info.remote(), timeout=settings.placement_group_timeout_s)
        self.addr = self.info["ip"]
        self.port = 0
        self.pid = None
        self.secret = ""

    def serve(self, secret: str, env: Dict[str, str]) -> int:
        served = ray.get(self.actor.serve_store.remote(secret, env))
        self.port, self.pid, self.secret = served["port"], served["pid"], secret
        return self.port

    def publish(self, items) -> None:
        ray.get(self.actor.publish.remote(self.addr, self.port, self.secret, list(items)))

    def peek(self, keys: List[str]) -> Dict[str, str]:
        return ray.get(self.actor.peek.remote(self.addr, self.port, self.secret, list(keys)))

    def kill(self) -> None:
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception as e:  # already gone
            logger.debug("dadt.ray: killing the store's actor: %s", e)


class ElasticJob:
    """One `run()` of an elastic RayExecutor (the module docstring's steps 2-7)."""

    def __init__(self, executor, params: ElasticParams, store: StoreHolder, extra: Dict[str, str], secret: str):
        self.ex = executor
        self.settings = executor.settings
        self.params = params
        self.store = store
        self.extra = extra
        self.secret = secret
        self.workers: Dict[str, _Worker] = {}   # live ones (being placed, up, running)
        self.spawned = 0
        self.round = 0
        self.members: List[str] = []            # the latest round's worker ids, in rank order
        self.results: Dict[str, Any] = {}       # worker id -> fn's result, latest round
        self.finishing = False
        self.notice = 0
        self.added_since_round = False
        self.round_wanted = True
        self.last_event = time.monotonic()
        self.below_since: Optional[float] = None
        self.host_order: List[str] = []
        self.known_nodes: Dict[str, str] = {}   # node id -> ip, every node seen alive
        self.lost_nodes: Dict[str, str] = {}    # node id -> "ip (why, when)"
        self.rest_until: Dict[str, float] = {}  # node id -> monotonic time its rest ends
        self.failures: Dict[str, int] = {}
        self.next_discovery = 0.0
        self.fn_name = ""
        self.job_ref = None                     # ray.put((fn, args, kwargs)), shared by every worker

    # ---- discovery (step 2) -------------------------------------------------------------------

    def _slots(self, resources: Dict[str, float]) -> int:
        cpus = self.ex.cpus_per_worker
        slots = int(resources.get("CPU", 0) // cpus) if cpus else 1
        if self.ex.use_gpu:
            slots = min(slots, int(resources.get("GPU", 0) // self.ex.gpus_per_worker))
        return slots

    def _discover(self, now: float) -> None:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        alive = {n["NodeID"] for n in nodes}
        for node_id, ip in list(self.known_nodes.items()):
            if node_id not in alive and node_id not in self.lost_nodes:
                self.lost_nodes[node_id] = "%s (node %s left Ray at %s)" % (ip, node_id[:8], time.strftime("%H:%M:%S"))
                say(self.settings, "node %s (%s) left the Ray cluster" % (ip, node_id[:8]))
        # the head node first, then by address: the hosts' first-seen order is stable
        nodes.sort(key=lambda n: ("node:__internal_head__" not in n.get("Resources", {}), n["NodeManagerAddress"]))
        total = len(self.workers)
        cap = self.params.max_workers
        for node in nodes:
            node_id, ip = node["NodeID"], node["NodeManagerAddress"]
            self.known_nodes.setdefault(node_id, ip)
            if self.finishing or (cap is not None and total >= cap):
                break
            if self.rest_until.get(node_id, 0.0) > now:
                continue
            used = {w.slot for w in self.workers.values() if w.node_id == node_id}
            for slot in range(self._slots(node.get("Resources", {}))):
                if slot in used or (cap is not None and total >= cap):
                    continue
                self._spawn(node_id, ip, slot, now)
                total += 1

    def _spawn(self, node_id: str, ip: str, slot: int, now: float) -> None:
        self.spawned += 1
        wid = "%s/%d/%d" % (ip, slot, self.spawned)
        actor = ray.remote(DadtRayWorker).options(
            num_cpus=self.ex.cpus_per_worker, num_gpus=self.ex.gpus_per_worker, max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)).remote()
        self.workers[wid] = _Worker(wid, actor, node_id, ip, slot, now, actor.info.remote())
        if ip not in self.host_order:  # discovery's order (the head first), not the order the actors come up in
            self.host_order.append(ip)
        self.ex.workers.append(actor)  # shutdown() kills it whatever happens here

    # ---- events (steps 3, 5, 7) ---------------------------------------------------------------

    def _drop(self, w: _Worker) -> None:
        w.gone = True
        self.workers.pop(w.id, None)
        try:
            ray.kill(w.actor, no_restart=True)
        except Exception:
            pass

    def _kill_unresponsive(self, now: float) -> None:
        """A rank of the latest round that the survivors' liveness watch named silent for the
        shutdown time (DADT_LIVENESS_SHUTDOWN_TIME_SECONDS): its actor is killed and it is lost now,
        as dadtrun's driver does; a frozen process never ends by itself, and its peers wait for a
        round without it."""
        if not self.round or self.finishing:
            return
        keys = {_elastic_plan.unresponsive_key(self.round, rank): wid for rank, wid in enumerate(self.members)
                if wid in self.workers}
        if not keys:
            return
        try:
            found = self.store.peek(list(keys))
        except Exception as e:  # the store's actor is on the head node; a failed peek is retried next second
            logger.debug("dadt.ray: reading the liveness reports: %s", e)
            return
        for key, what in found.items():
            w = self.workers.get(keys[key])
            if w is not None:
                self._lost(w, "the survivors report it silent (%s); killing it" % what, now)

    def _lost(self, w: _Worker, cause: str, now: float) -> None:
        """``w`` is lost (``cause``: what happened, for the driver's line)."""
        node_alive = any(n["NodeID"] == w.node_id and n.get("Alive") for n in ray.nodes())
        if not node_alive:
            self.lost_nodes.setdefault(w.node_id, "%s (node %s left Ray at %s)"
                                       % (w.ip, w.node_id[:8], time.strftime("%H:%M:%S")))
            say(self.settings, "worker %s lost: its node %s left the Ray cluster" % (w.id, w.ip))
        else:
            self.failures[w.node_id] = self.failures.get(w.node_id, 0) + 1
            cooldown = self.params.cooldown_range
            if cooldown:
                rest = min(cooldown[0] * 2 ** (self.failures[w.node_id] - 1), cooldown[1])
                self.rest_until[w.node_id] = now + rest
                why = "rests %d s (cooldown_range)" % rest
            else:
                self.rest_until[w.node_id] = float("inf")
                why = "is not used again in this run (no cooldown_range)"
            self.lost_nodes.setdefault(w.node_id, "%s (worker %s died at %s)" % (w.ip, w.id, time.strftime("%H:%M:%S")))
            say(self.settings, "worker %s lost: %s; node %s %s" % (w.id, cause, w.ip, why))
        self._drop(w)
        self.round_wanted, self.last_event = True, now

    def _poll(self, now: float) -> None:
        placing = {w.ready_ref: w for w in self.workers.values() if w.info is None}
        running = {w.run_ref: w for w in self.workers.values() if w.run_ref is not None}
        refs = list(placing) + list(running)
        if not refs:
            return
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in done:
            if ref in placing:
                self._placed(placing[ref], ref, now)
            else:
                self._returned(running[ref], ref, now)

    def _placed(self, w: _Worker, ref, now: float) -> None:
        try:
            w.info = ray.get(ref)
        except ray.exceptions.RayError as e:  # the node died while the actor was placed
            say(self.settings, "worker %s could not start on %s: %s" % (w.id, w.ip, str(e).splitlines()[0][:200]))
            self._drop(w)
            return
        iface = next(iter(self.settings.nics)) if self.settings.nics else None
        env = _places.elastic_env(w.info, w.id, self.store.addr, self.store.port, self.secret,
                                  self.params.elastic_timeout + WORKER_TIMEOUT_MARGIN_S, self.settings.timeout_s,
                                  iface, self.extra)
        w.run_ref = w.actor.run_elastic.remote(env, self.job_ref)
        if self.round:
            self.added_since_round = True
        self.round_wanted, self.last_event = True, now

    def _returned(self, w: _Worker, ref, now: float) -> None:
        from dadt.ray.runner import WorkerError
        try:
            out = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            if self.finishing and w.id in self.members:
                raise WorkerError(self.members.index(w.id), len(self.members), self.fn_name, e, True) from e
            self._lost(w, "its actor died (%s)" % str(e).splitlines()[0][:200], now)
            return
        except ray.exceptions.RayError as e:
            if isinstance(e, DadtInternalError) and not self.finishing:
                # Its world failed where dadt.elastic.run cannot retry (the first init() of a worker
                # that reached its round after the others gave up on it, or no round came): a
                # failure of this worker, as dadtrun counts a worker's non-zero exit; not a bug.
                self._lost(w, "its world failed (%s)" % str(e).splitlines()[-1][:200], now)
                return
            # fn raised anything else: a bug, not a peer's failure
            rank = self.members.index(w.id) if w.id in self.members else -1
            raise WorkerError(rank, len(self.members), "%s (worker %s on %s, round %d)"
                              % (self.fn_name, w.id, w.ip, self.round), e, len(self.workers) > 1) from e
        if out.get("removed"):
            say(self.settings, "worker %s removed" % w.id)
            self._drop(w)
            return
        if w.id in self.members:
            self.results[w.id] = out["value"]
            w.run_ref = None
            if not self.finishing:
                self.finishing = True
                self.store.publish(_elastic_plan.finished_items(self.round, w.id))
                say(self.settings, "worker %s finished; waiting for the rest of round %d" % (w.id, self.round))
        else:
            say(self.settings, "worker %s returned outside the latest round; not counted" % w.id)
            self._drop(w)

    # ---- rounds (steps 4, 6) ------------------------------------------------------------------

    def _maybe_publish(self, now: float) -> None:
        if not self.round_wanted or self.finishing or now - self.last_event < SETTLE_S:
            return
        up = [w for w in self.workers.values() if w.run_ref is not None]
        placing = [w for w in self.workers.values() if w.info is None]
        enough = len(up) >= self.params.min_workers
        if enough and any(now - w.created < self.settings.timeout_s for w in placing):
            return  # wait for the workers being placed, a while
        if not enough:
            self.below_since = self.below_since or now
            if now - self.below_since > self.params.elastic_timeout:
                lost = sorted(set(self.lost_nodes.values()))
                raise RuntimeError(
                    "elastic RayExecutor: %d worker(s) up, fewer than min_workers=%d, for %d s (elastic_timeout); "
                    "nodes lost: %s; Ray's live nodes now: %s"
                    % (len(up), self.params.min_workers, self.params.elastic_timeout, ", ".join(lost) or "none",
                       ", ".join(sorted(n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")))))
            return
        self.below_since = None
        if self.round and self.params.reset_limit is not None and self.round > self.params.reset_limit:
            raise RuntimeError("elastic RayExecutor: reset limit reached: the job needs reset %d but reset_limit "
                               "is %d; nodes lost: %s" % (self.round, self.params.reset_limit,
                                                          ", ".join(sorted(set(self.lost_nodes.values()))) or "none"))
        candidates = [_elastic_plan.Candidate(w.id, w.info["ip"], w.slot, w.survivor) for w in up]
        members, left_out = _elastic_plan.plan_round(candidates, self.host_order, self.params.max_workers)
        items = []
        if self.round and self.added_since_round:
            self.notice += 1
            items += _elastic_plan.notice_items(self.notice, "added")
        self.round += 1
        items += _elastic_plan.round_items(self.round, members, removed=left_out)
        self.store.publish(items)
        self.members = [wid for wid, _ in members]
        for wid in self.members:
            self.workers[wid].survivor = True
        self.round_wanted, self.added_since_round = False, False
        hosts = []
        for wid in self.members:
            if self.workers[wid].ip not in hosts:
                hosts.append(self.workers[wid].ip)
        say(self.settings, "round %d: %d worker(s) on %s%s" % (
            self.round, len(self.members), ", ".join(hosts),
            "" if self.round == 1 else " (reset %d%s)" % (
                self.round - 1, "" if self.params.reset_limit is None else " of limit %d" % self.params.reset_limit)))

    # ---- the run ------------------------------------------------------------------------------

    def run(self, fn: Callable[..., Any], args: List, kwargs: Dict) -> List[Any]:
        from dadt.ray.runner import _fn_name
        self.fn_name = _fn_name(fn)
        self.job_ref = ray.put((fn, list(args), dict(kwargs)))
        try:
            while True:
                now = time.monotonic()
                if now >= self.next_discovery:
                    self._discover(now)
                    self._kill_unresponsive(now)
                    self.next_discovery = now + DISCOVERY_S
                self._poll(now)
                if self.finishing and all(wid in self.results for wid in self.members):
                    return [self.results[wid] for wid in self.members]
                self._maybe_publish(time.monotonic())
                time.sleep(TICK_S)
        finally:
            for w in list(self.workers.values()):
                self._drop(w)
            self.ex.workers = []


def check_params(min_workers, max_workers, reset_limit, cooldown_range, elastic_timeout,
                 override_discovery, whole: Callable) -> ElasticParams:
    """Horovod's elastic arguments, checked (RayExecutor's constructor)."""
    if override_discovery is not None and not override_discovery:
        raise ValueError("override_discovery=False: dadt.ray finds the hosts of an elastic job in Ray's list of "
                         "live nodes only (there is no discovery of your own to keep)")
    min_workers = whole("min_workers", 1 if min_workers is None else min_workers)
    if max_workers is not None:
        whole("max_workers", max_workers)
        if max_workers < min_workers:
            raise ValueError("max_workers (%d) is less than min_workers (%d)" % (max_workers, min_workers))
    if reset_limit is not None:
        whole("reset_limit", reset_limit, 0)
    if cooldown_range is not None:
        if len(cooldown_range) != 2 or not 0 < cooldown_range[0] <= cooldown_range[1]:
            raise ValueError("cooldown_range must be [MIN, MAX] seconds with 0 < MIN <= MAX, got %r"
                             % (cooldown_range,))
        cooldown_range = [int(cooldown_range[0]), int(cooldown_range[1])]
    elastic_timeout = whole("elastic_timeout", 600 if elastic_timeout is None else elastic_timeout)
    return ElasticParams(min_workers, max_workers, reset_limit, cooldown_range, elastic_timeout)

