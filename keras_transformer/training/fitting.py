"""Training runs that survive a kill: ``model.fit`` with the project's callbacks (Sections 5-6.1).

:func:`fit` trains a compiled Transformer
(:func:`~keras_transformer.training.compile.compile_model`) with
checkpoints that survive a kill and are averaged at the end (Section 6.1;
:mod:`keras_transformer.training.checkpoints`), the best model by validation
loss (and by validation BLEU, :mod:`keras_transformer.training.validation`),
``TerminateOnNaN``, TensorBoard logs and a wall-time budget, optionally ending in a learning-rate cooldown
(:class:`TimeBudget`); re-running the same call resumes where it stopped.
:func:`with_known_length` gives a dataset a known number of batches, so that
Keras ends each epoch at its last batch.
"""

from __future__ import annotations

import os
import time

import keras
import tensorflow as tf

from keras_transformer.run_folder import RunFolder
from keras_transformer.training import checkpoints as ckpt
from keras_transformer.training.distribute import task_dir

__all__ = ["TimeBudget", "fit", "with_known_length"]


class TimeBudget(keras.callbacks.Callback):
    """Stops training after ``seconds`` of wall time, at the end of a batch; optionally cools the learning rate down.

    With ``cooldown_fraction`` f > 0 the learning rate is also multiplied by
    ``min(1, (seconds - spent) / (f * seconds))`` after every batch: 1 until
    the last fraction f of the budget, then falling linearly to 0 when the
    budget runs out (through the factor of the optimizer's
    :class:`~keras_transformer.training.schedule.CooldownSchedule`; not in the
    paper). Each ``fit`` call has its own budget, so a resumed run cools down
    at the end of its own.

    Args:
        seconds: the budget in seconds (wall clock, from the start of ``fit``).
        excluded: a function returning seconds not to count (e.g. the time
            spent translating for validation BLEU), or None.
        cooldown_fraction: the fraction f of the budget at its end over which
            the learning rate decays to 0, in [0, 1] (0: no cooldown).

    Raises:
        ValueError: for a negative budget or a ``cooldown_fraction`` outside
            [0, 1]; at the start of training, when ``cooldown_fraction`` > 0
            and the optimizer's learning rate has no ``CooldownSchedule``
            (compile with ``compile_model(..., cooldown=True)``).
    """

    def __init__(self, seconds: float, excluded=None, cooldown_fraction: float = 0.0):
        super().__init__()
        if not seconds >= 0:
            raise ValueError(f"TimeBudget.seconds must be >= 0, got {seconds!r}")
        if not 0.0 <= cooldown_fraction <= 1.0:
            raise ValueError(f"TimeBudget.cooldown_fraction must be in [0, 1], got {cooldown_fraction!r}")
        self.seconds = float(seconds)
        self.excluded = excluded
        self.cooldown_fraction = float(cooldown_fraction)
        self._start = None
        self._factor = None  # the CooldownSchedule's variable, found at the start of training
        self._assigned = None  # its last value, so that the cooldown's wait costs no assign per batch
        self.stopped_early = False

    def spent(self) -> float:
        """Seconds of the budget used so far (wall time since the start, less the excluded time)."""
        return time.monotonic() - self._start - (self.excluded() if self.excluded is not None else 0.0)

    def cooldown_factor(self, spent: float) -> float:
        """The learning-rate factor after ``spent`` seconds: 1 before the cooldown, then linear down to 0."""
        if not self.cooldown_fraction:
            return 1.0
        left = max(self.seconds - spent, 0.0)
        return min(1.0, left / (self.cooldown_fraction * self.seconds)) if self.seconds else 0.0

    def on_train_begin(self, logs=None):
        if self._start is None:
            self._start = time.monotonic()
        if self.cooldown_fraction and self._factor is None:
            from keras_transformer.training import keras_internals
            from keras_transformer.training.schedule import find_cooldown

            schedule = find_cooldown(keras_internals.learning_rate_as_given(self.model.optimizer))
            if schedule is None:
                raise ValueError(
                    "a cooldown needs the optimizer's learning rate in a CooldownSchedule: compile with "
                    "compile_model(..., cooldown=True)"
                )
            self._factor = schedule.factor
        self._cool(self.spent())

    def _cool(self, spent: float) -> None:
        if self._factor is None:
            return
        factor = self.cooldown_factor(spent)
        if factor != self._assigned:
            self._factor.assign(factor)
            self._assigned = factor

    def on_train_batch_end(self, batch, logs=None):
        spent = self.spent()
        self._cool(spent)
        if spent >= self.seconds:
            self.stopped_early = True
            self.model.stop_training = True


def with_known_length(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """``dataset`` with its number of batches asserted (counted once when unknown).

    Keras 3.15 ends an epoch of unknown length by calling the train function
    once more until the iterator raises ``OutOfRange``; the optimizer's
    iteration counter, which has no data input, is still incremented in that
    call, so ``optimizer.iterations`` (and Eq. 3) gains a phantom step per
    epoch. A known length makes Keras stop at the last batch. Counting costs
    one pass of the input pipeline (no training).

    Args:
        dataset: a finite ``tf.data.Dataset``.

    Returns:
        The dataset with a known ``cardinality``.

    Raises:
        ValueError: for an infinite dataset.
    """
    cardinality = int(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        raise ValueError("train_data must be finite (one pass = one epoch); do not .repeat() it")
    if cardinality >= 0:
        return dataset
    count = int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
    return dataset.apply(tf.data.experimental.assert_cardinality(count))


def _merge_histories(first, second):
    if first is None:
        return second
    for key, values in second.history.items():
        first.history.setdefault(key, []).extend(values)
    first.epoch.extend(second.epoch)
    return first


def fit(
    model: keras.Model,
    train_data,
    *,
    model_dir: str | os.PathLike,
    epochs: int,
    validation_data: tf.data.Dataset | None = None,
    save_freq: int | None = None,
    keep_checkpoints: int = 5,
    max_train_seconds: float | None = None,
    cooldown_fraction: float = 0.0,
    tensorboard: bool = True,
    callbacks: list | None = None,
    verbose: int | str = "auto",
    validation_bleu: keras.callbacks.Callback | None = None,
    early_stopping: keras.callbacks.Callback | None = None,
) -> keras.callbacks.History:
    """Runs ``model.fit`` with the project's callbacks; re-running the same call after a kill resumes.

    ``model_dir`` receives ``checkpoints/`` (:class:`~keras_transformer.training.checkpoints.ResumableCheckpoint`:
    ``ckpt-<step>.weights.h5`` every ``save_freq`` batches and at each epoch
    end, the last ``keep_checkpoints`` kept for averaging, Section 6.1, and
    ``state.json``), ``best.weights.h5`` (best validation loss, when
    ``validation_data`` is given) and ``logs/`` (TensorBoard).
    ``TerminateOnNaN`` stops a diverging run. On a re-run the latest
    checkpoint is restored (weights, optimizer state and step) and training
    continues in the same epoch after the batches already trained (the first,
    partial epoch skips them), so no epoch restarts from zero. With
    ``TF_CONFIG``, workers other than the chief write to
    ``model_dir/worker-<index>/`` (every worker must save and restore).

    Exact resumption: with an :class:`~keras_transformer.data.epochs.EpochBatches`
    (:func:`~keras_transformer.data.pipeline.make_epoch_batches` in memory,
    :func:`~keras_transformer.data.streaming.make_streaming_batches` from
    prepared shards) every epoch's batches are rebuilt from ``(seed,
    epoch)``, so the resumed run trains on exactly the batches the
    uninterrupted run would have, from the step after the checkpoint on. A
    plain ``tf.data.Dataset`` that reshuffles at each iteration restarts from
    its first permutation in a new process (its epochs then differ from an
    uninterrupted run's, though no batch of the resumed epoch is repeated).

    With ``validation_bleu`` (a :class:`~keras_transformer.training.validation.ValidationBLEU`)
    the model is also translated and scored during training, and the best
    model by validation BLEU is kept (``best_bleu.weights.h5``); its time is
    left out of ``max_train_seconds``. With ``early_stopping`` (an
    :class:`~keras_transformer.training.validation.EarlyStopping`) training
    stops after its patience, and a re-run of a stopped run trains nothing.

    Args:
        model: a compiled Transformer (see
            :func:`~keras_transformer.training.compile.compile_model`).
        train_data: an :class:`~keras_transformer.data.epochs.EpochBatches`,
            or finite batches ``((source_ids, target_in_ids), target_out_ids)``
            (one pass = one epoch, in a deterministic order for the mid-epoch
            skip to skip the batches already trained).
        model_dir: where checkpoints and logs go (created).
        epochs: passes over ``train_data``.
        validation_data: batches in the same format, or ``None``.
        save_freq: checkpoint every this many batches (``None``: per epoch).
        keep_checkpoints: newest checkpoints kept (``config.checkpoint_average``).
        max_train_seconds: stop after this wall time (``None``: no limit).
        cooldown_fraction: with ``max_train_seconds``, decay the learning
            rate linearly to 0 over this last fraction of the budget
            (:class:`TimeBudget`; the model compiled with
            ``compile_model(..., cooldown=True)``); 0: none.
        tensorboard: write TensorBoard logs.
        callbacks: further Keras callbacks (they see ``val_bleu``/``val_chrf``
            in the epoch logs when ``validation_bleu`` is given).
        verbose: passed to ``model.fit``.
        validation_bleu: a ``ValidationBLEU`` callback, or None.
        early_stopping: an ``EarlyStopping`` callback (on ``val_loss``, or on
            ``val_bleu``/``val_chrf`` fed by ``validation_bleu``), or None.

    Returns:
        The Keras ``History`` (merged over the partial and the full epochs).

    Raises:
        keras_transformer.data.prepare.PreparedDataError: when reading a
            prepared shard fails its checksum (the shard is named).
        ValueError: for a ``cooldown_fraction`` without ``max_train_seconds``,
            outside [0, 1], or on a model compiled without a cooldown.
    """
    from keras_transformer.data.epochs import EpochBatches

    if cooldown_fraction and max_train_seconds is None:
        raise ValueError("cooldown_fraction needs max_train_seconds: the cooldown is the end of a time budget")

    model_dir = task_dir(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    folder = RunFolder(model_dir)
    ckpt_dir = folder.checkpoints
    ckpt_dir.mkdir(exist_ok=True)
    by_epoch = isinstance(train_data, EpochBatches)
    if not by_epoch:
        train_data = with_known_length(train_data)
    if isinstance(validation_data, tf.data.Dataset):  # else Keras warns "ran out of data" after the first evaluation
        validation_data = with_known_length(validation_data)
    state = ckpt.restore(model, ckpt_dir)
    start_epoch, skip, batches = (state.epoch, state.batch, state.batches) if state else (0, 0, 0)
    if by_epoch and skip >= train_data.steps_per_epoch:  # killed between the last batch's and the epoch's checkpoint
        start_epoch, skip = start_epoch + 1, 0

    saver = ckpt.ResumableCheckpoint(ckpt_dir, save_freq=save_freq, keep=keep_checkpoints, initial_batches=batches, batch_offset=skip)
    cbs = [keras.callbacks.TerminateOnNaN(), saver]
    if validation_data is not None:
        cbs.append(ckpt.BestCheckpoint(folder.best_loss))
    if tensorboard:
        cbs.append(keras.callbacks.TensorBoard(str(folder.logs), write_graph=False))
    # After Keras' TensorBoard (which would log val_bleu a second time, per epoch), before the user's callbacks.
    cbs.extend(cb for cb in (validation_bleu, early_stopping) if cb is not None)
    if early_stopping is not None:
        step = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
        early_stopping.restore(step)
        if early_stopping.exhausted:
            best = early_stopping.best
            print(
                f"early stopping: this run stopped at step {step} ({early_stopping.monitor} did not improve in "
                f"{early_stopping.patience} evaluations after its best"
                + (f", {best['value']:.4g} at step {best['step']}" if best else "")
                + "); nothing more to train",
                flush=True,
            )
            history = keras.callbacks.History()
            history.set_model(model)
            return history
    excluded = (lambda: validation_bleu.seconds) if validation_bleu is not None else None
    budget = TimeBudget(max_train_seconds, excluded, cooldown_fraction) if max_train_seconds is not None else None
    if budget is not None:
        cbs.append(budget)
    cbs.extend(callbacks or [])

    def budget_spent() -> bool:
        if budget is None or not budget.stopped_early:
            return False
        # Keras' epoch line still shows the epoch's full batch count; say where training really stopped.
        epoch, batch = saver.position
        print(
            f"time budget of {budget.seconds / 60:g} min reached after batch {batch} of epoch {epoch + 1} "
            "(checkpointed; re-running the same command continues from there)",
            flush=True,
        )
        return True

    def run(first: int, stop: int, skipped: int):
        if by_epoch:
            data = train_data.for_fit(model.distribute_strategy, first, stop, skipped)
            steps = train_data.steps_per_epoch - skipped
        else:
            data, steps = (train_data.skip(skipped) if skipped else train_data), None
        try:
            return model.fit(data, validation_data=validation_data, initial_epoch=first, epochs=stop,
                             steps_per_epoch=steps, callbacks=cbs, verbose=verbose)
        except tf.errors.DataLossError:
            if by_epoch:
                train_data.check_data()  # raises naming the damaged file
            raise

    history = None
    if skip and start_epoch < epochs:
        history = run(start_epoch, start_epoch + 1, skip)
        start_epoch += 1
        if budget_spent() or model.stop_training:
            return history
    if start_epoch < epochs:
        history = _merge_histories(history, run(start_epoch, epochs, 0))
        budget_spent()
    if history is None:
        history = keras.callbacks.History()
        history.set_model(model)
    return history
