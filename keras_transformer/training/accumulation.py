"""Learning-rate schedules under gradient accumulation (Section 5.1 batches on fewer devices).

The paper's batches hold about 25,000 source and 25,000 target tokens
(Section 5.1). One device reaches that with Keras' optimizer argument
``gradient_accumulation_steps=k``: gradients of ``k`` consecutive batches are
averaged and applied once. Keras 3.15 then reports ``optimizer.iterations`` as
updates, but evaluates a ``LearningRateSchedule`` at the raw batch counter
(``optimizer._iterations``, ``k`` times larger), so the warmup of Eq. 3 would
end ``k`` times too early. :class:`PerUpdateSchedule` divides the counter by
``k`` first, so the schedule counts updates as in the paper.
"""

from __future__ import annotations

import keras
import tensorflow as tf

__all__ = ["PerUpdateSchedule"]


@keras.saving.register_keras_serializable(package="keras_transformer")
class PerUpdateSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Evaluates ``schedule`` at the update count ``batch_step // accumulation_steps``.

    Args:
        schedule: a ``LearningRateSchedule`` (e.g. ``WarmupSchedule``, Eq. 3).
        accumulation_steps: batches per optimizer update (positive int).

    Call arguments:
        step: the optimizer's 0-based batch counter (int or scalar int tensor).

    Returns:
        ``schedule(step // accumulation_steps)``, a scalar float32 tensor.

    Raises:
        ValueError: if ``accumulation_steps`` is not a positive integer.

    Example:
    >>> lr = PerUpdateSchedule(WarmupSchedule(512, 4000), accumulation_steps=4)
    >>> opt = keras.optimizers.Adam(lr, gradient_accumulation_steps=4)
    """

    def __init__(self, schedule, accumulation_steps: int):
        if not isinstance(accumulation_steps, int) or accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be a positive integer, got {accumulation_steps!r}")
        if isinstance(schedule, dict):
            schedule = keras.saving.deserialize_keras_object(schedule)
        self.schedule = schedule
        self.accumulation_steps = accumulation_steps

    def __call__(self, step):
        return self.schedule(tf.math.floordiv(tf.cast(step, tf.int64), self.accumulation_steps))

    def get_config(self) -> dict:
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "accumulation_steps": self.accumulation_steps,
        }
