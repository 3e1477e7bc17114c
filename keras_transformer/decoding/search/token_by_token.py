"""The loop of one hypothesis per sentence, shared by greedy and sampling search.

Each step feeds every unfinished sentence's last token to
``symbols_to_logits_fn``, lets the search choose the next token from the
logits (greedy: the argmax; sampling: a random draw), forces EOS at the
sentence's limit and writes the token to the output; in the two execution
modes of :mod:`keras_transformer.decoding.search` (static shapes, or a batch
that shrinks as sentences finish).
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from keras_transformer.decoding.search.common import (
    SymbolsToLogitsFn, _check_static_int, _decode_lengths, _max_limit, _relaxed_shape, _write_column,
)


def _token_by_token_search(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: Any,
    cache: Any,
    max_length: int,
    eos_id: int,
    max_decode_lengths: Any,
    drop_finished: bool,
    choose: Callable[[tf.Tensor, tf.Tensor, "tf.Tensor | None"], tf.Tensor],
) -> tf.Tensor:
    """The one-hypothesis-per-sentence loop shared by greedy and sampling search.

    ``choose(step, logits float32 [b, V], rows) -> int32 [b]`` picks each
    remaining sentence's next token; ``rows`` is None in the static mode (the
    ``b`` rows are the batch, in order) and int32 ``[b]`` in the shrinking
    mode (the original batch row of each remaining sentence). EOS is forced at
    the per-sentence limit after ``choose``; see
    :func:`~keras_transformer.decoding.search.greedy_search` for the arguments
    and the result.
    """
    _check_static_int("max_length", max_length, 1)
    initial_ids = tf.cast(tf.convert_to_tensor(initial_ids), tf.int32)
    batch_size = tf.shape(initial_ids)[0]
    limits = _decode_lengths(max_decode_lengths, batch_size, max_length)
    ids = tf.zeros([batch_size, max_length], tf.int32)
    eos = tf.constant(eos_id, tf.int32)

    def next_tokens(step, last_ids, limits, cache, rows):
        logits, cache = symbols_to_logits_fn(last_ids, step, cache)
        next_ids = choose(step, tf.cast(logits, tf.float32), rows)
        # Force EOS at the per-sentence limit (position step is the last allowed).
        return tf.where(step + 1 >= limits, eos, next_ids), cache

    if not drop_finished:
        max_steps = _max_limit(limits)

        def cond(step, unused_ids, unused_last, finished, unused_cache):
            return tf.logical_and(step < max_steps, tf.logical_not(tf.reduce_all(finished)))

        def body(step, ids, last_ids, finished, cache):
            next_ids, cache = next_tokens(step, last_ids, limits, cache, None)
            # Finished rows emit padding.
            next_ids = tf.where(finished, tf.zeros_like(next_ids), next_ids)
            ids = _write_column(ids, step, next_ids)
            finished = tf.logical_or(finished, tf.equal(next_ids, eos_id))
            return step + 1, ids, next_ids, finished, cache

        finished = tf.zeros([batch_size], tf.bool)
        _, ids, _, _, _ = tf.while_loop(
            cond,
            body,
            (tf.constant(0, tf.int32), ids, initial_ids, finished, cache),
            maximum_iterations=max_length,
        )
        return ids

    # Shrinking batch: `rows` maps each remaining sentence to its output row.
    def shrink_cond(step, unused_ids, rows, unused_last, limits, unused_cache):
        return tf.logical_and(tf.size(rows) > 0, step < _max_limit(limits))

    def shrink_body(step, ids, rows, last_ids, limits, cache):
        next_ids, cache = next_tokens(step, last_ids, limits, cache, rows)
        ids = tf.tensor_scatter_nd_update(
            ids, tf.stack([rows, tf.fill(tf.shape(rows), step)], axis=1), next_ids
        )
        running = tf.not_equal(next_ids, eos_id)

        def keep_running():
            keep = tf.where(running)[:, 0]
            return (
                tf.gather(rows, keep),
                tf.gather(next_ids, keep),
                tf.gather(limits, keep),
                tf.nest.map_structure(lambda t: tf.gather(t, keep), cache),
            )

        rows, next_ids, limits, cache = tf.cond(
            tf.reduce_all(running), lambda: (rows, next_ids, limits, cache), keep_running
        )
        return step + 1, ids, rows, next_ids, limits, cache

    invariants = (
        tf.TensorShape([]),
        ids.shape,
        tf.TensorShape([None]),
        tf.TensorShape([None]),
        tf.TensorShape([None]),
        tf.nest.map_structure(_relaxed_shape, cache),
    )
    rows = tf.range(batch_size, dtype=tf.int32)
    _, ids, _, _, _, _ = tf.while_loop(
        shrink_cond,
        shrink_body,
        (tf.constant(0, tf.int32), ids, rows, initial_ids, limits, cache),
        shape_invariants=invariants,
        maximum_iterations=max_length,
    )
    return ids
