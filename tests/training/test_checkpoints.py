"""Checkpoints: atomic writes, keeping the last N, state, best model, averaging (Section 6.1)."""

import json
import os

import h5py
import keras
import numpy as np
import pytest

from keras_transformer.training import checkpoints as ckpt


def _model(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def test_atomic_save_weights_leaves_only_the_final_file(tmp_path):
    model = _model(0)
    path = tmp_path / "a.weights.h5"
    ckpt.atomic_save_weights(model, path)
    assert sorted(os.listdir(tmp_path)) == ["a.weights.h5"]
    other = _model(1)
    other.load_weights(path)
    for a, b in zip(model.get_weights(), other.get_weights()):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="weights.h5"):
        ckpt.atomic_save_weights(model, tmp_path / "a.h5")


def test_remove_partial_files(tmp_path):
    (tmp_path / "tmp-123-ckpt-00000001.weights.h5").write_bytes(b"half")
    (tmp_path / "ckpt-00000001.weights.h5").write_bytes(b"x")
    removed = ckpt.remove_partial_files(tmp_path)
    assert [os.path.basename(p) for p in removed] == ["tmp-123-ckpt-00000001.weights.h5"]
    assert os.listdir(tmp_path) == ["ckpt-00000001.weights.h5"]


def test_average_checkpoints_is_the_elementwise_mean(tmp_path):
    models = [_model(seed) for seed in range(3)]
    paths = []
    for i, m in enumerate(models):
        paths.append(tmp_path / f"ckpt-{i:08d}.weights.h5")
        ckpt.atomic_save_weights(m, paths[-1])
    assert ckpt.list_checkpoints(tmp_path) == [str(p) for p in paths]
    out = ckpt.average_checkpoints(paths, tmp_path / "avg.weights.h5")
    target = _model(9)
    target.load_weights(out)
    for i, w in enumerate(target.get_weights()):
        expected = (models[0].get_weights()[i] + models[1].get_weights()[i] + models[2].get_weights()[i]) / 3
        np.testing.assert_allclose(w, expected, rtol=1e-6)
    with pytest.raises(ValueError, match="at least one"):
        ckpt.average_checkpoints([], tmp_path / "x.weights.h5")
    with pytest.raises(ValueError, match="weights.h5"):
        ckpt.average_checkpoints(paths, tmp_path / "x.h5")


def test_average_rejects_different_architectures(tmp_path):
    a = _model(0)
    keras.utils.set_random_seed(0)
    b = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    ckpt.atomic_save_weights(a, tmp_path / "a.weights.h5")
    b.save_weights(tmp_path / "b.weights.h5")
    with pytest.raises(ValueError):
        ckpt.average_checkpoints([tmp_path / "a.weights.h5", tmp_path / "b.weights.h5"], tmp_path / "o.weights.h5")


def test_resumable_checkpoint_keeps_last_n_and_state(tmp_path):
    model = _model(0)
    x = np.ones((12, 3), "float32")
    saver = ckpt.ResumableCheckpoint(tmp_path, save_freq=2, keep=2)
    model.fit(x, x[:, :1], batch_size=2, epochs=2, verbose=0, callbacks=[saver])
    # 6 batches per epoch, saves at batches 2,4,6 (+ epoch end) per epoch; steps 2..12
    names = [os.path.basename(p) for p in ckpt.list_checkpoints(tmp_path)]
    assert names == ["ckpt-00000010.weights.h5", "ckpt-00000012.weights.h5"]
    state = ckpt.read_state(tmp_path)
    assert state == ckpt.TrainingState(epoch=2, batch=0, batches=12, step=12, latest="ckpt-00000012.weights.h5")
    assert not [n for n in os.listdir(tmp_path) if n.startswith("tmp-")]
    fresh = _model(5)
    assert ckpt.restore(fresh, tmp_path) == state
    assert int(fresh.optimizer.iterations) == 12
    for a, b in zip(model.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="save_freq"):
        ckpt.ResumableCheckpoint(tmp_path, save_freq=0)


def test_best_checkpoint_saves_only_improvements(tmp_path):
    model = _model(0)
    best = ckpt.BestCheckpoint(tmp_path / "best.weights.h5")
    best.set_model(model)
    best.on_epoch_end(0, {"val_loss": 2.0})
    first = model.get_weights()
    model.set_weights([w + 1 for w in first])
    best.on_epoch_end(1, {"val_loss": 3.0})  # worse: not saved
    restored = _model(3)
    restored.load_weights(tmp_path / "best.weights.h5")
    np.testing.assert_array_equal(restored.get_weights()[0], first[0])
    assert json.loads((tmp_path / "best.weights.h5.json").read_text()) == {  # the console's "Epoch 1/..."
        "val_loss": 2.0, "epoch": 1, "epoch_numbering": "1-based", "step": 0}
    with h5py.File(tmp_path / "best.weights.h5") as f:
        assert len(f.keys()) > 0


def _fit_with(tmp_path, callbacks, batches=6):
    model = _model(2)
    x = np.arange(batches * 2 * 3, dtype="float32").reshape(batches * 2, 3) / 10
    y = x.sum(axis=1, keepdims=True)
    saver = ckpt.ResumableCheckpoint(tmp_path / "ckpts", keep=3)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[*callbacks, saver])
    return json.loads((tmp_path / "ckpts" / "state.json").read_text()) if (tmp_path / "ckpts").exists() else None


def test_stop_mid_epoch_records_the_position_in_the_epoch(tmp_path):
    class StopAfterTwo(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                self.model.stop_training = True

    state = _fit_with(tmp_path, [StopAfterTwo()])
    # A re-run continues the first epoch after its 2 trained batches, instead of skipping to the second.
    assert (state["epoch"], state["batch"], state["epoch_complete"], state["batches"]) == (1, 2, False, 2)


def test_full_epoch_records_the_next_epoch(tmp_path):
    state = _fit_with(tmp_path, [])
    assert (state["epoch"], state["batch"], state["epoch_complete"], state["batches"]) == (1, 0, True, 6)


def test_nan_loss_is_never_saved_as_a_checkpoint(tmp_path):
    class PoisonAfterThree(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                for v in self.model.trainable_variables:
                    v.assign(np.full(v.shape, np.nan, v.dtype))

    state = _fit_with(tmp_path, [keras.callbacks.TerminateOnNaN(), PoisonAfterThree()])
    assert state is None  # nothing saved: the epoch ended on a NaN loss


def test_checkpoints_to_average_bounds_the_span():
    def paths(*steps):
        return [f"/run/checkpoints/ckpt-{s:08d}.weights.h5" for s in steps]

    thirteen_epochs = paths(*range(260, 3121, 260), 3326)[-10:]  # a 13-epoch run keeps its last 10
    chosen = ckpt.checkpoints_to_average(thirteen_epochs, 10, 0.3)  # steps >= 0.7 * 3326 = 2328.2
    assert chosen == paths(2340, 2600, 2860, 3120, 3326)
    assert ckpt.checkpoints_to_average(thirteen_epochs, 10) == thirteen_epochs  # no bound: all 10
    forty_six = paths(*range(258, 258 * 47, 258))
    assert ckpt.checkpoints_to_average(forty_six, 10, 0.3) == forty_six[-10:]  # the bound does not bite
    assert ckpt.checkpoints_to_average(paths(100), 5, 0.01) == paths(100)  # the newest always counts
    assert ckpt.checkpoints_to_average([], 5, 0.5) == []
    for last, span in ((0, 1.0), (3, 0.0), (3, 1.5), (3, float("nan"))):
        with pytest.raises(ValueError):
            ckpt.checkpoints_to_average(forty_six, last, span)
    with pytest.raises(ValueError, match="not a checkpoint name"):
        ckpt.checkpoints_to_average(["/run/best.weights.h5"], 2)


def test_state_json_of_0_1_reads_as_the_same_position(tmp_path):
    """0.1 wrote the 0-based epoch in progress; the state read back is the same either way."""
    (tmp_path / "ckpt-00000470.weights.h5").write_bytes(b"")
    for record in ({"epoch": 1, "batch": 180, "batches": 470, "step": 470, "latest": "ckpt-00000470.weights.h5"},
                   {"epoch": 2, "batch": 180, "epoch_complete": False, "batches": 470, "step": 470,
                    "latest": "ckpt-00000470.weights.h5"}):
        (tmp_path / "state.json").write_text(json.dumps(record))
        state = ckpt.read_state(tmp_path)
        assert (state.epoch, state.batch, state.epoch_number, state.epoch_complete) == (1, 180, 2, False)
