"""The elastic checkpoint without a runtime (docs/elastic.md, "When every host is replaced"): the
atomic write and the checked read, the plan the ranks agree on after an init(), and a TorchState
that commits on rank 0 and is resumed from the file by a fresh process."""
import os
import pickle

import pytest
import torch

from dadt.common import basics
from dadt.common import elastic
from dadt.common import elastic_checkpoint as ckpt
from dadt.common.elastic_checkpoint import ElasticCheckpointError, RankView, SyncPlan, choose_source


def _bcast(obj, root_rank=0, name=None):
    return obj  # one rank: it is its own root


# ---------------------------------------------------------------------------- write / read


def test_write_then_read_round_trips_and_leaves_no_temporary_file(tmp_path):
    path = str(tmp_path / "state.ckpt")
    ckpt.write_checkpoint(path, 3, {"a": [1, 2], "b": torch.arange(4)})
    ckpt.write_checkpoint(path, 4, {"a": [5], "b": torch.arange(2)})  # replaces it
    seq, state = ckpt.read_checkpoint(path, ["b", "a"])
    assert seq == 4 and state["a"] == [5] and torch.equal(state["b"], torch.arange(2))
    assert os.listdir(tmp_path) == ["state.ckpt"]


def test_a_failed_write_keeps_the_previous_commit_and_names_the_path(tmp_path):
    path = str(tmp_path / "state.ckpt")
    ckpt.write_checkpoint(path, 1, {"a": 1})
    with pytest.raises(ElasticCheckpointError, match="cannot write the elastic checkpoint " + path):
        ckpt.write_checkpoint(path, 2, {"a": lambda: 0})  # not picklable
    assert ckpt.read_checkpoint(path, ["a"]) == (1, {"a": 1})
    assert os.listdir(tmp_path) == ["state.ckpt"]
    missing_dir = str(tmp_path / "no" / "such" / "dir" / "state.ckpt")
    with pytest.raises(ElasticCheckpointError, match=missing_dir):
        ckpt.write_checkpoint(missing_dir, 1, {"a": 1})


def test_reading_a_bad_checkpoint_names_the_path_and_what_is_wrong(tmp_path):
    missing = str(tmp_path / "missing.ckpt")
    with pytest.raises(ElasticCheckpointError, match="cannot read the elastic checkpoint " + missing):
        ckpt.read_checkpoint(missing, ["a"])
    torn = tmp_path / "torn.ckpt"
    torn.write_bytes(pickle.dumps({"x": 1})[:5])
    with pytest.raises(ElasticCheckpointError, match="cannot read .*torn.ckpt"):
        ckpt.read_checkpoint(str(torn), ["a"])
    foreign = tmp_path / "foreign.ckpt"
    foreign.write_bytes(pickle.dumps({"seq": 1, "state": {}}))
    with pytest.raises(ElasticCheckpointError, match="foreign.ckpt is not a dadt elastic checkpoint"):
        ckpt.read_checkpoint(str(foreign), ["a"])
    other = str(tmp_path / "other.ckpt")
    ckpt.write_checkpoint(other, 1, {"model": 1, "<objects>": {}})
    with pytest.raises(ElasticCheckpointError, match="other.ckpt does not match this job's state"):
        ckpt.read_checkpoint(other, ["model", "optimizer", "<objects>"])


# ---------------------------------------------------------------------------- the agreement


def test_choose_source():
    p = "/shared/job.ckpt"
    # every rank may skip (a removal only): no sync
    assert choose_source([RankView(True, 5, p), RankView(True, 5, p)]) == SyncPlan("skip")
    # a new worker (seq 0, may not skip) forces the sync, from the first rank with the newest commit
    assert choose_source([RankView(False, 0, p), RankView(True, 5, p), RankView(True, 5, p)]) == \
        SyncPlan("rank", root_rank=1, commit_seq=5)
    assert choose_source([RankView(False, 7, None), RankView(False, 7, None)]) == \
        SyncPlan("rank", root_rank=0, commit_seq=7)
    # nobody holds a commit: the checkpoint if one is named, else rank 0's fresh state
    assert choose_source([RankView(False, 0, p)] * 3) == SyncPlan("checkpoint", checkpoint_path=p)
    assert choose_source([RankView(False, 0, None)] * 2) == SyncPlan("rank", 0, 0)
    with pytest.raises(ElasticCheckpointError, match="different elastic checkpoints"):
        choose_source([RankView(False, 0, p), RankView(False, 0, "/other.ckpt")])


class _Recorded(elastic.StateHandler):
    """A value in a one-element list; records the root rank of each sync."""

    def __init__(self, value, roots):
        self.roots = roots
        super().__init__(value)

    def capture(self):
        return list(self.value)

    def apply(self, saved):
        self.value[:] = saved

    def sync(self, root_rank, bcast_object):
        self.roots.append(root_rank)


def _state(rank, views, value, roots, bcast=_bcast, **objects):
    state = elastic.ObjectState(bcast, lambda: rank, lambda obj, name=None: views, **objects)
    state.add_handler("value", _Recorded(value, roots))
    return state


def test_sync_comes_from_the_rank_with_the_newest_commit_and_adopts_its_sequence():
    roots = []
    state = _state(0, [(False, 0, None), (False, 0, None), (False, 6, None)], [1], roots)
    state.sync_after_init(False)
    assert roots == [2] and state._commit_seq == 6


# ---------------------------------------------------------------------------- State + checkpoint


def test_rank_zero_writes_each_commit_and_a_fresh_world_resumes_from_it(tmp_path, monkeypatch):
    path = str(tmp_path / "job.ckpt")
    monkeypatch.setenv("DADT_ELASTIC_CHECKPOINT", path)
    monkeypatch.delenv("DADT_ELASTIC", raising=False)
    value = [1]
    old = _state(0, [], value, [], epoch=0)
    for epoch in (1, 2):
        value[0] = 10 * epoch
        old.epoch = epoch
        old.commit()
    value[0], old.epoch = 99, 3  # never committed
    assert ckpt.read_checkpoint(path, ["value", "<objects>"]) == \
        (2, {"value": [20], "<objects>": {"epoch": 2}})
    # rank 1 never writes
    with monkeypatch.context() as m:
        m.setattr(ckpt, "write_checkpoint", lambda *a: pytest.fail("rank 1 wrote"))
        _state(1, [], [5], [], epoch=0,
               bcast=lambda obj, root_rank=0, name=None: (False, False, None)).commit()

    # Every original process is gone: new ones hold no commit, rank 0 loads the file.
    roots = []
    fresh_value = [0]
    fresh = _state(0, [(False, 0, path), (False, 0, path)], fresh_value, roots, epoch=0)
    fresh.sync_after_init(False)
    assert fresh_value == [20] and fresh.epoch == 2 and fresh._commit_seq == 2 and roots == [0]
    fresh.epoch = 5
    fresh.restore()  # the loaded commit is what a later failure restores
    assert fresh.epoch == 2


def test_an_unreadable_checkpoint_or_a_failed_write_is_raised_on_every_rank(tmp_path, monkeypatch):
    path = str(tmp_path / "job.ckpt")
    monkeypatch.setenv("DADT_ELASTIC_CHECKPOINT", path)
    monkeypatch.delenv("DADT_ELASTIC", raising=False)
    (tmp_path / "job.ckpt").write_bytes(b"not a pickle")
    views = [(False, 0, path), (False, 0, path)]
    with pytest.raises(ElasticCheckpointError, match="cannot read the elastic checkpoint " + path):
        _state(0, views, [0], [], epoch=0).sync_after_init(False)
    # Rank 1 does not read the file: it raises what rank 0 broadcast.
    rank0_says = "cannot read the elastic checkpoint %s: UnpicklingError" % path
    with pytest.raises(ElasticCheckpointError, match=rank0_says):
        _state(1, views, [0], [], epoch=0,
               bcast=lambda obj, root_rank=0, name=None: (0, rank0_says)).sync_after_init(False)
    # A write that fails on rank 0 reaches rank 1 through the commit's broadcast.
    with pytest.raises(ElasticCheckpointError, match="cannot write"):
        _state(1, views, [0], [], epoch=0, bcast=lambda obj, root_rank=0, name=None:
               (False, False, ("checkpoint", "cannot write the elastic checkpoint %s: disk full"
                                % path))).commit()
    (tmp_path / "job.ckpt").unlink()
    roots = []
    _state(0, views, [0], roots, epoch=0).sync_after_init(False)  # absent: a fresh start
    assert roots == [0]


def test_torch_state_resumes_model_optimizer_sampler_and_epoch(tmp_path, monkeypatch):
    from dadt.torch.elastic import ElasticSampler, TorchState
    from dadt.torch.elastic import state as torch_state
    monkeypatch.setattr(basics, "size", lambda: 1)
    monkeypatch.setattr(basics, "rank", lambda: 0)
    monkeypatch.setattr(torch_state, "broadcast_object", _bcast)
    monkeypatch.setattr(torch_state, "allgather_object", lambda obj, name=None: [obj])
    monkeypatch.setattr(torch_state, "broadcast_parameters", lambda params, root_rank: None)
    monkeypatch.setattr(torch_state, "broadcast_optimizer_state", lambda opt, root_rank: None)
    monkeypatch.setenv("DADT_ELASTIC_CHECKPOINT", str(tmp_path / "torch.ckpt"))
    monkeypatch.delenv("DADT_ELASTIC", raising=False)

    def make(seed):
        torch.manual_seed(seed)
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sampler = ElasticSampler(range(20), shuffle=False)
        return model, opt, sampler, TorchState(model, opt, train_sampler=sampler, epoch=1)

    model, opt, sampler, state = make(0)
    model(torch.ones(4, 3)).sum().backward()
    opt.step()
    sampler.record_batch(0, 4)
    state.epoch = 3
    state.commit()
    committed = {k: v.clone() for k, v in model.state_dict().items()}

    model2, opt2, sampler2, state2 = make(1)
    assert not torch.equal(model2.weight, committed["weight"])
    state2.sync_after_init(False)
    assert all(torch.equal(model2.state_dict()[k], v) for k, v in committed.items())
    assert torch.equal(opt2.state_dict()["state"][0]["momentum_buffer"],
                       opt.state_dict()["state"][0]["momentum_buffer"])
    assert sampler2.processed_num == 4 and state2.epoch == 3 and state2._commit_seq == 1
