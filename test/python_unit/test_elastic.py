"""Elastic training's Python logic without a runtime (docs/elastic.md): ObjectState and TorchState
save/restore/sync, ElasticSampler's partitioning across resizes (every id of an epoch exactly once),
and the run loop's reset handling against a fake world."""
import collections

import pytest
import torch

from dadt.common import basics
from dadt.common import elastic
from dadt.common.exceptions import DadtInternalError, HorovodInternalError, WorkerRemovedError
from dadt.torch.elastic import ElasticSampler, TorchState


class FakeWorld:
    """size()/rank() for the sampler, and a log of what the run loop asked for."""

    def __init__(self, size=1, rank=0):
        self.size, self.rank = size, rank
        self.log = []


@pytest.fixture
def world(monkeypatch):
    w = FakeWorld()
    monkeypatch.setattr(basics, "size", lambda: w.size)
    monkeypatch.setattr(basics, "rank", lambda: w.rank)
    return w


def _bcast(obj, root_rank=0, name=None):
    return obj  # one rank: it is its own root


# ---------------------------------------------------------------------------- ObjectState


def test_object_state_restores_the_last_commit_not_later_changes():
    state = elastic.ObjectState(_bcast, lambda: 0, epoch=0, hist=[1])
    state.epoch = 3
    state.hist.append(2)
    state.save()
    state.epoch = 5
    state.hist.append(3)
    state.restore()
    assert state.epoch == 3 and state.hist == [1, 2]


def test_object_state_sync_takes_rank_zeros_saved_values():
    rank0 = {"epoch": 7, "batch": 2}
    state = elastic.ObjectState(lambda obj, root_rank=0, name=None: dict(rank0), lambda: 1,
                                epoch=0, batch=0)
    state.sync()
    assert (state.epoch, state.batch) == (7, 2)


def test_check_host_updates_is_decided_by_rank_zeros_broadcast(monkeypatch):
    monkeypatch.setenv("DADT_ELASTIC", "1")
    monkeypatch.setattr(elastic, "host_updates", lambda: pytest.fail("rank 1 must not read"))
    # Rank 1: whatever it would see itself, rank 0's answer raises here.
    state = elastic.ObjectState(lambda obj, root_rank=0, name=None: (True, True, None), lambda: 1,
                                epoch=0)
    with pytest.raises(elastic.HostsUpdatedInterrupt) as e:
        state.commit()
    assert e.value.skip_sync
    quiet = elastic.ObjectState(lambda obj, root_rank=0, name=None: (False, False, None),
                                lambda: 1, epoch=0)
    quiet.commit()  # rank 0 saw nothing: no interrupt


def test_a_store_that_does_not_answer_rank_zero_is_raised_on_every_rank(monkeypatch):
    monkeypatch.setenv("DADT_ELASTIC", "1")

    def silent_store():
        raise DadtInternalError("the launcher's store (dadtrun's rendezvous server at h:1) did "
                                "not answer within 2 s")

    monkeypatch.setattr(elastic, "host_updates", silent_store)
    sent = []

    def bcast(obj, root_rank=0, name=None):
        sent.append(obj)
        return obj

    with pytest.raises(elastic.LauncherUnreachableError, match="rank 0: .* did not answer"):
        elastic.ObjectState(bcast, lambda: 0, epoch=0).check_host_updates()
    assert not isinstance(elastic.LauncherUnreachableError("x"), DadtInternalError)  # no reset
    # Rank 1 takes no part in the read: it raises what rank 0 broadcast.
    with pytest.raises(elastic.LauncherUnreachableError, match="did not answer"):
        elastic.ObjectState(lambda obj, root_rank=0, name=None: sent[0], lambda: 1,
                            epoch=0).commit()


class FakeCore:
    def __init__(self, latest_round, notice, joined_round, notice_at_init, kinds):
        self.updates = (latest_round, notice)
        self.joined, self.at_init, self.kinds = joined_round, notice_at_init, kinds

    def elastic_updates(self):
        return self.updates

    def elastic_round(self):
        return self.joined

    def elastic_notice_at_init(self):
        return self.at_init

    def elastic_notice_kind(self, seq):
        return self.kinds[seq]


@pytest.mark.parametrize("core,expected", [
    (FakeCore(3, 2, 3, 2, {}), (False, False)),                                  # nothing new
    (FakeCore(3, 4, 3, 2, {3: "removed", 4: "removed"}), (True, True)),         # removals only
    (FakeCore(3, 4, 3, 2, {3: "removed", 4: "added"}), (True, False)),
    (FakeCore(3, 3, 3, 2, {3: "mixed"}), (True, False)),
    (FakeCore(4, 2, 3, 2, {}), (True, False)),         # a newer round without a notice (a failure)
])
def test_rank_zero_reads_notices_since_its_init_and_rounds_since_its_join(monkeypatch, core,
                                                                           expected):
    monkeypatch.setenv("DADT_ELASTIC", "1")
    monkeypatch.setattr(elastic, "_core", lambda: core)
    assert elastic.host_updates() == expected


def test_check_host_updates_outside_elastic_mode_takes_no_collective(monkeypatch):
    monkeypatch.delenv("DADT_ELASTIC", raising=False)
    state = elastic.ObjectState(lambda *a, **k: pytest.fail("no collective"), lambda: 0, epoch=0)
    state.commit()


def test_skip_sync_only_when_every_rank_may_skip():
    def views(*may_skip):
        return lambda obj, name=None: [(s, 4, None) for s in may_skip]

    log = []
    state = elastic.ObjectState(_bcast, lambda: 0, views(True, False, True), epoch=0)
    state.sync = lambda: log.append("sync")
    state.sync_after_init(True)
    assert log == ["sync"]
    state = elastic.ObjectState(_bcast, lambda: 0, views(True, True), epoch=0)
    state.sync = lambda: log.append("sync")
    state.sync_after_init(True)
    assert log == ["sync"]  # no second sync


# ---------------------------------------------------------------------------- ElasticSampler


def _epoch_ids_across_resizes(world, n, batch, sizes_at_steps, commit_every=1, fail_at=()):
    """Runs one epoch of an n-sample dataset in lockstep steps. Before step k the world has
    sizes_at_steps[k] ranks (the last entry holds on), each re-partitioning from the current
    progress (a reset at every step, the hardest case). A failure at a step in fail_at drops the
    work since the last commit (every rank restores it). Returns the ids of committed steps."""
    committed, pending = collections.Counter(), collections.Counter()
    current = saved = {"epoch": 0, "processed_num": 0}
    step = 0
    while True:
        size = sizes_at_steps[min(step, len(sizes_at_steps) - 1)]
        samplers = []
        world.size = size
        for r in range(size):
            world.rank = r
            samplers.append(ElasticSampler(list(range(n)), shuffle=True, seed=5))
            samplers[-1].load_state_dict(current)
        shards = [list(s) for s in samplers]
        if not any(shards):
            break
        for s, shard in zip(samplers, shards):  # one step; a rank with nothing left takes none
            pending.update(shard[:batch])
            s.record_batch(0, batch)
        current = samplers[0].state_dict()
        assert all(s.state_dict() == current for s in samplers)
        step += 1
        if step in fail_at:
            current, fail_at = saved, tuple(f for f in fail_at if f != step)
            pending.clear()
        elif step % commit_every == 0 or current["processed_num"] == n:
            saved = current
            committed.update(pending)
            pending.clear()
    return committed


@pytest.mark.parametrize("n,batch,sizes", [
    (100, 4, [3]),                     # no resize; 100 not divisible by 3 x 4
    (100, 4, [3, 3, 2, 2, 2]),         # shrink after two steps
    (97, 5, [2, 3, 3, 1, 4, 4, 4]),    # shrink and grow, odd sizes
    (10, 3, [4, 4, 7]),                # more ranks than what remains
    (1, 2, [3]),
    (0, 2, [2]),
])
def test_every_sample_exactly_once_per_epoch_across_resizes(world, n, batch, sizes):
    ids = _epoch_ids_across_resizes(world, n, batch, sizes)
    assert sorted(ids) == list(range(n))
    assert all(c == 1 for c in ids.values())


def test_work_after_the_last_commit_is_redone_once_not_lost_or_repeated(world):
    ids = _epoch_ids_across_resizes(world, 120, 4, [3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2],
                                    commit_every=3, fail_at=(4, 8))
    assert sorted(ids) == list(range(120)) and set(ids.values()) == {1}


def test_sampler_shards_are_disjoint_and_cover_the_rest(world):
    world.size = 3
    shards = []
    for r in range(3):
        world.rank = r
        s = ElasticSampler(range(50), shuffle=False)
        s.load_state_dict({"epoch": 0, "processed_num": 20})
        shards.append(list(s))
    assert sorted(sum(shards, [])) == list(range(20, 50))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_set_epoch_keeps_progress_when_reentering_and_restarts_a_new_epoch(world):
    world.size, world.rank = 2, 0
    s = ElasticSampler(range(40), shuffle=True, seed=1)
    s.set_epoch(3)
    first = list(s)
    s.record_batch(0, 5)
    s.set_epoch(3)  # the training function re-entered after a reset
    assert s.processed_num == 10 and len(list(s)) == 15
    s.set_epoch(4)
    assert s.processed_num == 0 and len(list(s)) == 20 and list(s) != first


# ---------------------------------------------------------------------------- TorchState


def test_torch_state_restores_model_optimizer_sampler_and_objects(world):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = ElasticSampler(range(10), shuffle=False)
    state = TorchState(model, opt, train_sampler=sampler, epoch=1)
    state.save()
    saved_w = model.weight.detach().clone()
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    sampler.record_batch(0, 4)
    state.epoch = 2
    assert not torch.equal(model.weight, saved_w)
    state.restore()
    assert torch.equal(model.weight, saved_w)
    assert opt.state_dict()["state"] == {}
    assert sampler.processed_num == 0 and state.epoch == 1
    assert state.model is model and state.optimizer is opt and state.train_sampler is sampler


def test_torch_state_reset_repartitions_the_sampler(world):
    world.size = 2
    sampler = ElasticSampler(range(10), shuffle=False)
    state = TorchState(train_sampler=sampler)
    assert len(sampler) == 5
    world.size = 1
    state.reset()
    assert len(sampler) == 10


# ---------------------------------------------------------------------------- run loop


class LoopState(elastic.ObjectState):
    def __init__(self, log):
        self.log = log
        super().__init__(_bcast, lambda: 0, lambda obj, name=None: [obj], step=0)

    def sync(self):
        self.log.append("sync")
        super().sync()

    def restore(self):
        self.log.append("restore")
        super().restore()

    def reset(self):
        self.log.append("state.reset")


def test_run_restores_and_resets_after_a_peer_failure_then_syncs():
    log = []
    state = LoopState(log)
    state.register_reset_callbacks([lambda: log.append("callback")])
    attempts = []

    def train(state):
        attempts.append(state.step)
        state.step = 5
        state.commit()
        state.step = 9
        if len(attempts) == 1:
            raise HorovodInternalError("peer died")
        return state.step

    result = elastic.run_fn(train, lambda: log.append("reset"))(state)
    assert result == 9 and attempts == [0, 5]  # re-entered from the commit, not from 9
    assert log == ["sync", "restore", "reset", "state.reset", "callback", "sync"]


def test_run_skips_restore_on_host_update_and_agrees_on_sync():
    log = []
    state = LoopState(log)
    calls = []

    def train(state):
        calls.append(1)
        if len(calls) == 1:
            state.step = 3
            raise elastic.HostsUpdatedInterrupt(skip_sync=True)
        return state.step

    assert elastic.run_fn(train, lambda: log.append("reset"))(state) == 3
    # one rank world that may skip: the agreement says skip, so only the first entry syncs
    assert log == ["sync", "reset", "state.reset"]


def test_run_retries_a_reset_whose_new_round_failed_and_gives_up_without_a_new_round(monkeypatch):
    monkeypatch.setenv("DADT_ELASTIC", "1")
    rounds = iter([1, 2, 2, 3, 3, 3])
    monkeypatch.setattr(elastic, "_joined_round", lambda: next(rounds))
    resets = []

    def reset():
        resets.append(1)
        if len(resets) == 1:
            raise DadtInternalError("a peer of round 2 died while connecting")

    elastic._reset_until_joined(reset)  # round 1 -> 2 failed, retried (2 -> 3) and joined
    assert len(resets) == 2

    def never_joins():
        raise DadtInternalError("no round within DADT_ELASTIC_TIMEOUT")

    with pytest.raises(DadtInternalError):
        elastic._reset_until_joined(never_joins)  # round 3 -> 3: joined nothing


def test_removed_worker_exits_zero():
    with pytest.raises(SystemExit) as e:
        raise WorkerRemovedError("removed in round 4")
    assert e.value.code == 0
    assert not isinstance(WorkerRemovedError(), Exception)
