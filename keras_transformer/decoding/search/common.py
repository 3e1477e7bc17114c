"""The bookkeeping every search loop shares.

Static-size argument checks, the per-sentence output limits
(``max_decode_lengths`` clipped to ``[1, max_length]``), the write of one
column of the preallocated ``[rows, max_length]`` id buffer (the static-shape
mode, XLA friendly), the loop shape invariants of a cache whose batch shrinks
(the ``drop_finished`` mode), the finite "infinity" that masks
log-probabilities, and the type of the one contract
``symbols_to_logits_fn(step_ids, step, cache) -> (logits, cache)``. The
conventions are those of :mod:`keras_transformer.decoding.search`.
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

#: Large finite "infinity" used to mask log-probabilities: finite so that sums and
#: divisions of masked values never produce NaN (inf - inf), and representable in
#: float32.
_INF = 1.0e7

SymbolsToLogitsFn = Callable[[tf.Tensor, tf.Tensor, Any], "tuple[tf.Tensor, Any]"]


def _check_static_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a Python int (a static size), got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _decode_lengths(
    max_decode_lengths: Any, batch_size: tf.Tensor, max_length: int
) -> tf.Tensor:
    """Per-sentence output limits, int32 [batch], clipped to [1, max_length]."""
    if max_decode_lengths is None:
        return tf.fill([batch_size], tf.constant(max_length, tf.int32))
    lengths = tf.cast(tf.convert_to_tensor(max_decode_lengths), tf.int32)
    if lengths.shape.rank is not None and lengths.shape.rank != 1:
        raise ValueError(
            f"max_decode_lengths must have shape [batch], got shape {lengths.shape}"
        )
    return tf.clip_by_value(lengths, 1, max_length)


def _write_column(buffer: tf.Tensor, column: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """``buffer[..., column] = values`` with static shapes (XLA friendly).

    Args:
        buffer: int32 [..., max_length].
        column: scalar int32.
        values: int32 [...], the leading dimensions of ``buffer``.

    Returns:
        int32 tensor shaped like ``buffer``.
    """
    max_length = buffer.shape[-1]
    mask = tf.equal(tf.range(max_length, dtype=tf.int32), column)
    return tf.where(mask, tf.expand_dims(values, -1), buffer)


def _relaxed_shape(tensor: tf.Tensor) -> tf.TensorShape:
    """Loop shape invariant of a cache leaf ``[batch, ..., depth]``: any size but a static last dimension.

    The batch shrinks and a growing cache's length changes; the last (feature)
    dimension of a leaf of rank >= 2 stays static for the layers that read it.
    """
    rank = tensor.shape.rank
    if rank is None or rank == 0:
        return tensor.shape
    if rank == 1:
        return tf.TensorShape([None])
    return tf.TensorShape([None] * (rank - 1) + [tensor.shape[-1]])


def _max_limit(limits: tf.Tensor) -> tf.Tensor:
    """Largest limit, 0 for an empty batch."""
    return tf.reduce_max(tf.concat([limits, [0]], axis=0))
