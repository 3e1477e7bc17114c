"""Progress inside an epoch: a line every N steps off a terminal, the progress bar on one."""

import io

import keras
import numpy as np
import pytest

from keras_transformer.training.progress import StepLog, fit_verbosity


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
    assert fit_verbosity(stream=_Terminal()) == (1, [])
    verbose, callbacks = fit_verbosity(every=7, stream=io.StringIO())
    assert verbose == 2 and len(callbacks) == 1 and callbacks[0].every == 7
