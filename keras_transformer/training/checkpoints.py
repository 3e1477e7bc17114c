"""Checkpoints: atomic saving, resuming mid-epoch, the best model, averaging (Section 6.1).

"For the base models, we used a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals. For the big models, we
averaged the last 20 checkpoints." ("Attention Is All You Need", Section 6.1.)

Layout of a checkpoint directory (written by :class:`ResumableCheckpoint`)::

    ckpt-00000120.weights.h5   model + optimizer weights after update step 120
    ckpt-00000160.weights.h5   ... the last ``keep`` of them
    state.json                 {"epoch", "batch", "epoch_complete", "batches", "step", "latest"}

Epochs are numbered in every file as the console numbers them (``Epoch 3/20``
is ``"epoch": 3``): the epoch of the last trained batch, with
``"epoch_complete"`` telling whether it was trained to its end; ``"batch"``
is the batches of it trained (0 when complete).

Every file is written under a temporary name (``tmp-...``) in the same
directory and then moved into place with ``os.replace`` (atomic on POSIX), and
``state.json`` is replaced only after the weights it names are complete, so a
process killed at any instant (SIGKILL included) leaves either the old or the
new checkpoint, never a half-written one. Leftover ``tmp-*`` files of a killed
writer are deleted by :func:`remove_partial_files` when training restarts.

Why not ``keras.callbacks.BackupAndRestore`` (Keras 3.15)? With an integer
``save_freq`` it records the batch index but restores only the epoch: a run
killed mid-epoch restarts that epoch from its first batch, training again on
the batches it had already seen; and it writes ``latest.weights.h5`` in
place, so a kill during the write leaves a corrupt file (``double_checkpoint``
only mitigates this). :class:`ResumableCheckpoint` keeps its role (re-run the
same command, training continues) and fixes both.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import re
from collections.abc import Sequence

import h5py
import keras
import numpy as np

from keras_transformer.run_folder import TMP_PREFIX, atomic_save_weights, atomic_write_text

__all__ = [
    "TrainingState",
    "ResumableCheckpoint",
    "BestCheckpoint",
    "average_checkpoints",
    "list_checkpoints",
    "checkpoints_to_average",
    "read_state",
    "remove_partial_files",
    "restore",
]

STATE_FILE = "state.json"
_CKPT_RE = re.compile(r"^ckpt-(\d+)\.weights\.h5$")


def remove_partial_files(directory: str | os.PathLike) -> list[str]:
    """Deletes the ``tmp-*`` files a killed writer left in ``directory``.

    Call it only when no other process writes there (training start).

    Returns:
        The removed paths.
    """
    removed = []
    for path in glob.glob(os.path.join(os.fspath(directory), TMP_PREFIX + "*")):
        try:
            os.remove(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def list_checkpoints(directory: str | os.PathLike) -> list[str]:
    """The complete periodic checkpoints in ``directory``, oldest first (by step).

    Returns:
        Paths of ``ckpt-<step>.weights.h5`` files sorted by step.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        match = _CKPT_RE.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name)))
    return [path for _, path in sorted(found)]


def checkpoints_to_average(paths: list[str], last: int, span: float = 1.0) -> list[str]:
    """The checkpoints to average (Section 6.1): the last ``last`` of those in the last ``span`` of training.

    The paper averages the last 5 (base) or 20 (big) checkpoints of a fixed
    number of steps. Under a time budget the number of steps depends on the
    machine: on a CPU that fits 13 epochs in an hour, the last 10 epoch
    checkpoints reach back to epoch 4 and their average scored 2 BLEU below
    that of the last 5 (Multi30k validation; 46 epochs on a faster CPU
    preferred 10). ``span`` bounds how far back the average reaches: only
    checkpoints whose step is at least ``(1 - span)`` times the last one's
    count.

    Args:
        paths: ``ckpt-<step>.weights.h5`` paths, oldest first
            (:func:`list_checkpoints`).
        last: the most checkpoints to average, int >= 1.
        span: fraction of the training steps, in ``(0, 1]`` (1: no bound).

    Returns:
        the chosen paths, oldest first (possibly fewer than ``last``; always
        the newest one when ``paths`` is not empty).

    Raises:
        ValueError: for ``last < 1``, ``span`` outside ``(0, 1]`` or a path
            not named ``ckpt-<step>.weights.h5``.
    """
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ValueError(f"last must be an int >= 1, got {last!r}")
    if not 0.0 < float(span) <= 1.0:
        raise ValueError(f"the averaging span must be in (0, 1], got {span!r}")
    steps = []
    for path in paths:
        match = _CKPT_RE.match(os.path.basename(os.fspath(path)))
        if not match:
            raise ValueError(f"not a checkpoint name (ckpt-<step>.weights.h5): {path}")
        steps.append(int(match.group(1)))
    if not paths:
        return []
    first_step = (1.0 - float(span)) * steps[-1]
    kept = [path for path, step in zip(paths, steps) if step >= first_step]
    return kept[-last:]


@dataclasses.dataclass(frozen=True)
class TrainingState:
    """Where training stood when a checkpoint was written.

    Attributes:
        epoch: 0-based epoch in progress (``epoch`` batches were completed
            when ``batch == 0``: the epoch boundary).
        batch: batches already trained in that epoch.
        batches: batches trained since the start of the run (all epochs).
        step: the optimizer's update count (``optimizer.iterations``).
        latest: file name of the weights, in the same directory.
    """

    epoch: int
    batch: int
    batches: int
    step: int
    latest: str

    @property
    def epoch_number(self) -> int:
        """The 1-based number of the epoch of the last trained batch, as the console shows it (``Epoch 3/20``)."""
        return self.epoch + (1 if self.batch else 0)

    @property
    def epoch_complete(self) -> bool:
        """Whether that epoch was trained to its end (an epoch boundary)."""
        return self.batch == 0

    def to_record(self) -> dict:
        """The ``state.json`` record: the console's 1-based epoch numbering (module docstring)."""
        return {"epoch": self.epoch_number, "batch": self.batch, "epoch_complete": self.epoch_complete,
                "batches": self.batches, "step": self.step, "latest": self.latest}

    @classmethod
    def from_record(cls, record: dict) -> "TrainingState":
        """The state of a ``state.json`` record, this format or 0.1's (0-based ``epoch`` in progress)."""
        record = dict(record)
        if "epoch_complete" in record:
            complete = bool(record.pop("epoch_complete"))
            record["epoch"] = int(record["epoch"]) - (0 if complete else 1)
            record["batch"] = 0 if complete else int(record["batch"])
        return cls(**record)


def read_state(directory: str | os.PathLike) -> TrainingState | None:
    """The :class:`TrainingState` of ``directory``, or ``None`` when there is none.

    Raises:
        ValueError: when ``state.json`` names a weights file that is missing.
    """
    path = os.path.join(os.fspath(directory), STATE_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        state = TrainingState.from_record(json.load(f))
    if not os.path.isfile(os.path.join(os.fspath(directory), state.latest)):
        raise ValueError(f"{path} names {state.latest!r}, which does not exist")
    return state


def restore(model: keras.Model, directory: str | os.PathLike) -> TrainingState | None:
    """Loads the latest checkpoint of ``directory`` into ``model`` (weights and optimizer).

    Args:
        model: a built, compiled model with the architecture of the checkpoint.
        directory: a :class:`ResumableCheckpoint` directory.

    Returns:
        The restored :class:`TrainingState`, or ``None`` (nothing to restore).
    """
    remove_partial_files(directory)
    state = read_state(directory)
    if state is None:
        return None
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    model.load_weights(os.path.join(os.fspath(directory), state.latest))
    return state


def _finite_loss(logs) -> bool:
    """False when ``logs`` reports a NaN or infinite ``loss``."""
    loss = (logs or {}).get("loss")
    return loss is None or math.isfinite(float(loss))


class ResumableCheckpoint(keras.callbacks.Callback):
    """Saves model + optimizer every ``save_freq`` batches and at each epoch end, atomically.

    Keeps the last ``keep`` checkpoints (for :func:`average_checkpoints`,
    Section 6.1) and a ``state.json`` recording the epoch, the batch within
    it, and the update step, so that :func:`keras_transformer.training.fitting.fit`
    resumes a killed run where it stopped (mid-epoch included).

    Args:
        directory: where ``ckpt-<step>.weights.h5`` and ``state.json`` go.
        save_freq: save every this many batches (``None``: only at epoch ends).
        keep: how many of the newest checkpoints to keep (>= 1).
        initial_batches: batches trained before this ``fit`` call (resume).
        batch_offset: batches of the first epoch skipped on resume (added to
            the in-epoch batch index of that epoch).

    Raises:
        ValueError: if ``save_freq`` or ``keep`` is not a positive integer.
    """

    def __init__(self, directory, save_freq: int | None = None, keep: int = 5, initial_batches: int = 0, batch_offset: int = 0):
        super().__init__()
        if save_freq is not None and (not isinstance(save_freq, int) or save_freq <= 0):
            raise ValueError(f"save_freq must be a positive integer or None, got {save_freq!r}")
        if not isinstance(keep, int) or keep <= 0:
            raise ValueError(f"keep must be a positive integer, got {keep!r}")
        self.directory = os.fspath(directory)
        self.save_freq = save_freq
        self.keep = keep
        self.batches = int(initial_batches)
        self.batch_offset = int(batch_offset)
        self._epoch = 0
        self._batch_in_epoch = 0
        self._seen_in_epoch = 0
        self._first_epoch = True

    @property
    def position(self) -> tuple[int, int]:
        """``(epoch, batch)``: the 0-based epoch and the batches of it trained so far (resume offset included)."""
        return self._epoch, self._batch_in_epoch

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._batch_in_epoch = self.batch_offset if self._first_epoch else 0
        self._seen_in_epoch = 0

    def on_train_batch_end(self, batch, logs=None):
        self._batch_in_epoch += 1
        self._seen_in_epoch += 1
        self.batches += 1
        if self.save_freq and self.batches % self.save_freq == 0 and _finite_loss(logs):
            self.save(self._epoch, self._batch_in_epoch)

    def on_epoch_end(self, epoch, logs=None):
        self._first_epoch = False
        if not _finite_loss(logs):
            # TerminateOnNaN stopped a diverged run: keep the last finite checkpoint as the latest.
            return
        steps = (self.params or {}).get("steps")
        if self.model.stop_training and steps and self._seen_in_epoch < steps:
            # Stopped mid-epoch (e.g. a time budget): a re-run continues this epoch.
            self.save(epoch, self._batch_in_epoch)
        else:
            self.save(epoch + 1, 0)

    def save(self, epoch: int, batch: int) -> str:
        """Writes a checkpoint for position (``epoch``, ``batch``) and prunes old ones.

        Returns:
            The path of the weights file.
        """
        os.makedirs(self.directory, exist_ok=True)
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) if self.model.optimizer else self.batches
        name = f"ckpt-{step:08d}.weights.h5"
        path = os.path.join(self.directory, name)
        atomic_save_weights(self.model, path)
        state = TrainingState(epoch=int(epoch), batch=int(batch), batches=self.batches, step=step, latest=name)
        atomic_write_text(os.path.join(self.directory, STATE_FILE), json.dumps(state.to_record()))
        for old in list_checkpoints(self.directory)[: -self.keep]:
            if os.path.basename(old) != name:
                os.remove(old)
        return path


class BestCheckpoint(keras.callbacks.Callback):
    """Keeps the weights with the best validation loss, written atomically.

    Args:
        path: destination ending in ``.weights.h5``.
        monitor: the log key to watch (default ``"val_loss"``; lower is better).

    Raises:
        ValueError: if ``path`` does not end in ``.weights.h5``.
    """

    def __init__(self, path, monitor: str = "val_loss"):
        super().__init__()
        if not os.fspath(path).endswith(".weights.h5"):
            raise ValueError(f"path must end in .weights.h5, got {path!r}")
        self.path = os.fspath(path)
        self.monitor = monitor
        self.best = float("inf")
        self._best_file = self.path + ".json"
        if os.path.isfile(self._best_file):
            with open(self._best_file, encoding="utf-8") as f:
                self.best = float(json.load(f)[monitor])

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or not np.isfinite(value) or value >= self.best:
            return
        self.best = float(value)
        atomic_save_weights(self.model, self.path)
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) if self.model.optimizer else None
        # The console's 1-based epoch number (Keras passes the 0-based index).
        atomic_write_text(self._best_file, json.dumps({self.monitor: self.best, "epoch": int(epoch) + 1,
                                                       "epoch_numbering": "1-based", "step": step}))


def average_checkpoints(paths: Sequence[str | os.PathLike], output: str | os.PathLike) -> str:
    """Averages the model weights of several ``.weights.h5`` checkpoints (Section 6.1).

    Every floating-point array outside the optimizer's group is replaced by
    its element-wise mean over ``paths``; integer arrays (seed states,
    counters) and the optimizer's slots are taken from the last path. The
    result loads with ``model.load_weights(output)`` (a new model, or the
    same one). Written atomically.

    Args:
        paths: checkpoints of one architecture, e.g. ``list_checkpoints(dir)[-5:]``
            (base) or ``[-20:]`` (big).
        output: destination ending in ``.weights.h5``.

    Returns:
        ``output`` as a string.

    Raises:
        ValueError: for no paths, a wrong suffix, or checkpoints whose arrays
            differ in names or shapes.
    """
    paths = [os.fspath(p) for p in paths]
    output = os.fspath(output)
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint path")
    if not output.endswith(".weights.h5"):
        raise ValueError(f"output must end in .weights.h5, got {output!r}")

    def arrays(path):
        found = {}
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, obj: found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        return found

    last = arrays(paths[-1])
    sums = {k: v.astype(np.float64) for k, v in last.items() if np.issubdtype(v.dtype, np.floating) and not k.startswith("optimizer")}
    for path in paths[:-1]:
        other = arrays(path)
        if set(other) != set(last):
            raise ValueError(f"{path} and {paths[-1]} hold different arrays: {sorted(set(other) ^ set(last))[:5]}")
        for key in sums:
            if other[key].shape != last[key].shape:
                raise ValueError(f"{key}: shape {other[key].shape} in {path} but {last[key].shape} in {paths[-1]}")
            sums[key] += other[key]
    directory = os.path.dirname(output) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f"{TMP_PREFIX}{os.getpid()}-{os.path.basename(output)}")
    with h5py.File(paths[-1], "r") as src, h5py.File(tmp, "w") as dst:
        for key, value in src.attrs.items():
            dst.attrs[key] = value
        for name in src:
            src.copy(src[name], dst, name=name)
        for key, total in sums.items():
            dst[key][...] = (total / len(paths)).astype(last[key].dtype)
    os.replace(tmp, output)
    return output
