"""The residual sub-layer of the encoder and decoder layers (Section 3.1; dropout, Section 5.4).

Every sub-layer of a Transformer layer (self-attention, cross-attention, the
feed-forward network) is wrapped the same way: post-LN, the paper,
``LayerNorm(x + Dropout(Sublayer(x)))``, or pre-LN, ``x +
Dropout(Sublayer(LayerNorm(x)))``. :func:`residual` is that wrapper;
:class:`ResidualLayer` is the base of :class:`~keras_transformer.layers.encoder_layer.EncoderLayer`
and :class:`~keras_transformer.layers.decoder_layer.DecoderLayer`: their
shared hyper-parameters, argument check, config, and the factories of each
sub-layer's LayerNorm and Dropout. The norms and dropouts stay attributes of
the layer itself (``self_attention_norm``, ``feed_forward_dropout``, ...):
Keras saves weights by the path of tracked attributes, so a wrapper layer
around them would move every saved weight.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.layers.dropout import Dropout

__all__ = ["ResidualLayer", "layer_norm_rows", "residual"]


def layer_norm_rows(norm, x):
    """``norm(x)`` of a Keras ``LayerNormalization`` in 9 ops, for a decoding step's ``[batch, d_model]`` rows.

    Layer normalization (Ba et al., 2016; Section 3.1 and 5.4): ``(x - mean)
    / sqrt(var + epsilon) * gamma + beta`` over the last axis. Keras' layer
    spends 13 graph ops on it; a decoding step normalizes 3 times per decoder
    layer (and once more with pre-LN), and at one sentence the step's time
    is mostly the dispatch of small ops. Equal to ``norm(x)`` up to float
    rounding.

    Args:
        norm: a built ``keras.layers.LayerNormalization`` over the last axis
            (``center`` and ``scale`` on).
        x: float32 tensor ``[batch, d_model]``. Other dtypes or ranks go
            through ``norm(x)`` itself (Keras normalizes 16-bit inputs in
            float32).

    Returns:
        tensor shaped like ``x``, of its dtype.
    """
    if x.dtype != tf.float32 or len(x.shape) != 2 or not (norm.center and norm.scale):
        return norm(x)
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
    scale = tf.math.rsqrt(variance + norm.epsilon) * ops.cast(norm.gamma, x.dtype)
    return (x - mean) * scale + ops.cast(norm.beta, x.dtype)


def residual(x, sublayer, norm, dropout, *, norm_first, training):
    """One residual sub-layer: ``LayerNorm(x + Dropout(Sublayer(x)))`` or, pre-LN, ``x + Dropout(Sublayer(LayerNorm(x)))``.

    Post-LN is the paper's (Section 3.1), with dropout on the sub-layer output
    before the residual add (Section 5.4). A decoding step's ``[batch,
    d_model]`` float32 rows are normalized with :func:`layer_norm_rows` (the
    same values in fewer ops); other inputs go through ``norm`` itself.

    Args:
        x: float tensor ``[batch, T, d_model]`` or ``[batch, d_model]``, of
            the compute dtype.
        sublayer: function of the (normalized, with pre-LN) input returning
            ``(y, extras)``: ``y`` shaped like ``x``, ``extras`` anything the
            caller wants back (attention weights, a cache) or None.
        norm: the sub-layer's built ``keras.layers.LayerNormalization``.
        dropout: the sub-layer's :class:`keras_transformer.layers.Dropout` (rate P_drop).
        norm_first: bool, pre-LN instead of post-LN.
        training: bool, dropout only when True.

    Returns:
        ``(outputs, extras)``: ``outputs`` shaped like ``x``, of its dtype;
        ``extras`` as ``sublayer`` returned it.
    """
    y, extras = sublayer(layer_norm_rows(norm, x) if norm_first else x)
    x = x + dropout(y, training=training)
    if not norm_first:
        x = layer_norm_rows(norm, x)
    return x, extras


class ResidualLayer(keras.layers.Layer):
    """Base of the encoder and decoder layers: a sequence of residual sub-layers (Section 3.1).

    Holds the hyper-parameters both layers share, checks them and serializes
    them. A subclass names its sub-layers in ``_sublayer_names`` (first to
    last) and creates them, as attributes of those names, in
    ``_create_sublayers``; this class then gives each sub-layer ``<name>``
    a LayerNorm ``<name>_norm`` and a Dropout (rate P_drop)
    ``<name>_dropout``, builds them all, and wraps a call of the sub-layer
    with :meth:`_residual` (:func:`residual`). The attribute names are the
    paths of the weights in saved files (``.keras``, ``.weights.h5``); the
    creation and build order (sub-layers, norms, dropouts) is the order in
    which seeded initial weights are drawn.

    Args:
        d_model: int, model width.
        num_heads: int, attention heads (divides ``d_model``).
        dff: int, feed-forward inner width.
        dropout_rate: float, residual dropout P_drop (Section 5.4).
        norm_first: bool, pre-LN instead of post-LN.
        attention_dropout_rate: float, dropout on attention weights (not in
            the paper; default 0).
        layer_norm_epsilon: float, LayerNorm epsilon.
        **kwargs: base layer arguments.

    Raises:
        ValueError: if ``dropout_rate`` is outside ``[0, 1)`` (the message
            names the subclass).
    """

    #: The sub-layer attributes, first to last.
    _sublayer_names: tuple[str, ...] = ()
    #: The ``__init__`` arguments, in ``get_config``'s order.
    _config_fields = (
        "d_model",
        "num_heads",
        "dff",
        "dropout_rate",
        "norm_first",
        "attention_dropout_rate",
        "layer_norm_epsilon",
    )

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dff: int,
        dropout_rate: float = 0.1,
        norm_first: bool = False,
        attention_dropout_rate: float = 0.0,
        layer_norm_epsilon: float = 1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(f"{type(self).__name__}: dropout_rate must be in [0, 1), got {dropout_rate!r}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.dropout_rate = dropout_rate
        self.norm_first = norm_first
        self.attention_dropout_rate = attention_dropout_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.supports_masking = True
        policy = self.dtype_policy
        self._create_sublayers()
        for name in self._sublayer_names:
            norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=policy, name=f"{name}_norm")
            setattr(self, f"{name}_norm", norm)
        for name in self._sublayer_names:
            setattr(self, f"{name}_dropout", Dropout(dropout_rate, dtype=policy, name=f"{name}_dropout"))

    def _create_sublayers(self):
        """Creates the sub-layers of ``_sublayer_names`` as attributes, in that order."""
        raise NotImplementedError

    def build(self, input_shape):
        shape = (None, None, self.d_model)
        for name in self._sublayer_names:
            getattr(self, name).build(shape)
        for name in self._sublayer_names:
            getattr(self, f"{name}_norm").build(shape)
        self.built = True

    def _residual(self, x, name, sublayer, training):
        """:func:`residual` of ``sublayer`` with the norm and dropout of the sub-layer ``name``."""
        norm, dropout = getattr(self, f"{name}_norm"), getattr(self, f"{name}_dropout")
        return residual(x, sublayer, norm, dropout, norm_first=self.norm_first, training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self._config_fields})
        return config
