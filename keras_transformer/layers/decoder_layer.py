"""One decoder layer: masked self-attention, cross-attention, feed-forward (Section 3.1)."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import FeedForward

__all__ = ["DecoderLayer", "layer_norm_rows"]


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


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(keras.layers.Layer):
    """Transformer decoder layer, Section 3.1.

    Three sub-layers: masked (causal) multi-head self-attention, multi-head
    attention over the encoder output (with the source padding mask), and
    the position-wise feed-forward network. Each is wrapped as
    ``LayerNorm(x + Dropout(Sublayer(x)))`` (post-LN, the paper, Section 5.4)
    or, with ``norm_first=True``, ``x + Dropout(Sublayer(LayerNorm(x)))``.

    Incremental decoding (Section 3.2.3): pass ``self_attention_cache``
    (``{"key", "value"}``, heads-first ``[batch, num_heads, L, depth]``) and
    ``cross_attention_cache`` (``{"key", "value"}`` ``[batch, num_heads, S,
    depth]`` from :meth:`MultiHeadAttention.compute_key_value` of
    ``cross_attention``); ``encoder_outputs`` may then be None. With
    ``cache_index`` (scalar int, the position of the single input token) the
    self-attention cache is a fixed buffer written at that position (XLA);
    without it, it holds the ``L`` positions decoded so far and grows by one.

    Args:
        d_model: int, model width.
        num_heads: int, attention heads (divides ``d_model``).
        dff: int, feed-forward inner width.
        dropout_rate: float, residual dropout P_drop.
        norm_first: bool, pre-LN instead of post-LN.
        attention_dropout_rate: float, dropout on attention weights (not in
            the paper; default 0).
        layer_norm_epsilon: float, LayerNorm epsilon.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: float tensor ``[batch, T, d_model]`` (T = 1 with a cache), or
            ``[batch, d_model]`` for one position per row (a decoding step).
        encoder_outputs: float tensor ``[batch, S, d_model]``, or None with
            ``cross_attention_cache``.
        padding_mask: optional bool ``[batch, T]`` target padding mask (keys
            of the self-attention; combined with the causal mask).
        encoder_padding_mask: optional bool ``[batch, S]`` source padding mask.
        encoder_attention_bias: optional float32 ``[batch, 1, 1, S]``, the
            source padding mask in additive form
            (:func:`~keras_transformer.layers.attention.mask_to_bias`), which a
            decoding step uses instead of ``encoder_padding_mask``.
        self_attention_cache: optional dict, see above.
        cache_index: optional scalar int, see above (fixed buffer); None with
            ``self_attention_cache`` = a growing cache.
        cross_attention_cache: optional dict, see above.
        return_attention_scores: bool, also return the cross-attention weights.
        training: bool, dropout only when True.

    Returns:
        ``outputs`` shaped like ``inputs``, of the compute dtype; then, if
        requested, cross-attention weights float32 ``[batch, num_heads, T,
        S]``; then, with ``self_attention_cache``, the updated cache dict.

    Raises:
        ValueError: for invalid sizes or rates, or when neither
            ``encoder_outputs`` nor ``cross_attention_cache`` is given.

    Example:

    >>> layer = DecoderLayer(d_model=16, num_heads=2, dff=32)
    >>> layer(np.zeros((2, 4, 16), "float32"), np.zeros((2, 6, 16), "float32")).shape
    TensorShape([2, 4, 16])
    """

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
            raise ValueError(f"DecoderLayer: dropout_rate must be in [0, 1), got {dropout_rate!r}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.dropout_rate = dropout_rate
        self.norm_first = norm_first
        self.attention_dropout_rate = attention_dropout_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.supports_masking = True
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(
            d_model, num_heads, dropout_rate=attention_dropout_rate, dtype=policy, name="self_attention"
        )
        self.cross_attention = MultiHeadAttention(
            d_model, num_heads, dropout_rate=attention_dropout_rate, dtype=policy, name="cross_attention"
        )
        self.feed_forward = FeedForward(d_model, dff, dtype=policy, name="feed_forward")

        def norm(name):
            return keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=policy, name=name)

        def dropout(name):
            return keras.layers.Dropout(dropout_rate, dtype=policy, name=name)

        self.self_attention_norm = norm("self_attention_norm")
        self.cross_attention_norm = norm("cross_attention_norm")
        self.feed_forward_norm = norm("feed_forward_norm")
        self.self_attention_dropout = dropout("self_attention_dropout")
        self.cross_attention_dropout = dropout("cross_attention_dropout")
        self.feed_forward_dropout = dropout("feed_forward_dropout")

    def build(self, input_shape):
        shape = (None, None, self.d_model)
        for layer in (
            self.self_attention,
            self.cross_attention,
            self.feed_forward,
            self.self_attention_norm,
            self.cross_attention_norm,
            self.feed_forward_norm,
        ):
            layer.build(shape)
        self.built = True

    def _sublayer(self, x, norm, dropout, fn, training):
        """Residual sub-layer (post-LN or pre-LN); ``fn`` returns (y, extras).

        A decoding step's ``[batch, d_model]`` rows are normalized with
        :func:`layer_norm_rows` (the same values in fewer ops).
        """
        normalize = lambda t: layer_norm_rows(norm, t)  # noqa: E731  (other ranks go through norm itself)
        y, extras = fn(normalize(x) if self.norm_first else x)
        x = x + dropout(y, training=training)
        if not self.norm_first:
            x = normalize(x)
        return x, extras

    def call(
        self,
        inputs,
        encoder_outputs=None,
        padding_mask=None,
        encoder_padding_mask=None,
        self_attention_cache=None,
        cache_index=None,
        cross_attention_cache=None,
        return_attention_scores=False,
        training=None,
        encoder_attention_bias=None,
    ):
        if encoder_outputs is None and cross_attention_cache is None:
            raise ValueError("DecoderLayer: pass encoder_outputs or cross_attention_cache")
        caching = self_attention_cache is not None

        def self_attend(y):
            if caching:
                return self.self_attention(
                    y,
                    cache=self_attention_cache,
                    cache_index=cache_index,
                    append_to_cache=cache_index is None,
                    training=training,
                )
            return (
                self.self_attention(y, attention_mask=padding_mask, use_causal_mask=True, training=training),
                None,
            )

        def cross_attend(y):
            out = self.cross_attention(
                y,
                value=encoder_outputs,
                attention_mask=encoder_padding_mask,
                attention_bias=encoder_attention_bias,
                cache=cross_attention_cache,
                return_attention_scores=True,
                training=training,
            )
            return out[0], out[1]

        def feed_forward(y):
            return self.feed_forward(y), None

        x = inputs
        x, new_cache = self._sublayer(x, self.self_attention_norm, self.self_attention_dropout, self_attend, training)
        x, cross_weights = self._sublayer(
            x, self.cross_attention_norm, self.cross_attention_dropout, cross_attend, training
        )
        x, _ = self._sublayer(x, self.feed_forward_norm, self.feed_forward_dropout, feed_forward, training)
        result = (x,)
        if return_attention_scores:
            result += (cross_weights,)
        if caching:
            result += (new_cache,)
        return result[0] if len(result) == 1 else result

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dff": self.dff,
                "dropout_rate": self.dropout_rate,
                "norm_first": self.norm_first,
                "attention_dropout_rate": self.attention_dropout_rate,
                "layer_norm_epsilon": self.layer_norm_epsilon,
            }
        )
        return config
