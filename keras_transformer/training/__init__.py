"""Training (Section 5): schedule, optimizer, loss, strategy, precision, train step, compile and fit.

* :mod:`~keras_transformer.training.schedule`, :mod:`~keras_transformer.training.optimizer`:
  the learning-rate schedule (Eq. 3), its cooldown at the end of a time budget, and Adam (Section 5.3);
  :mod:`~keras_transformer.training.accumulation`: the schedule under gradient accumulation.
* :mod:`~keras_transformer.training.losses`: the label-smoothed loss (Section 5.4).
* :mod:`~keras_transformer.training.distribute`: the ``tf.distribute`` strategy and the
  ``TF_CONFIG`` cluster (Section 5.2).
* :mod:`~keras_transformer.training.precision`: mixed precision by hardware.
* :mod:`~keras_transformer.training.train_step`: the globally token-normalized, per-replica XLA step.
* :mod:`~keras_transformer.training.fixed_shapes`: batches padded to a bounded set of shapes for XLA.
* :mod:`~keras_transformer.training.compile`: building and compiling the model.
* :mod:`~keras_transformer.training.fitting`: resumable ``model.fit`` runs (:func:`fit`).
* :mod:`~keras_transformer.training.checkpoints`, :mod:`~keras_transformer.training.validation`,
  :mod:`~keras_transformer.training.progress`: checkpoints and averaging (Section 6.1),
  validation BLEU, progress output.
* :mod:`~keras_transformer.training.keras_internals`: every use of private Keras attributes.
"""

from keras_transformer.training.compile import build_model, compile_model, default_jit_compile
from keras_transformer.training.distribute import get_strategy, in_cluster, is_chief, task_dir
from keras_transformer.training.fitting import TimeBudget, fit, with_known_length
from keras_transformer.training.fixed_shapes import fixed_shape_batches
from keras_transformer.training.losses import MaskedLabelSmoothedCrossEntropy, masked_accuracy, token_losses
from keras_transformer.training.optimizer import FusedAdam
from keras_transformer.training.precision import PRECISION_POLICIES, set_precision
from keras_transformer.training.schedule import CooldownSchedule, WarmupSchedule, paper_optimizer
from keras_transformer.training.train_step import install_train_step

__all__ = [
    "PRECISION_POLICIES",
    "CooldownSchedule",
    "FusedAdam",
    "MaskedLabelSmoothedCrossEntropy",
    "TimeBudget",
    "WarmupSchedule",
    "build_model",
    "compile_model",
    "default_jit_compile",
    "fit",
    "fixed_shape_batches",
    "get_strategy",
    "in_cluster",
    "install_train_step",
    "is_chief",
    "masked_accuracy",
    "paper_optimizer",
    "set_precision",
    "task_dir",
    "token_losses",
    "with_known_length",
]
