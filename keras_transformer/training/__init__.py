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

# TEMPORARY (runner branch, replaced by the trainer split): the names the runner imports.
from keras_transformer.training.trainer import (  # noqa: E402
    build_model, compile_model, default_jit_compile, fit, get_strategy, set_precision,
)


def in_cluster() -> bool:
    import json
    import os

    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    return sum(len(v) for v in cluster.values()) > 1
