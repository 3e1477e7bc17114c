"""Building the Transformer and compiling it for training (Sections 5.3-5.4).

:func:`build_model` creates a :class:`~keras_transformer.model.Transformer`
from a :class:`~keras_transformer.config.TransformerConfig`, with its
variables (under the strategy's scope, to train with it);
:func:`compile_model` compiles it with the paper's optimizer (Adam with the
warmup schedule, Section 5.3, Eq. 3), the label-smoothed loss (Section 5.4)
and masked accuracy, optionally with gradient accumulation, and installs the
per-replica train step
(:func:`~keras_transformer.training.train_step.install_train_step`), XLA or
not (:func:`default_jit_compile`).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.training import keras_internals
from keras_transformer.training.accumulation import PerUpdateSchedule
from keras_transformer.training.losses import MaskedLabelSmoothedCrossEntropy, masked_accuracy
from keras_transformer.training.schedule import CooldownSchedule, paper_optimizer
from keras_transformer.training.train_step import install_train_step

__all__ = ["build_model", "compile_model", "default_jit_compile"]


def default_jit_compile() -> bool:
    """Whether XLA is on by default: on GPU/TPU yes; on CPU no.

    Measured with ``scripts/bench/train_throughput.py`` on a 2-core CPU
    (``small`` preset, Multi30k): in steady state the XLA step runs at 0.97x
    the plain step, and each new batch shape costs about 5 s of compilation
    (17 s for the first), so an epoch took 497 s with XLA against 324 s
    without. On GPU XLA fuses the many small kernels of a Transformer layer
    and is the usual default.

    Returns:
        ``True`` when a GPU or TPU is visible.
    """
    return bool(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))


def build_model(config: TransformerConfig):
    """A :class:`keras_transformer.Transformer` built from ``config`` (weights created).

    Create it under ``strategy.scope()`` to train it with that strategy.

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
    jit_compile: bool | str = "auto",
    learning_rate_scale: float | None = None,
    gradient_accumulation_steps: int | None = None,
    steps_per_execution: int = 1,
    cooldown: bool = False,
) -> keras.Model:
    """Compiles ``model`` with the paper's optimizer, loss and masked accuracy, and installs the train step.

    Args:
        model: a Transformer (create it under the strategy's scope).
        config: gives ``d_model``, ``warmup_steps`` and ``label_smoothing``.
        jit_compile: XLA for each replica's forward+backward: ``True``,
            ``False`` or ``"auto"`` (:func:`default_jit_compile`).
        learning_rate_scale: multiplies Eq. 3 (default: ``config.learning_rate_scale``).
        gradient_accumulation_steps: accumulate this many batches per update
            (``None`` or 1: every batch), so one device reaches the paper's
            ~25k-token batches: ``batch_tokens * steps * replicas``. The
            schedule (Eq. 3) counts updates (:class:`PerUpdateSchedule`). Each accumulated batch is
            normalized by its own global token count and the accumulated
            gradients are averaged (Keras' optimizer accumulation).
        steps_per_execution: batches per ``tf.function`` call.
        cooldown: wrap the schedule in a
            :class:`~keras_transformer.training.schedule.CooldownSchedule`,
            whose factor :func:`~keras_transformer.training.fitting.fit`
            lowers to 0 over the end of its time budget
            (``cooldown_fraction``). Not in the paper.

    Returns:
        The same model, compiled (Keras-level ``jit_compile=False``; XLA, if
        on, is inside the installed step: see
        :func:`~keras_transformer.training.train_step.install_train_step`).

    Raises:
        ValueError: for ``gradient_accumulation_steps < 1`` or a bad
            ``jit_compile``.
    """
    if jit_compile == "auto":
        jit_compile = default_jit_compile()
    if jit_compile not in (True, False):
        raise ValueError(f"jit_compile must be True, False or 'auto', got {jit_compile!r}")
    if gradient_accumulation_steps is not None and gradient_accumulation_steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be >= 1, got {gradient_accumulation_steps!r}")
    accumulate = gradient_accumulation_steps if gradient_accumulation_steps and gradient_accumulation_steps > 1 else None
    optimizer = paper_optimizer(
        config.d_model,
        config.warmup_steps,
        config.learning_rate_scale if learning_rate_scale is None else learning_rate_scale,
        gradient_accumulation_steps=accumulate,
    )
    if cooldown:
        optimizer.learning_rate = CooldownSchedule(keras_internals.learning_rate_as_given(optimizer))
    if accumulate:
        # Keras evaluates schedules at the batch counter; Eq. 3 counts updates.
        optimizer.learning_rate = PerUpdateSchedule(keras_internals.learning_rate_as_given(optimizer), accumulate)
    model.compile(
        optimizer=optimizer,
        loss=MaskedLabelSmoothedCrossEntropy(label_smoothing=config.label_smoothing),
        metrics=[masked_accuracy],
        jit_compile=False,
        steps_per_execution=steps_per_execution,
    )
    install_train_step(model, jit_compile=bool(jit_compile))
    return model
