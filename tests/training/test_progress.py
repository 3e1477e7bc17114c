"""Progress inside an epoch: a line every N steps off a terminal, the progress bar on one."""

import io

import keras
import numpy as np
import pytest

from keras_transformer.training.progress import EpochProgbar, StepLog, fit_verbosity


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_step_log_prints_every_n_steps_with_position_and_metrics():
    stream = io.StringIO()
    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((10, 3), "float32"), np.zeros((10, 1), "float32")
    model.fit(x, y, batch_size=1, epochs=2, verbose=0, callbacks=[StepLog(every=4, stream=stream)])
    lines = stream.getvalue().splitlines()
    # 10 steps per epoch: lines at steps 4 and 8 of each epoch.
    assert [line.split(":")[0] for line in lines] == [
        "epoch 1, step 4/10", "epoch 1, step 8/10", "epoch 2, step 4/10", "epoch 2, step 8/10"]
    assert all("loss " in line and "steps/s" in line for line in lines)
    with pytest.raises(ValueError, match="every"):
        StepLog(every=0)


def test_fit_verbosity_bar_on_a_terminal_lines_elsewhere():
    verbose, callbacks = fit_verbosity(stream=_Terminal())
    assert verbose == 1 and [type(c) for c in callbacks] == [EpochProgbar]
    verbose, callbacks = fit_verbosity(every=7, stream=io.StringIO())
    assert verbose == 2 and callbacks[0].every == 7 and isinstance(callbacks[1], EpochProgbar)


def test_an_epoch_stopped_early_says_how_many_batches_ran(capsys):
    """Keras' own line says 10/10 when training stopped after 4 of 10 batches; ours says 4/10."""

    class StopAfterFour(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 3:
                self.model.stop_training = True

    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((10, 3), "float32"), np.zeros((10, 1), "float32")
    capsys.readouterr()
    model.fit(x, y, batch_size=1, epochs=1, verbose=2, callbacks=[StopAfterFour(), EpochProgbar()])
    out = capsys.readouterr().out
    assert "4/10 - " in out and "10/10" not in out
    model.fit(x, y, batch_size=1, epochs=1, verbose=2, callbacks=[EpochProgbar()])  # a whole epoch: as Keras
    assert "10/10 - " in capsys.readouterr().out
