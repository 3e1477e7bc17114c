"""Token embedding plus positional encoding (Sections 3.4 and 3.5)."""

from __future__ import annotations

import math

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.layers.dropout import Dropout

__all__ = ["sinusoidal_encoding", "PositionalEmbedding"]


def sinusoidal_encoding(positions, d_model: int, dtype="float32"):
    """Sinusoidal positional encodings of arbitrary positions (Section 3.5).

    ``PE(pos, 2i) = sin(pos / 10000^(2i / d_model))`` on even dimensions and
    ``PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model))`` on odd dimensions.
    Computed on the fly (no table), so any length works.

    Args:
        positions: int or float tensor of shape ``[L]`` (or any shape
            ``[...]``): the positions to encode.
        d_model: even int, the encoding width.
        dtype: dtype of the result. The angles are always computed in float32.

    Returns:
        Tensor ``[..., d_model]`` of ``dtype``.

    Raises:
        ValueError: if ``d_model`` is not a positive even integer.
    """
    if not isinstance(d_model, int) or d_model <= 0 or d_model % 2:
        raise ValueError(f"sinusoidal_encoding: d_model must be a positive even integer, got {d_model!r}")
    positions = ops.cast(positions, "float32")
    # 1 / 10000^(2i / d_model) for i in [0, d_model / 2).
    inv_freq = ops.exp(
        ops.arange(0, d_model, 2, dtype="float32") * (-math.log(10000.0) / d_model)
    )
    angles = ops.expand_dims(positions, -1) * inv_freq  # [..., d_model / 2]
    # Interleave: [sin_0, cos_0, sin_1, cos_1, ...] -> even dims sin, odd dims cos.
    encoding = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)
    encoding = ops.reshape(encoding, tuple(ops.shape(angles)[:-1]) + (d_model,))
    return ops.cast(encoding, dtype)


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEmbedding(keras.layers.Layer):
    """Scaled token embedding + positional encoding + dropout.

    ``dropout(E[ids] * sqrt(d_model) + PE(positions))``: the embedding
    weights are multiplied by ``sqrt(d_model)`` (Section 3.4), the sinusoidal
    encoding of Section 3.5 (or, with ``learned_positions=True``, a learned
    position table, Table 3 row E) is added, and dropout is applied to the
    sum (Section 5.4). The padding mask ``ids != 0`` is propagated as the
    Keras mask. The embedding matrix ``embeddings`` [vocab_size, d_model] is
    exposed so it can be tied to the pre-softmax projection (Section 3.4):
    :meth:`logits` computes ``x @ embeddings^T``.

    Args:
        vocab_size: int, number of token ids (0 is padding).
        d_model: int, embedding width (even for sinusoidal positions).
        max_length: int or None, required with ``learned_positions``: the size
            of the learned position table. Ignored by sinusoids (which work
            for any length).
        learned_positions: bool, learned position embeddings instead of
            sinusoids.
        dropout_rate: float in [0, 1), dropout on the sum (P_drop).
        mask_zero: bool, propagate the mask ``ids != 0``.
        embeddings_initializer: initializer of the token embedding; default
            ``RandomNormal(stddev=d_model ** -0.5)`` so that the scaled
            embedding has unit variance and tied logits are O(1).
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: int tensor ``[batch, length]`` of token ids.
        start_index: int or scalar int32 tensor, position of ``inputs[:, 0]``
            (for incremental decoding). Default 0.
        training: bool, dropout is applied only when True.

    Returns:
        Tensor ``[batch, length, d_model]`` of the layer's compute dtype
        (float32, or float16/bfloat16 under mixed precision), with Keras mask
        ``[batch, length]`` bool when ``mask_zero``.

    Raises:
        ValueError: for a bad size or rate, for ``learned_positions`` without
            ``max_length``, or (statically known lengths) when a learned-position
            input is longer than ``max_length``. For dynamic lengths an
            ``InvalidArgumentError`` is raised at run time instead.

    Example:

    >>> layer = PositionalEmbedding(vocab_size=100, d_model=16)
    >>> x = layer(np.array([[5, 7, 0]]))
    >>> x.shape
    TensorShape([1, 3, 16])
    >>> layer.logits(x).shape
    TensorShape([1, 3, 100])
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_length: int | None = None,
        learned_positions: bool = False,
        dropout_rate: float = 0.0,
        mask_zero: bool = True,
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"PositionalEmbedding: {name} must be a positive integer, got {value!r}")
        if not learned_positions and d_model % 2:
            raise ValueError(f"PositionalEmbedding: sinusoidal positions need an even d_model, got {d_model}")
        if learned_positions and (not isinstance(max_length, int) or max_length <= 0):
            raise ValueError(
                f"PositionalEmbedding: learned_positions=True needs a positive integer max_length, got {max_length!r}"
            )
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(f"PositionalEmbedding: dropout_rate must be in [0, 1), got {dropout_rate!r}")
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.max_length = max_length
        self.learned_positions = learned_positions
        self.dropout_rate = dropout_rate
        self.mask_zero = mask_zero
        if embeddings_initializer is None:
            embeddings_initializer = keras.initializers.RandomNormal(stddev=d_model**-0.5)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.dropout = Dropout(dropout_rate, dtype=self.dtype_policy, name="dropout")
        self.supports_masking = mask_zero

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=self.embeddings_initializer,
        )
        if self.learned_positions:
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(self.max_length, self.d_model),
                initializer=keras.initializers.RandomNormal(stddev=self.d_model**-0.5),
            )
        self.built = True

    def call(self, inputs, start_index=0, training=None):
        inputs = ops.convert_to_tensor(inputs)
        if "int" not in str(inputs.dtype):
            inputs = ops.cast(inputs, "int32")
        embeddings = ops.cast(self.embeddings, self.compute_dtype)
        x = ops.take(embeddings, inputs, axis=0)
        x = x * ops.cast(math.sqrt(self.d_model), self.compute_dtype)
        length = ops.shape(inputs)[-1]
        positions = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")
        if self.learned_positions:
            static_length = inputs.shape[-1]
            if static_length is not None and isinstance(start_index, int):
                if start_index + static_length > self.max_length:
                    raise ValueError(
                        f"PositionalEmbedding: input of length {static_length} (start_index={start_index}) "
                        f"exceeds max_length={self.max_length} of the learned position table"
                    )
            else:  # dynamic length: checked at run time (not under XLA)
                check = tf.debugging.assert_less(
                    positions,
                    self.max_length,
                    message=f"PositionalEmbedding: position exceeds max_length={self.max_length} "
                    "of the learned position table",
                )
                with tf.control_dependencies([check] if check is not None else []):
                    positions = tf.identity(positions)
            pe = ops.take(ops.cast(self.position_embeddings, self.compute_dtype), positions, axis=0)
        else:
            pe = sinusoidal_encoding(positions, self.d_model, dtype=self.compute_dtype)
        x = x + pe
        return self.dropout(x, training=training)

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)

    def logits(self, x):
        """Pre-softmax projection with the (tied) embedding matrix (Section 3.4).

        Args:
            x: float tensor ``[..., d_model]``.

        Returns:
            ``x @ embeddings^T``: tensor ``[..., vocab_size]`` of ``x``'s dtype
            (cast it to float32 for the softmax). No bias (the paper has none).
        """
        # One 2-D MatMul with transpose_b: no [d_model, vocab] copy of the
        # embedding matrix per call (a decoding step calls this every token).
        shape = ops.shape(x)
        flat = ops.reshape(x, (-1, self.d_model))
        logits = tf.matmul(flat, ops.cast(self.embeddings, x.dtype), transpose_b=True)
        return ops.reshape(logits, tuple(shape[:-1]) + (self.vocab_size,))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "d_model": self.d_model,
                "max_length": self.max_length,
                "learned_positions": self.learned_positions,
                "dropout_rate": self.dropout_rate,
                "mask_zero": self.mask_zero,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config
