"""One decoder layer: masked self-attention, cross-attention, feed-forward (Section 3.1)."""

from __future__ import annotations

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.residual import ResidualLayer

__all__ = ["DecoderLayer"]


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(ResidualLayer):
    """Transformer decoder layer, Section 3.1.

    Three sub-layers: masked (causal) multi-head self-attention, multi-head
    attention over the encoder output (with the source padding mask), and
    the position-wise feed-forward network. Each is wrapped as
    ``LayerNorm(x + Dropout(Sublayer(x)))`` (post-LN, the paper, Section 5.4)
    or, with ``norm_first=True``, ``x + Dropout(Sublayer(LayerNorm(x)))``
    (:func:`~keras_transformer.layers.residual.residual`).

    Incremental decoding (Section 3.2.3): pass ``self_attention_cache``
    (``{"key", "value"}``, heads-first ``[batch, num_heads, L, depth]``) and
    ``cross_attention_cache`` (``{"key", "value"}`` ``[batch, num_heads, S,
    depth]`` from :meth:`MultiHeadAttention.compute_key_value` of
    ``cross_attention``); ``encoder_outputs`` may then be None. With
    ``cache_index`` (scalar int, the position of the single input token) the
    self-attention cache is a fixed buffer written at that position (XLA);
    without it, it holds the ``L`` positions decoded so far and grows by one.

    Args:
        d_model: int, model width (of the target positions and the encoder
            output).
        num_heads: int, heads of both attentions (divides ``d_model``).
        dff: int, feed-forward inner width (Eq. 2).
        dropout_rate: float, residual dropout P_drop of the three sub-layers.
        norm_first: bool, pre-LN (norm at each sub-layer's input) instead of
            post-LN.
        attention_dropout_rate: float, dropout on the weights of the self-
            and cross-attention (none in the paper; default 0).
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

    _sublayer_names = ("self_attention", "cross_attention", "feed_forward")

    def _create_sublayers(self):
        policy = self.dtype_policy
        d_model, num_heads, attention_dropout_rate = self.d_model, self.num_heads, self.attention_dropout_rate
        self.self_attention = MultiHeadAttention(
            d_model, num_heads, dropout_rate=attention_dropout_rate, dtype=policy, name="self_attention"
        )
        self.cross_attention = MultiHeadAttention(
            d_model, num_heads, dropout_rate=attention_dropout_rate, dtype=policy, name="cross_attention"
        )
        self.feed_forward = FeedForward(d_model, self.dff, dtype=policy, name="feed_forward")

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

        x, new_cache = self._residual(inputs, "self_attention", self_attend, training)
        x, cross_weights = self._residual(x, "cross_attention", cross_attend, training)
        x, _ = self._residual(x, "feed_forward", feed_forward, training)
        result = (x,)
        if return_attention_scores:
            result += (cross_weights,)
        if caching:
            result += (new_cache,)
        return result[0] if len(result) == 1 else result
