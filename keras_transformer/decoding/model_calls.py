"""What the Translator asks of the model: the searches' contract, and teacher forcing.

A search drives ``symbols_to_logits_fn(step_ids, step, cache) -> (logits,
cache)`` (:mod:`keras_transformer.decoding.search`); for a Transformer that
is one incremental decoder step (``model.decode_step``) over the cache that
``model.init_cache`` builds from the encoder outputs (Section 3.1):
:func:`start` and :func:`symbols_to_logits_fn`. :func:`weights_read_once`
reads the model's variables once per call instead of once per step, and
:func:`bucket_source` pads the source width for XLA's compiles. Forced
decoding (:func:`teacher_forced_log_probs`) runs the decoder over every
target position at once instead.

The model is a ``keras_transformer.Transformer`` or any object with
``encode(source_ids, training)``, ``init_cache(encoder_outputs, source_ids,
max_length)``, ``decode_step(step_ids, step, cache)`` (and, for scoring,
``decode(target_in_ids, encoder_outputs, source_ids, training)``) following
the package contract.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import tensorflow as tf

__all__ = ["symbols_to_logits_fn", "start", "bucket_source", "weights_read_once", "teacher_forced_log_probs"]


def symbols_to_logits_fn(model: Any, output_matrix: "tf.Tensor | None") -> Callable:
    """The search's ``symbols_to_logits_fn``, with the model's output matrix computed once per batch.

    Args:
        model: the model (module docstring).
        output_matrix: float ``[d_model, vocab_size]``, the pre-softmax
            projection passed to every ``decode_step``, or None (the model
            computes its own).

    Returns:
        ``(step_ids int32 [B], step int32 scalar, cache) -> (logits float32
        [B, vocab_size], cache)``.
    """
    def symbols_to_logits(step_ids, step, cache):
        if output_matrix is None:
            logits, cache = model.decode_step(step_ids, step, cache)
        else:
            logits, cache = model.decode_step(step_ids, step, cache, output_matrix=output_matrix)
        return tf.cast(logits, tf.float32), cache

    return symbols_to_logits


def start(
    model: Any,
    source_ids: tf.Tensor,
    max_decode_lengths: "tf.Tensor | None",
    xla: bool,
    max_length: int,
    extra_decode_length: int,
    bos_id: int,
) -> "tuple[tf.Tensor, Any, tf.Tensor]":
    """Encoder outputs -> the decoding cache; limits clipped to ``S + extra_decode_length``.

    Without XLA the self-attention cache grows step by step
    (``init_cache(..., None)``). Under XLA it is a buffer of
    ``min(max_length, S + extra_decode_length)`` positions (``S`` = width
    of ``source_ids``, static under XLA): no sentence of the batch may
    decode more (its limit is its source length +
    ``extra_decode_length``), so a longer buffer would only cost memory
    traffic and attention.

    Args:
        model: the model (module docstring).
        source_ids: int32 ``[B, S]``, pieces + EOS, 0-padded.
        max_decode_lengths: int32 ``[B]`` per-sentence output limits, or None.
        xla: a static cache buffer (True) or a growing cache (False).
        max_length, extra_decode_length: the Translator's settings.
        bos_id: the first input of every sentence.

    Returns:
        ``(initial_ids int32 [B], cache, max_decode_lengths int32 [B])``.
    """
    encoder_outputs = model.encode(source_ids, training=False)
    cache_length = tf.minimum(
        tf.constant(max_length, tf.int32), tf.shape(source_ids)[1] + extra_decode_length
    )
    cache = model.init_cache(encoder_outputs, source_ids, cache_length if xla else None)
    initial_ids = tf.fill([tf.shape(source_ids)[0]], tf.constant(bos_id, tf.int32))
    if max_decode_lengths is None:
        max_decode_lengths = tf.fill(tf.shape(initial_ids), cache_length)
    max_decode_lengths = tf.minimum(tf.cast(max_decode_lengths, tf.int32), cache_length)
    return initial_ids, cache, max_decode_lengths


def bucket_source(source_ids: tf.Tensor, bucket_width: int, max_length: int) -> tf.Tensor:
    """Pads ``source_ids`` on the right to a multiple of ``bucket_width`` (for XLA), at most ``max_length``.

    XLA compiles once per input shape; bucketing the source width bounds
    the compiles per batch size to ``ceil(max_length / width)``. Padding
    is masked (same translations up to float rounding); ``bucket_width <= 1``
    returns ``source_ids`` unchanged.

    Args:
        source_ids: int32 ``[B, S]``.
        bucket_width: Python int.
        max_length: Python int, the widest padded source (never narrower than ``S``).

    Returns:
        int32 ``[B, S']``, ``S' >= S``.
    """
    if bucket_width <= 1:
        return source_ids
    width = tf.shape(source_ids)[1]
    padded = tf.minimum((width + bucket_width - 1) // bucket_width * bucket_width, max_length)
    padded = tf.maximum(padded, width)
    return tf.pad(source_ids, [[0, 0], [0, padded - width]])


def weights_read_once(model: Any) -> contextlib.AbstractContextManager:
    """A scope in which the model's variables are read once, before the decoding loop.

    Inside the loop every Keras layer reads its variables at every step
    (one ``ReadVariableOp`` per weight and step, 69 per step for the
    ``small`` preset); a ``keras.StatelessScope`` maps each variable to
    its value read here, which the loop then captures as a loop
    invariant (plain ``tf.Variable`` objects, such as an ensemble's cached
    output matrices, are read where they are used). Weights are still read at every call, so a model trained
    further is translated with its current weights. A model without
    variables gets a scope that does nothing.
    """
    import keras

    variables = [v for v in getattr(model, "variables", None) or () if isinstance(v, keras.Variable)]
    if not variables:
        return contextlib.nullcontext()
    return keras.StatelessScope(state_mapping=[(v, tf.convert_to_tensor(v)) for v in variables])


def teacher_forced_log_probs(
    model: Any, source_ids: tf.Tensor, target_in_ids: tf.Tensor, target_out_ids: tf.Tensor
) -> tf.Tensor:
    """``log P(y_t | y_<t, X)`` of every target token, float32 [B, T] (0 on padding).

    One encoder pass and one teacher-forced decoder pass (``model.decode``,
    all positions at once, Section 3.1); the log-softmax is taken in
    float32 as the beam search does.

    Args:
        model: the model (module docstring).
        source_ids: int32 ``[B, S]``, pieces + EOS, 0-padded.
        target_in_ids: int32 ``[B, T]``, BOS + pieces, 0-padded.
        target_out_ids: int32 ``[B, T]``, pieces + EOS, 0-padded.
    """
    encoder_outputs = model.encode(source_ids, training=False)
    logits = tf.cast(model.decode(target_in_ids, encoder_outputs, source_ids, training=False), tf.float32)
    chosen = tf.gather(logits, target_out_ids, axis=2, batch_dims=2)
    log_probs = chosen - tf.reduce_logsumexp(logits, axis=-1)
    return tf.where(tf.not_equal(target_out_ids, 0), log_probs, tf.zeros_like(log_probs))
