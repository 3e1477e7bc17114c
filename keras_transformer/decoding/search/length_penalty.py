"""The length penalty of Wu et al. (2016), Eq. 14, as Section 6.1 of the paper uses it.

    lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha,     score(Y) = log P(Y | X) / lp(Y)

where ``|Y|`` counts the output tokens including EOS: beam search ranks its
hypotheses by ``score(Y)`` (:mod:`~keras_transformer.decoding.search.beam`)
and the Translator's forced decoding reports given targets on the same scale.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["length_penalty_factor"]


def length_penalty_factor(length: Any, alpha: float) -> tf.Tensor:
    """Length penalty lp(Y) of Wu et al. (2016), Eq. 14, used in Section 6.1.

    Args:
        length: number of output tokens ``|Y|`` including EOS; int or float
            tensor of any shape.
        alpha: the length penalty exponent (0.6 in the paper; 0 disables it).

    Returns:
        float32 tensor shaped like ``length``: ``((5 + |Y|) / 6) ** alpha``.
    """
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))
