"""One encoder layer: self-attention + feed-forward sub-layers (Section 3.1)."""

from __future__ import annotations

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.residual import ResidualLayer

__all__ = ["EncoderLayer"]


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(ResidualLayer):
    """Transformer encoder layer, Section 3.1.

    Two sub-layers, multi-head self-attention (Section 3.2.2) and the
    position-wise feed-forward network (Eq. 2), each wrapped as
    ``LayerNorm(x + Dropout(Sublayer(x)))`` (post-LN, the paper; dropout on
    the sub-layer output before the residual add, Section 5.4), or with
    ``norm_first=True`` as ``x + Dropout(Sublayer(LayerNorm(x)))`` (pre-LN):
    :func:`~keras_transformer.layers.residual.residual`.

    Args:
        d_model: int, model width (inputs, outputs, both sub-layers).
        num_heads: int, self-attention heads (divides ``d_model``).
        dff: int, inner width of the feed-forward sub-layer.
        dropout_rate: float, P_drop on each sub-layer's output.
        norm_first: bool, pre-LN instead of the paper's post-LN.
        attention_dropout_rate: float, dropout on the self-attention weights
            (not in the paper; default 0).
        layer_norm_epsilon: float, epsilon of the two LayerNorms.
        **kwargs: base layer arguments (``name``, ``dtype``).

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

    _sublayer_names = ("self_attention", "feed_forward")

    def _create_sublayers(self):
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(
            self.d_model, self.num_heads, dropout_rate=self.attention_dropout_rate, dtype=policy, name="self_attention"
        )
        self.feed_forward = FeedForward(self.d_model, self.dff, dtype=policy, name="feed_forward")

    def call(self, inputs, mask=None, training=None):
        def self_attend(y):
            return self.self_attention(y, attention_mask=mask, training=training), None

        def feed_forward(y):
            return self.feed_forward(y), None

        x, _ = self._residual(inputs, "self_attention", self_attend, training)
        x, _ = self._residual(x, "feed_forward", feed_forward, training)
        return x
