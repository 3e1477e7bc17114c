"""Training: strategy, model compilation and ``model.fit`` with callbacks (Section 5).

The pieces of Section 5 meet here: Adam with the warmup schedule (Section 5.3,
Eq. 3), label-smoothed loss (Section 5.4), and checkpoints that survive a kill
(``keras.callbacks.BackupAndRestore``), the best model by validation loss,
``TerminateOnNaN`` and TensorBoard logs.
"""

from __future__ import annotations

import os
import pathlib
import time

import keras
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.training.losses import MaskedLabelSmoothedCrossEntropy, masked_accuracy
from keras_transformer.training.schedule import paper_optimizer

__all__ = ["TimeBudget", "build_model", "compile_model", "fit", "get_strategy"]


def get_strategy(name: str = "auto") -> tf.distribute.Strategy:
    """The ``tf.distribute`` strategy to build and train the model under.

    Args:
        name: ``"auto"`` (MirroredStrategy when more than one GPU is visible,
            else the default single-device strategy), ``"mirrored"`` (all
            local GPUs, or the logical CPU devices when there is no GPU),
            ``"multi_worker"`` (``MultiWorkerMirroredStrategy`` configured
            from the ``TF_CONFIG`` environment variable) or ``"default"``.

    Returns:
        A ``tf.distribute.Strategy``.

    Raises:
        ValueError: for an unknown name, or ``"multi_worker"`` without
            ``TF_CONFIG``.
    """
    if name == "auto":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("strategy 'multi_worker' needs the TF_CONFIG environment variable (cluster and task)")
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "default":
        return tf.distribute.get_strategy()
    raise ValueError(f"unknown strategy {name!r}; choose auto, mirrored, multi_worker or default")


def build_model(config: TransformerConfig):
    """A :class:`keras_transformer.Transformer` built from ``config`` (weights created).

    Args:
        config: the hyper-parameters.

    Returns:
        The model, with variables created for ``[1, 1]`` inputs.
    """
    from keras_transformer.model import Transformer

    model = Transformer(**config.model_kwargs())
    dummy = tf.ones([1, 1], tf.int32)
    model((dummy, dummy))
    return model


def compile_model(
    model: keras.Model,
    config: TransformerConfig,
    *,
    jit_compile: bool | str = False,
    learning_rate_scale: float = 1.0,
    gradient_accumulation_steps: int | None = None,
    steps_per_execution: int = 1,
) -> keras.Model:
    """Compiles ``model`` with the paper's optimizer, loss and masked accuracy.

    Args:
        model: a Transformer (create it under the strategy's scope).
        config: gives ``d_model``, ``warmup_steps`` and ``label_smoothing``.
        jit_compile: XLA for the train step (``True``, ``False`` or ``"auto"``).
        learning_rate_scale: multiplies Eq. 3.
        gradient_accumulation_steps: accumulate this many batches per update
            (``None`` or 1: every batch). The schedule then counts updates.
        steps_per_execution: batches per ``tf.function`` call.

    Returns:
        The same model, compiled.
    """
    accumulate = gradient_accumulation_steps if gradient_accumulation_steps and gradient_accumulation_steps > 1 else None
    optimizer = paper_optimizer(
        config.d_model, config.warmup_steps, learning_rate_scale, gradient_accumulation_steps=accumulate
    )
    model.compile(
        optimizer=optimizer,
        loss=MaskedLabelSmoothedCrossEntropy(label_smoothing=config.label_smoothing),
        metrics=[masked_accuracy],
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )
    return model


class TimeBudget(keras.callbacks.Callback):
    """Stops training after ``seconds`` of wall time, at the end of a batch.

    Args:
        seconds: the budget in seconds (wall clock, from the start of ``fit``).
    """

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = float(seconds)
        self._start = None
        self.stopped_early = False

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() - self._start >= self.seconds:
            self.stopped_early = True
            self.model.stop_training = True


def fit(
    model: keras.Model,
    train_data: tf.data.Dataset,
    *,
    model_dir: str | os.PathLike,
    epochs: int,
    validation_data: tf.data.Dataset | None = None,
    max_train_seconds: float | None = None,
    tensorboard: bool = True,
    callbacks: list | None = None,
    verbose: int | str = "auto",
) -> keras.callbacks.History:
    """Runs ``model.fit`` with the project's callbacks.

    ``model_dir`` receives ``backup/`` (``BackupAndRestore``: re-running the
    same command after a kill resumes from the last completed epoch),
    ``best.keras`` (best validation loss, when ``validation_data`` is given),
    ``logs/`` (TensorBoard). ``TerminateOnNaN`` stops a diverging run.

    Args:
        model: a compiled Transformer.
        train_data: batches ``((source_ids, target_in_ids), target_out_ids)``.
        model_dir: where checkpoints and logs go (created).
        epochs: passes over ``train_data``.
        validation_data: batches in the same format, or ``None``.
        max_train_seconds: stop after this wall time (``None``: no limit).
        tensorboard: write TensorBoard logs.
        callbacks: further Keras callbacks.
        verbose: passed to ``model.fit``.

    Returns:
        The Keras ``History``.
    """
    model_dir = pathlib.Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    cbs = [keras.callbacks.TerminateOnNaN(), keras.callbacks.BackupAndRestore(str(model_dir / "backup"))]
    if validation_data is not None:
        cbs.append(
            keras.callbacks.ModelCheckpoint(
                str(model_dir / "best.keras"), monitor="val_loss", save_best_only=True, verbose=0
            )
        )
    if tensorboard:
        cbs.append(keras.callbacks.TensorBoard(str(model_dir / "logs"), write_graph=False))
    if max_train_seconds is not None:
        cbs.append(TimeBudget(max_train_seconds))
    cbs.extend(callbacks or [])
    return model.fit(train_data, validation_data=validation_data, epochs=epochs, callbacks=cbs, verbose=verbose)
