"""Adam with one fused TensorFlow kernel per variable (the optimizer of Section 5.3).

Keras 3's ``keras.optimizers.Adam`` writes its update as about fifteen small
backend ops per variable: in a TensorFlow graph that is some 1,300 kernels per
step for the tiny preset's 85 variables, each moment read and written in
several passes over memory, and about 40 ms of graph construction per
variable when the train step is traced (about 3 s at every training start for the
tiny preset). :class:`FusedAdam` computes the same update (Kingma & Ba, 2015,
Algorithm 1 with the "epsilon hat" form that Keras uses) with TensorFlow's
``ResourceApplyAdam`` kernel: one op per variable, one pass over the variable
and its two moments. Its variables (a momentum and a velocity per weight, in
the same order) and its config are Keras Adam's, so ``.weights.h5``
checkpoints, which store them by position, move between the two.

It falls back to Keras' own update where the kernel does not apply:
``amsgrad=True``, another Keras backend than TensorFlow, or a variable whose
dtype is not float32/float64 (float16 and bfloat16 variables; mixed precision
keeps its variables in float32, so this is rare).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.training.keras_internals import adam_slots

__all__ = ["FusedAdam"]

_FUSED_DTYPES = (tf.float32, tf.float64)


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable (the local copy inside ``strategy.extended.update``)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(keras.optimizers.Adam):
    """``keras.optimizers.Adam`` whose per-variable update is one ``ResourceApplyAdam`` kernel (Section 5.3).

    The update of variable ``w`` with gradient ``g`` at step ``t`` (1-based,
    ``t = iterations + 1``), as in ``keras.optimizers.Adam``::

        m <- m + (1 - beta_1) * (g - m)
        v <- v + (1 - beta_2) * (g^2 - v)
        w <- w - lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)

    Same arguments, variables (``momentum``/``velocity`` slots) and config as
    ``keras.optimizers.Adam``; every base-optimizer feature (learning-rate
    schedules, ``clipnorm``, ``global_clipnorm``, ``weight_decay``,
    ``gradient_accumulation_steps``, ``keras.optimizers.LossScaleOptimizer``,
    ``tf.distribute`` strategies) works as with Keras' Adam, which updates
    ``amsgrad=True`` and non-float32/float64 variables.

    Args:
        As ``keras.optimizers.Adam``: ``learning_rate`` (a float or a
        schedule, units per step), ``beta_1``, ``beta_2``, ``epsilon``,
        ``amsgrad`` and the base optimizer's keyword arguments.

    Raises:
        ValueError: as ``keras.optimizers.Adam`` for bad arguments.

    Example:
    >>> from keras_transformer.training.schedule import WarmupSchedule
    >>> optimizer = FusedAdam(WarmupSchedule(d_model=512), beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    """

    def update_step(self, gradient, variable, learning_rate):
        """Applies one Adam update to ``variable`` (a float32/float64 tensor of any shape) in one kernel."""
        dtype = tf.as_dtype(variable.dtype)
        if self.amsgrad or keras.backend.backend() != "tensorflow" or dtype not in _FUSED_DTYPES:
            return super().update_step(gradient, variable, learning_rate)
        momentum, velocity = adam_slots(self, variable)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.constant(self.beta_1, dtype)
        beta_2 = tf.constant(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable),
            m=_handle(momentum),
            v=_handle(velocity),
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.constant(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype),
            use_locking=False,
        )
