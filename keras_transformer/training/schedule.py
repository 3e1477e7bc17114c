"""The learning-rate schedule of the paper (Section 5.3, Eq. 3), and a cooldown at the end of a time budget."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.training.optimizer import FusedAdam

__all__ = ["CooldownSchedule", "WarmupSchedule", "find_cooldown", "paper_optimizer"]


@keras.saving.register_keras_serializable(package="keras_transformer")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup then inverse square-root decay (Section 5.3, Eq. 3).

    ``lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)``

    The rate rises linearly for the first ``warmup_steps`` steps and then
    decreases proportionally to the inverse square root of the step number;
    it peaks at ``scale * (d_model * warmup_steps)^-0.5`` at
    ``step == warmup_steps``. Keras passes the optimizer's 0-based
    ``iterations``; the paper counts steps from 1, so ``step = iterations + 1``
    (the first update never has a zero learning rate).

    Args:
        d_model: model width (Section 3), a positive int.
        warmup_steps: steps of linear warmup, a positive int (the paper: 4000).
        scale: a positive float multiplying Eq. 3 (1.0 is the paper; a larger
            value is common for small batches).

    Call arguments:
        step: the optimizer's 0-based iteration count, an int or a scalar
            integer tensor.

    Returns:
        The learning rate, a scalar float32 tensor (units: per step).

    Raises:
        ValueError: if ``d_model``, ``warmup_steps`` or ``scale`` is not
            positive.

    Example:
    >>> schedule = WarmupSchedule(d_model=512, warmup_steps=4000)
    >>> optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        for name, value in (("d_model", d_model), ("warmup_steps", warmup_steps), ("scale", scale)):
            if value <= 0:
                raise ValueError(f"WarmupSchedule.{name} must be positive, got {value!r}")
        self.d_model = int(d_model)
        self.warmup_steps = int(warmup_steps)
        self.scale = float(scale)

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0
        d_model = tf.cast(self.d_model, tf.float32)
        warmup = tf.cast(self.warmup_steps, tf.float32)
        return self.scale * tf.math.rsqrt(d_model) * tf.minimum(tf.math.rsqrt(step), step * warmup**-1.5)

    def get_config(self) -> dict:
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_transformer")
class CooldownSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """``schedule(step) * factor``, where ``factor`` (1.0 at first) is lowered to 0 during training.

    Not in the paper. :class:`~keras_transformer.training.fitting.TimeBudget`
    with ``cooldown_fraction`` sets ``factor`` from the wall time left: it
    falls linearly from 1 to 0 over the last fraction of the budget, so a run
    stopped by its time budget ends with a learning rate that has decayed to
    zero (the "cooldown" of warmup-stable-decay schedules, Hägele et al.,
    2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training
    Durations"), where Eq. 3 alone would stop at whatever rate the step
    reached. A schedule bounded in time rather than in steps is what a fixed
    CPU budget needs: how many steps fit in it depends on the machine.

    ``factor`` is a non-trainable float32 ``tf.Variable`` created with the
    schedule (under the strategy's scope, it is mirrored); it is not saved in
    checkpoints (a resumed run starts at 1.0 and its own budget sets it again)
    nor in the config.

    Args:
        schedule: a ``LearningRateSchedule`` (e.g. :class:`WarmupSchedule`)
            or its serialized config.

    Call arguments:
        step: the optimizer's 0-based iteration count (int or scalar int tensor).

    Returns:
        ``schedule(step) * factor``, a scalar float32 tensor (units: per step).

    Example:
    >>> lr = CooldownSchedule(WarmupSchedule(d_model=128, warmup_steps=400))
    >>> lr.factor.assign(0.5)  # what TimeBudget does near the end of its budget
    >>> optimizer = keras.optimizers.Adam(lr, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    """

    def __init__(self, schedule):
        if isinstance(schedule, dict):
            schedule = keras.saving.deserialize_keras_object(schedule)
        self.schedule = schedule
        self.factor = tf.Variable(1.0, trainable=False, dtype=tf.float32, name="cooldown_factor")

    def __call__(self, step):
        return tf.cast(self.schedule(step), tf.float32) * self.factor

    def get_config(self) -> dict:
        return {"schedule": keras.saving.serialize_keras_object(self.schedule)}


def find_cooldown(schedule) -> CooldownSchedule | None:
    """The :class:`CooldownSchedule` in ``schedule`` or in the schedules it wraps (``.schedule``), or None."""
    while schedule is not None and not isinstance(schedule, CooldownSchedule):
        schedule = getattr(schedule, "schedule", None)
    return schedule


def paper_optimizer(d_model: int, warmup_steps: int = 4000, scale: float = 1.0, **kwargs) -> keras.optimizers.Adam:
    """Adam with beta_1=0.9, beta_2=0.98, epsilon=1e-9 and :class:`WarmupSchedule` (Section 5.3).

    Args:
        d_model, warmup_steps, scale: passed to :class:`WarmupSchedule`.
        **kwargs: further arguments of ``keras.optimizers.Adam`` (e.g.
            ``gradient_accumulation_steps``, ``clipnorm``).

    Returns:
        A :class:`~keras_transformer.training.optimizer.FusedAdam` (a
        ``keras.optimizers.Adam`` whose update is one TensorFlow kernel per
        variable; the same update, variables and config).

    Raises:
        ValueError: from :class:`WarmupSchedule` for non-positive arguments.
    """
    return FusedAdam(
        learning_rate=WarmupSchedule(d_model, warmup_steps, scale),
        beta_1=0.9,
        beta_2=0.98,
        epsilon=1e-9,
        **kwargs,
    )

