"""Scaled dot-product attention (Eq. 1) and multi-head attention (Section 3.2.2).

Layout: heads come first, ``[batch, num_heads, length, depth]`` (the layout of
``torch.nn.functional.scaled_dot_product_attention`` and of CTranslate2), so
that ``Q K^T`` and ``weights V`` are plain batched matrix products over the
last two axes and a key/value cache grows or is written along ``length``
without any transpose. Attention weights are ``[batch, num_heads,
query_length, key_length]``.

Masking: ``True`` = may attend. Scores are cast to float32 before masking and
softmax (also under mixed precision), masked scores are replaced by
:data:`MASK_VALUE` (-1e9, finite in float32 so no ``inf - inf = NaN``), and
the softmax output is zeroed again where masked, so a masked key gets exactly
0 weight and a fully masked query row gets all-zero weights (output 0), never
NaN.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.layers.dropout import Dropout

__all__ = ["MASK_VALUE", "attention_weights", "mask_to_bias", "scaled_dot_product_attention", "MultiHeadAttention"]

#: Score given to masked (query, key) pairs, in float32.
MASK_VALUE = -1e9


def _check_rank4(name, x):
    if len(x.shape) != 4:
        raise ValueError(
            f"scaled_dot_product_attention: {name} must have rank 4 [batch, num_heads, length, depth], "
            f"got shape {tuple(x.shape)}"
        )


def attention_weights(query, key, mask=None, bias=None):
    """``softmax(Q K^T / sqrt(d_k))`` with masking, computed in float32 (Eq. 1).

    Args:
        query: float tensor ``[batch, num_heads, T, depth]``.
        key: float tensor ``[batch, num_heads, S, depth]`` (same dtype).
        mask: optional bool tensor broadcastable to
            ``[batch, num_heads, T, S]``; True = may attend.
        bias: optional float32 tensor broadcastable to ``[batch, num_heads,
            T, S]`` added to the scores before the softmax: 0 where a key
            may be attended, :data:`MASK_VALUE` where not
            (:func:`mask_to_bias`). The cheaper form of a mask that is
            applied many times (two ops fewer per use: a decoding step's
            cross-attention); masked entries are still exactly 0 (``exp``
            of -1e9 underflows), but a row whose every key is masked gets
            uniform weights instead of zeros.

    Returns:
        float32 tensor ``[batch, num_heads, T, S]``; rows sum to 1, or are all
        0 when every key of the row is masked by ``mask``; masked entries are
        exactly 0.

    Raises:
        ValueError: if ``query`` or ``key`` is not of rank 4.
    """
    _check_rank4("query", query)
    _check_rank4("key", key)
    depth = query.shape[-1]
    # Scale the query first: keeps float16 scores in range.
    query = query * ops.cast(1.0 / float(depth) ** 0.5, query.dtype)
    scores = tf.matmul(query, key, transpose_b=True)
    scores = ops.cast(scores, "float32")
    if bias is not None:
        scores = scores + ops.cast(bias, "float32")  # a Keras layer call may have cast it to its compute dtype
    if mask is None:
        return tf.nn.softmax(scores, axis=-1)
    mask = ops.cast(mask, "bool")
    scores = ops.where(mask, scores, ops.cast(MASK_VALUE, "float32"))
    weights = tf.nn.softmax(scores, axis=-1)
    return ops.where(mask, weights, ops.zeros_like(weights))


def mask_to_bias(mask):
    """The additive form of a key mask for :func:`attention_weights`' ``bias`` (the masking of Section 3.2.1, Eq. 1).

    Computed once per batch, it replaces the two masking ops that every use of
    ``mask`` costs (a decoding step's cross-attention in every layer).

    Args:
        mask: bool tensor; True = may attend (e.g. the source padding mask
            ``[batch, S]`` reshaped to ``[batch, 1, 1, S]``).

    Returns:
        float32 tensor shaped like ``mask``: 0 where True, :data:`MASK_VALUE`
        where False. Raises nothing of its own (a non-boolean ``mask`` is cast:
        nonzero = may attend).
    """
    return tf.where(ops.cast(mask, "bool"), tf.constant(0.0, tf.float32), tf.constant(MASK_VALUE, tf.float32))


def scaled_dot_product_attention(query, key, value, mask=None):
    """Scaled dot-product attention, Section 3.2.1, Eq. 1.

    ``Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V`` for every head.

    Args:
        query: float tensor ``[batch, num_heads, T, depth]``.
        key: float tensor ``[batch, num_heads, S, depth]``.
        value: float tensor ``[batch, num_heads, S, depth_v]``.
        mask: optional bool tensor broadcastable to
            ``[batch, num_heads, T, S]``; True = may attend.

    Returns:
        Tuple ``(outputs, weights)``: ``outputs`` ``[batch, num_heads, T,
        depth_v]`` of ``value``'s dtype; ``weights`` float32 ``[batch,
        num_heads, T, S]`` (see :func:`attention_weights`).

    Raises:
        ValueError: if an input is not of rank 4.
    """
    _check_rank4("value", value)
    weights = attention_weights(query, key, mask)
    outputs = tf.matmul(ops.cast(weights, value.dtype), value)
    return outputs, weights


def _write_position(buffer, row, index):
    """``buffer[:, :, index] = row[:, :, 0]``: one-position update of a key/value buffer.

    One ``tf.tensor_scatter_nd_update`` of the ``[batch, num_heads]`` grid of
    rows at ``index`` (a core op that TF Serving and XLA both run). Under XLA
    it is an in-place update of the loop-carried buffer (about 20 us per step
    for a ``[128, 4, 66, 64]`` buffer, against 270 us through transposes); it
    serves the fixed-size cache of XLA decoding, while graph-mode decoding
    grows its cache instead (see :class:`MultiHeadAttention`).

    Args:
        buffer: ``[batch, num_heads, L, depth]`` (``L`` static or dynamic).
        row: ``[batch, num_heads, 1, depth]`` of ``buffer``'s dtype.
        index: scalar int32 in ``[0, L)`` (not checked: a tensor inside a loop).

    Returns:
        tensor shaped like ``buffer``, equal to it except at position ``index``.
    """
    shape = tf.shape(buffer)
    batch, heads = shape[0], shape[1]
    grid = tf.stack(
        [
            tf.tile(tf.range(batch)[:, None], [1, heads]),
            tf.tile(tf.range(heads)[None, :], [batch, 1]),
            tf.fill([batch, heads], tf.cast(index, tf.int32)),
        ],
        axis=-1,
    )  # [batch, heads, 3]: (b, h, index)
    return tf.tensor_scatter_nd_update(buffer, grid, row[:, :, 0])


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, Section 3.2.2.

    ``MultiHead(Q, K, V) = Concat(head_1..head_h) W^O`` with
    ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``,
    ``d_k = d_v = d_model / num_heads``. Each projection is one ``Dense``
    ``d_model -> num_heads * depth`` (with bias) reshaped into heads, so 8
    heads of 64 cost exactly what 1 head of 512 costs.

    Incremental decoding (``cache``; buffers are heads-first ``[batch,
    num_heads, L, depth]``, so a query attends to them with two batched
    matrix products and no transpose):

    * Self-attention with a fixed-size buffer (XLA decoding): pass
      ``cache={"key": k, "value": v}`` with buffers of any length ``L`` above
      the last ``cache_index`` (static or dynamic) and ``cache_index``
      (scalar int): the projected key/value of the single new query position
      are written at ``cache_index`` (in place under XLA) and the query
      attends to buffer positions ``<= cache_index``.
    * Self-attention with a growing cache (graph-mode decoding): pass
      ``cache`` holding the ``L`` positions decoded so far (``L = 0`` at the
      first step) and ``append_to_cache=True``: the new key/value are appended
      (``L + 1`` positions returned) and the query attends to all of them, so
      step ``t`` costs ``O(t)`` instead of ``O(max_length)``.
    * Cross-attention: pass ``cache`` with keys/values precomputed by
      :meth:`compute_key_value`, no ``cache_index`` and no
      ``append_to_cache``: they are used as is.

    Args:
        d_model: int, width of the inputs and outputs.
        num_heads: int, number of heads h; must divide ``d_model``.
        dropout_rate: float, dropout on the attention weights (not in the
            paper; default 0).
        use_bias: bool, biases in the four projections.
        kernel_initializer: initializer of the projection kernels.
        **kwargs: base layer arguments.

    Call arguments:
        query: float tensor ``[batch, T, d_model]``, or ``[batch, d_model]``
            for one position per row (a decoding step: no time axis, so every
            projection is a plain 2-D matrix product).
        value: float tensor ``[batch, S, d_model]``; defaults to ``query``
            (self-attention). Ignored with a precomputed cache.
        key: float tensor ``[batch, S, d_model]``; defaults to ``value``.
        attention_mask: optional bool ``[batch, S]`` (key padding mask) or
            ``[batch, T, S]`` (full mask); True = may attend.
        attention_bias: optional float32 ``[batch, 1, 1, S]`` additive key
            mask (:func:`mask_to_bias`), the cheaper form of
            ``attention_mask`` for a mask used at every decoding step (see
            :func:`attention_weights`); may be combined with ``attention_mask``.
        use_causal_mask: bool, also mask keys after the query position
            (Section 3.2.3); needs ``T == S``.
        cache: optional dict ``{"key", "value"}`` of tensors ``[batch,
            num_heads, L, depth]`` (see above).
        cache_index: optional scalar int, position written in a fixed-size
            self-attention cache; requires ``T == 1``.
        append_to_cache: bool, append this position's key/value to a growing
            self-attention cache; requires ``T == 1``.
        return_attention_scores: bool, also return the weights.
        training: bool, dropout only when True.

    Returns:
        ``outputs`` ``[batch, T, d_model]`` (``[batch, d_model]`` for a
        rank-2 query) of the compute dtype; with
        ``return_attention_scores`` also ``weights`` float32 ``[batch,
        num_heads, T, S]``; with ``cache`` also the (updated) cache dict. Order:
        ``(outputs, weights, cache)``, absent items skipped.

    Raises:
        ValueError: if ``d_model`` is not divisible by ``num_heads``, for a mask
            of bad rank, for ``cache_index`` or ``append_to_cache`` with more
            than one query position, or for both at once.

    Example:

    >>> mha = MultiHeadAttention(d_model=16, num_heads=4)
    >>> x = np.random.rand(2, 5, 16).astype("float32")
    >>> out, w = mha(x, attention_mask=np.array([[1, 1, 1, 0, 0]] * 2, bool),
    ...              return_attention_scores=True)
    >>> out.shape, w.shape
    (TensorShape([2, 5, 16]), TensorShape([2, 4, 5, 5]))
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout_rate: float = 0.0,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (("d_model", d_model), ("num_heads", num_heads)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"MultiHeadAttention: {name} must be a positive integer, got {value!r}")
        if d_model % num_heads:
            raise ValueError(
                f"MultiHeadAttention: d_model ({d_model}) must be divisible by num_heads ({num_heads})"
            )
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(f"MultiHeadAttention: dropout_rate must be in [0, 1), got {dropout_rate!r}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.depth = d_model // num_heads
        self.dropout_rate = dropout_rate
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

        def projection(name):
            # A plain [d_model, num_heads * depth] Dense (reshaped into heads
            # afterwards) so that Glorot init sees the true fan-in/fan-out.
            return keras.layers.Dense(
                d_model,
                use_bias=use_bias,
                kernel_initializer=keras.initializers.get(kernel_initializer),
                dtype=self.dtype_policy,
                name=name,
            )

        self.query_dense = projection("query")
        self.key_dense = projection("key")
        self.value_dense = projection("value")
        self.output_dense = projection("output")
        self.dropout = Dropout(dropout_rate, dtype=self.dtype_policy, name="dropout")

    def build(self, query_shape, value_shape=None, key_shape=None):
        in_shape = (None, None, self.d_model)
        self.query_dense.build(in_shape)
        self.key_dense.build(in_shape)
        self.value_dense.build(in_shape)
        self.output_dense.build(in_shape)
        self.built = True

    def _split_heads(self, x):
        """``[B, L, d_model] -> [B, num_heads, L, depth]``; ``[B, d_model]`` (one position) -> ``[B, num_heads, 1, depth]``.

        One position (a decoding step) has the same memory order in both
        layouts: a reshape alone, no transpose and no shape arithmetic.
        """
        if len(x.shape) == 2 or x.shape[1] == 1:
            return ops.reshape(x, (-1, self.num_heads, 1, self.depth))
        shape = ops.shape(x)
        return ops.transpose(ops.reshape(x, (shape[0], shape[1], self.num_heads, self.depth)), (0, 2, 1, 3))

    def _merge_heads(self, x, rank):
        """``[B, num_heads, L, depth] -> [B, L, d_model]``, or ``[B, d_model]`` for a rank-2 query."""
        if rank == 2:
            return ops.reshape(x, (-1, self.d_model))
        if x.shape[2] == 1:
            return ops.reshape(x, (-1, 1, self.d_model))
        shape = ops.shape(x)
        return ops.reshape(ops.transpose(x, (0, 2, 1, 3)), (shape[0], shape[2], self.d_model))

    def compute_key_value(self, value, key=None):
        """Project keys and values once, e.g. the encoder output for a cross-attention cache.

        Args:
            value: float tensor ``[batch, S, d_model]``.
            key: float tensor ``[batch, S, d_model]``; defaults to ``value``.

        Returns:
            dict ``{"key": [batch, num_heads, S, depth], "value": [batch,
            num_heads, S, depth]}`` of the compute dtype.
        """
        if not self.built:
            self.build(value.shape)
        key = value if key is None else key
        return {
            "key": self._split_heads(self.key_dense(key)),
            "value": self._split_heads(self.value_dense(value)),
        }

    def _merge_masks(self, attention_mask, use_causal_mask, t, s):
        mask = None
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
            rank = len(attention_mask.shape)
            if rank == 2:  # [B, S] key padding mask
                mask = attention_mask[:, None, None, :]
            elif rank == 3:  # [B, T, S]
                mask = attention_mask[:, None, :, :]
            else:
                raise ValueError(
                    "MultiHeadAttention: attention_mask must be [batch, S] or [batch, T, S], "
                    f"got shape {tuple(attention_mask.shape)}"
                )
        if use_causal_mask:
            causal = ops.expand_dims(ops.arange(t), 1) >= ops.expand_dims(ops.arange(s), 0)
            causal = causal[None, None, :, :]
            mask = causal if mask is None else ops.logical_and(mask, causal)
        return mask

    def call(
        self,
        query,
        value=None,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        cache=None,
        cache_index=None,
        append_to_cache=False,
        return_attention_scores=False,
        training=None,
        attention_bias=None,
    ):
        q = self._split_heads(self.query_dense(query))
        t = ops.shape(q)[2]
        new_cache = None
        extra_mask = None
        if append_to_cache and cache_index is not None:
            raise ValueError("MultiHeadAttention: pass cache_index (fixed buffer) or append_to_cache, not both")
        if cache is not None and cache_index is None and not append_to_cache:
            # Cross-attention over precomputed keys/values.
            k, v = cache["key"], cache["value"]
            new_cache = cache
        else:
            value = query if value is None else value
            key = value if key is None else key
            k = self._split_heads(self.key_dense(key))
            v = self._split_heads(self.value_dense(value))
            if cache is not None:
                if len(query.shape) == 3 and query.shape[1] is not None and query.shape[1] != 1:
                    raise ValueError(
                        "MultiHeadAttention: a self-attention cache (cache_index or append_to_cache) needs exactly "
                        f"one query position, got query shape {tuple(query.shape)}"
                    )
                if append_to_cache:
                    k = ops.concatenate([ops.cast(cache["key"], k.dtype), k], axis=2)
                    v = ops.concatenate([ops.cast(cache["value"], v.dtype), v], axis=2)
                else:
                    index = ops.cast(cache_index, "int32")
                    k = _write_position(ops.cast(cache["key"], k.dtype), k, index)
                    v = _write_position(ops.cast(cache["value"], v.dtype), v, index)
                    # Attend only to the positions written so far. The buffer length
                    # may be dynamic (a per-batch cache length in graph mode).
                    positions = ops.arange(ops.shape(k)[2], dtype="int32")
                    extra_mask = (positions <= index)[None, None, None, :]
                new_cache = {"key": k, "value": v}
        s = ops.shape(k)[2]
        mask = self._merge_masks(attention_mask, use_causal_mask, t, s)
        if extra_mask is not None:
            mask = extra_mask if mask is None else ops.logical_and(mask, extra_mask)
        weights = attention_weights(q, k, mask, attention_bias)
        dropped = self.dropout(weights, training=training)
        heads = tf.matmul(ops.cast(dropped, v.dtype), v)
        outputs = self.output_dense(self._merge_heads(heads, len(query.shape)))
        result = (outputs,)
        if return_attention_scores:
            result += (weights,)
        if new_cache is not None:
            result += (new_cache,)
        return result[0] if len(result) == 1 else result

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return tuple(query_shape[:-1]) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dropout_rate": self.dropout_rate,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
