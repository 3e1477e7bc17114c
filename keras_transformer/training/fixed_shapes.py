"""Padding batches to a bounded set of shapes, so that XLA compiles a bounded number of times.

XLA compiles one executable per input shape (per replica under a
``tf.distribute`` strategy, :mod:`keras_transformer.training.train_step`).
A bucketing pipeline gives batches in many shapes (each side padded to its
own width, partial batches); :func:`fixed_shape_batches` pads each batch to
one shape per width. The data pipeline's ``make_dataset(padding="fixed")``
(:mod:`keras_transformer.data.pipeline`) makes such batches itself; this
transform is for other datasets.
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["fixed_shape_batches"]


def fixed_shape_batches(
    dataset: tf.data.Dataset, batch_tokens: int, widths: list[int], num_replicas: int = 1
) -> tf.data.Dataset:
    """Pads every batch to one shape per width, so XLA compiles at most ``len(widths)`` times.

    A batch whose longer side is ``w`` (a width of ``widths``, e.g. from
    ``padding="bucket"``) becomes ``[B_w, w]`` on both sides with ``B_w =
    batch_tokens // w`` rounded up to a multiple of ``num_replicas`` (equal
    per-replica shapes). Added rows and columns are padding (id 0): the
    loss and its gradients are unchanged (only real target tokens count).

    Args:
        dataset: ``((source_ids [B,S], target_in_ids [B,T]), target_out_ids [B,T])``
            batches with ``max(S, T)`` in ``widths`` and ``B <= batch_tokens // max(S, T)``
            (the pipeline's token batches).
        batch_tokens: the pipeline's token budget.
        widths: the padding widths (increasing).
        num_replicas: replicas in sync.

    Returns:
        The dataset with static-per-width shapes.

    Raises:
        ValueError: if ``batch_tokens`` is smaller than the largest width.
    """
    widths = [int(w) for w in widths]
    if batch_tokens < widths[-1]:
        raise ValueError(f"batch_tokens={batch_tokens} is smaller than the largest width {widths[-1]}")
    widths_t = tf.constant(widths, tf.int32)

    def pad(inputs, target_out):
        source, target_in = inputs
        longest = tf.maximum(tf.shape(source)[1], tf.shape(target_in)[1])
        index = tf.minimum(tf.searchsorted(widths_t, tf.reshape(longest, [1]), side="left")[0], len(widths) - 1)
        width = tf.maximum(widths_t[index], longest)
        rows = batch_tokens // width
        rows = tf.maximum((rows + num_replicas - 1) // num_replicas * num_replicas, tf.shape(source)[0])

        def to(ids):
            return tf.pad(ids, [[0, rows - tf.shape(ids)[0]], [0, width - tf.shape(ids)[1]]])

        return (to(source), to(target_in)), to(target_out)

    return dataset.map(pad, num_parallel_calls=tf.data.AUTOTUNE)
