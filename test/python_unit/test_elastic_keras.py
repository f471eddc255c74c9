"""The Keras elastic callbacks and KerasState's save/restore, without a runtime
(dadt.keras.elastic; docs/elastic.md, "Keras")."""
import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
keras = pytest.importorskip("keras")

from dadt.keras import elastic  # noqa: E402


class Counter:
    def __init__(self):
        self.commits = 0
        self.epoch = 0
        self.batch = 0

    def commit(self):
        self.commits += 1


def _batches(cb, n):
    for b in range(n):
        cb.on_batch_begin(b)
        cb.on_batch_end(b)


def test_commit_every_n_batches_and_once_per_epoch_after_the_others_callbacks():
    state = Counter()
    cb = elastic.CommitStateCallback(state, batches_per_commit=3)
    cb.on_train_begin()
    cb.on_epoch_begin(0)
    _batches(cb, 7)
    assert state.commits == 2  # at the start of batches 3 and 6
    cb.on_epoch_end(0)
    assert state.commits == 2  # not yet: the epoch callbacks after this one have not run
    cb.on_epoch_begin(1)
    assert state.commits == 3
    cb.on_train_begin()  # after a reset the count starts again, on every rank alike
    _batches(cb, 3)
    assert state.commits == 3
    cb.on_train_end()
    assert state.commits == 4
    with pytest.raises(ValueError, match="batches_per_commit"):
        elastic.CommitStateCallback(state, batches_per_commit=0)


def test_epoch_and_batch_state_follow_fit_across_a_reset():
    state = Counter()
    epochs, batches = elastic.UpdateEpochStateCallback(state), elastic.UpdateBatchStateCallback(state)
    batches.set_params({"steps": 10, "epochs": 5})
    epochs.on_train_begin()
    batches.on_train_begin()
    batches.on_epoch_begin(0)
    batches.on_batch_end(9)
    batches.on_epoch_end(0)
    epochs.on_epoch_end(0)
    batches.on_epoch_begin(1)
    for b in range(4):
        batches.on_batch_end(b)
    assert (state.epoch, state.batch) == (1, 4)
    # reset: fit starts again (Keras counts epochs from 0); 4 batches were done, 6 remain
    epochs.on_train_begin()
    batches.on_train_begin()
    batches.set_params({"steps": 10, "epochs": 4})
    batches.on_epoch_begin(0)
    assert batches.params["steps"] == 6
    batches.on_batch_end(0)
    assert state.batch == 5  # counted with the 4 done before the reset
    batches.on_epoch_end(0)
    epochs.on_epoch_end(0)
    assert (state.epoch, state.batch) == (2, 0)


def test_keras_state_restores_weights_optimizer_and_objects():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    state = elastic.KerasState(model, epoch=4)
    saved = [w.copy() for w in model.get_weights()]
    model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=1, verbose=0)
    state.epoch = 9
    assert any(not np.array_equal(a, b) for a, b in zip(saved, model.get_weights()))
    state.restore()
    assert all(np.array_equal(a, b) for a, b in zip(saved, model.get_weights()))
    assert state.epoch == 4
    assert all(not np.any(keras.ops.convert_to_numpy(v.value)) for v in model.optimizer.variables
               if "momentum" in v.path)


def test_tensorflow_state_restores_variables_and_objects_and_refuses_sessions():
    import tensorflow as tf
    from dadt.tensorflow import elastic as tf_elastic
    assert tf_elastic.TensorFlowKerasState is elastic.KerasState
    w = tf.Variable([1.0, 2.0])
    b = tf.Variable(3.0)
    state = tf_elastic.TensorFlowState([w, b], batch=5)
    w.assign([7.0, 8.0])
    b.assign(9.0)
    state.batch = 11
    state.restore()  # back to the values at construction (the last save)
    assert w.numpy().tolist() == [1.0, 2.0] and b.numpy() == 3.0 and state.batch == 5
    w.assign([4.0, 4.0])
    state.save()
    w.assign([0.0, 0.0])
    state.restore()
    assert w.numpy().tolist() == [4.0, 4.0]
    with pytest.raises(ValueError, match="TensorFlow 1 sessions"):
        tf_elastic.TensorFlowState([w], session=object())


def test_keras_and_tensorflow_states_resume_from_the_elastic_checkpoint(tmp_path, monkeypatch):
    """The same checkpoint path as TorchState's (dadt.common.elastic_checkpoint): a fresh process
    (another model's weights, no commit) takes rank 0's file at its first sync."""
    import tensorflow as tf
    from dadt.common import array_ops, basics
    from dadt.tensorflow import elastic as tf_elastic
    monkeypatch.setattr(basics, "rank", lambda: 0)
    monkeypatch.setattr(array_ops, "broadcast_object", lambda obj, root_rank=0, name=None: obj)
    monkeypatch.setattr(array_ops, "allgather_object", lambda obj, name=None: [obj])
    monkeypatch.setattr(elastic, "broadcast_variables", lambda *a, **k: None)  # one rank
    monkeypatch.delenv("DADT_ELASTIC", raising=False)

    def keras_state(seed):
        keras.utils.set_random_seed(seed)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
        return model, elastic.KerasState(model, epoch=0)

    monkeypatch.setenv("DADT_ELASTIC_CHECKPOINT", str(tmp_path / "keras.ckpt"))
    model, state = keras_state(0)
    model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=1, verbose=0)
    state.epoch = 1
    state.commit()
    model2, state2 = keras_state(1)
    assert not np.array_equal(model.get_weights()[0], model2.get_weights()[0])
    state2.sync_after_init(False)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), model2.get_weights()))
    assert state2.epoch == 1

    monkeypatch.setenv("DADT_ELASTIC_CHECKPOINT", str(tmp_path / "tf.ckpt"))
    w = tf.Variable([1.0, 2.0])
    tf_state = tf_elastic.TensorFlowState([w], batch=3)
    w.assign([5.0, 6.0])
    tf_state.commit()
    w2 = tf.Variable([0.0, 0.0])
    fresh = tf_elastic.TensorFlowState([w2], batch=0)
    fresh.sync_after_init(False)
    assert w2.numpy().tolist() == [5.0, 6.0] and fresh.batch == 3
