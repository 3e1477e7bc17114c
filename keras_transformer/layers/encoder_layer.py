"""One encoder layer: self-attention + feed-forward sub-layers (Section 3.1)."""

from __future__ import annotations

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import FeedForward

__all__ = ["EncoderLayer"]


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(keras.layers.Layer):
    """Transformer encoder layer, Section 3.1.

    Two sub-layers, multi-head self-attention (Section 3.2.2) and the
    position-wise feed-forward network (Eq. 2), each wrapped as
    ``LayerNorm(x + Dropout(Sublayer(x)))`` (post-LN, the paper; dropout on
    the sub-layer output before the residual add, Section 5.4), or with
    ``norm_first=True`` as ``x + Dropout(Sublayer(LayerNorm(x)))`` (pre-LN).

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
        inputs: float tensor ``[batch, S, d_model]``.
        mask: optional bool ``[batch, S]`` source padding mask (True = real
            token); filled from the Keras mask of ``inputs`` when omitted.
        training: bool, dropout only when True.

    Returns:
        Tensor ``[batch, S, d_model]`` of the compute dtype (mask propagated).

    Raises:
        ValueError: for invalid sizes or rates.

    Example:

    >>> layer = EncoderLayer(d_model=16, num_heads=2, dff=32)
    >>> layer(np.zeros((2, 5, 16), "float32")).shape
    TensorShape([2, 5, 16])
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
            raise ValueError(f"EncoderLayer: dropout_rate must be in [0, 1), got {dropout_rate!r}")
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
        self.feed_forward = FeedForward(d_model, dff, dtype=policy, name="feed_forward")
        self.self_attention_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="self_attention_norm"
        )
        self.feed_forward_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="feed_forward_norm"
        )
        self.self_attention_dropout = keras.layers.Dropout(dropout_rate, dtype=policy, name="self_attention_dropout")
        self.feed_forward_dropout = keras.layers.Dropout(dropout_rate, dtype=policy, name="feed_forward_dropout")

    def build(self, input_shape):
        shape = (None, None, self.d_model)
        self.self_attention.build(shape)
        self.feed_forward.build(shape)
        self.self_attention_norm.build(shape)
        self.feed_forward_norm.build(shape)
        self.built = True

    def call(self, inputs, mask=None, training=None):
        x = inputs
        # Self-attention sub-layer.
        y = self.self_attention_norm(x) if self.norm_first else x
        y = self.self_attention(y, attention_mask=mask, training=training)
        x = x + self.self_attention_dropout(y, training=training)
        if not self.norm_first:
            x = self.self_attention_norm(x)
        # Feed-forward sub-layer.
        y = self.feed_forward_norm(x) if self.norm_first else x
        y = self.feed_forward(y)
        x = x + self.feed_forward_dropout(y, training=training)
        if not self.norm_first:
            x = self.feed_forward_norm(x)
        return x

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
