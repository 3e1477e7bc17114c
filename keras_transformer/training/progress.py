"""Progress inside an epoch: Keras' progress bar on a terminal, a log line every N steps otherwise.

An epoch of the CPU recipe takes one to three minutes: ``model.fit(verbose=2)``
prints nothing until it ends, and Keras' progress bar (``verbose=1``) fills a
log file with carriage returns. :func:`fit_verbosity` picks the bar on a
terminal and, elsewhere (a log file, CI, a notebook cell's captured output),
one line per epoch plus a :class:`StepLog` line every ``every`` steps.
"""

from __future__ import annotations

import sys
import time
from typing import IO

import keras

__all__ = ["EpochProgbar", "StepLog", "fit_verbosity"]


class StepLog(keras.callbacks.Callback):
    """Prints one line every ``every`` training steps: epoch, step, running metrics, steps/s.

    Example line::

        epoch 3, step 150/261: loss 2.9140, masked_accuracy 0.6112; 2.6 steps/s

    Args:
        every: steps between lines (int >= 1).
        stream: where lines go (default ``sys.stdout``), flushed each time.

    Raises:
        ValueError: if ``every`` < 1.
    """

    def __init__(self, every: int = 50, stream: IO[str] | None = None):
        super().__init__()
        if every < 1:
            raise ValueError(f"StepLog every must be >= 1, got {every}")
        self.every = every
        self.stream = stream
        self._epoch = 0
        self._since = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._since = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        step = batch + 1
        if step % self.every:
            return
        now = time.perf_counter()
        rate = self.every / (now - self._since) if self._since is not None and now > self._since else float("nan")
        self._since = now
        total = self.params.get("steps") if self.params else None
        where = f"step {step}/{total}" if total else f"step {step}"
        metrics = ", ".join(f"{k} {float(v):.4f}" for k, v in sorted((logs or {}).items()))
        stream = self.stream or sys.stdout
        print(f"epoch {self._epoch + 1}, {where}: {metrics}; {rate:.1f} steps/s", file=stream, flush=True)


class EpochProgbar(keras.callbacks.ProgbarLogger):
    """Keras' progress bar and epoch line, telling the truth about an epoch that stopped early.

    When a time budget (or early stopping) ends training inside an epoch,
    Keras' own line reads ``260/260 - 97s - 372ms/step`` although 179 of the
    260 batches ran; this one reads ``179/260 - 97s - 542ms/step``
    (:func:`~keras_transformer.training.keras_internals.finalize_progbar_at_seen`).
    """

    def on_epoch_end(self, epoch, logs=None):
        from keras_transformer.training.keras_internals import finalize_progbar_at_seen

        if not finalize_progbar_at_seen(self, logs):
            super().on_epoch_end(epoch, logs)


def fit_verbosity(every: int = 50, stream: IO[str] | None = None) -> tuple[int, list[keras.callbacks.Callback]]:
    """``(verbose, callbacks)`` for ``model.fit``: a progress bar on a terminal, else epoch lines + :class:`StepLog`.

    Both keep the epoch line true to the batches run (:class:`EpochProgbar`).

    Args:
        every: steps between :class:`StepLog` lines off a terminal.
        stream: the output checked for a terminal (default ``sys.stdout``).

    Returns:
        ``(1, [EpochProgbar()])`` when ``stream`` is a terminal, else
        ``(2, [StepLog(every), EpochProgbar()])``.
    """
    stream = stream or sys.stdout
    if hasattr(stream, "isatty") and stream.isatty():
        return 1, [EpochProgbar()]
    return 2, [StepLog(every, stream), EpochProgbar()]
