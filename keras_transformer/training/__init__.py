"""Training: the learning-rate schedule (Eq. 3), Adam (Section 5.3), the loss (Section 5.4) and the trainer."""

from keras_transformer.training.losses import MaskedLabelSmoothedCrossEntropy, masked_accuracy, token_losses
from keras_transformer.training.optimizer import FusedAdam
from keras_transformer.training.schedule import WarmupSchedule, paper_optimizer

__all__ = [
    "FusedAdam",
    "MaskedLabelSmoothedCrossEntropy",
    "WarmupSchedule",
    "masked_accuracy",
    "paper_optimizer",
    "token_losses",
]
