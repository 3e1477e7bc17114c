"""Dropout that draws one 32-bit random number for every two elements (Section 5.4, residual dropout).

``keras.layers.Dropout`` on TensorFlow draws one random float per element
(``tf.nn.experimental.stateless_dropout``): on a 2-core CPU those draws were
7% of the ``compact`` preset's training step (``scripts/bench/train_efficiency.py
--profile``). A 16-bit uniform integer per element decides as well: an element
is kept when its draw ``u`` in ``[0, 65536)`` is at least ``round(rate *
65536)``, so the rate is exact to 1/65536 (0.2 becomes 13107/65536 =
0.19999695), and kept elements are scaled by ``65536 / (65536 - threshold)``
so the expectation is unchanged. One 32-bit Philox draw gives two such
integers, half the draws of Keras' layer.
"""

from __future__ import annotations

import keras
import tensorflow as tf

__all__ = ["Dropout", "dropout_threshold"]

_LEVELS = 1 << 16


def dropout_threshold(rate: float) -> tuple[int, float]:
    """The 16-bit threshold and the scale of kept elements for a dropout ``rate``.

    Args:
        rate: probability of dropping an element, in ``[0, 1)``.

    Returns:
        ``(threshold, scale)``: an element whose 16-bit draw is below
        ``threshold`` is dropped (probability ``threshold / 65536``, within
        ``1 / 131072`` of ``rate``); kept ones are multiplied by ``scale =
        65536 / (65536 - threshold)``.

    Raises:
        ValueError: if ``rate`` is outside ``[0, 1)``.
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"Dropout: rate must be in [0, 1), got {rate!r}")
    threshold = min(round(rate * _LEVELS), _LEVELS - 1)
    return threshold, _LEVELS / (_LEVELS - threshold)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """``keras.layers.Dropout`` with half the random draws (Srivastava et al., 2014; Section 5.4).

    Same arguments, same serialization and the same seed generator as
    Keras' layer; in training it zeroes each element with probability
    ``threshold / 65536`` (:func:`dropout_threshold`, within 1/131072 of
    ``rate``) and scales the rest by ``65536 / (65536 - threshold)``. With
    another backend than TensorFlow, or a ``noise_shape``, it is Keras' layer.

    Args:
        rate: float in ``[0, 1)``, the fraction of elements dropped.
        noise_shape: as ``keras.layers.Dropout`` (then Keras' own draws).
        seed: int or ``None``, the seed of the layer's seed generator.
        **kwargs: base layer arguments (``name``, ``dtype``).

    Call arguments:
        inputs: float tensor of any shape and dtype.
        training: bool, drop only when ``True``.

    Returns:
        A tensor of the shape and dtype of ``inputs``.

    Raises:
        ValueError: if ``rate`` is outside ``[0, 1)``.

    Example:
    >>> layer = Dropout(0.2, seed=0)
    >>> y = layer(tf.ones([4, 8]), training=True)  # each element 0.0 or 1.25
    """

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        dropout_threshold(rate)
        super().__init__(rate, noise_shape=noise_shape, seed=seed, **kwargs)

    def call(self, inputs, training=False):
        if not training or self.rate == 0 or self.noise_shape is not None or keras.backend.backend() != "tensorflow":
            return super().call(inputs, training=training)
        threshold, scale = dropout_threshold(self.rate)
        seed = tf.cast(self.seed_generator.next(), tf.int32)
        size = tf.size(inputs)
        words = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.int32)
        draws = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
        keep = tf.reshape(draws, tf.shape(inputs)) >= tf.constant(threshold, tf.uint16)
        return tf.where(keep, inputs * tf.cast(scale, inputs.dtype), tf.zeros_like(inputs))
