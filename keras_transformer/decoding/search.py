"""Greedy and beam search over one incremental-decoding contract.

Both searches drive a single function,

    ``symbols_to_logits_fn(step_ids, step, cache) -> (logits, cache)``

where ``step_ids`` is the int32 ``[batch]`` token consumed at position ``step``
(a scalar int32, 0-based; step 0 consumes BOS), ``logits`` is the float32
``[batch, vocab]`` distribution over the token at position ``step + 1`` and
``cache`` is any nest of tensors whose leading dimension is the batch (for a
Transformer: per-layer self-attention key/value buffers, cross-attention
keys/values and the source padding mask, see ``Transformer.init_cache``).

Everything has static shapes so that the searches compile with XLA
(``tf.function(jit_compile=True)``): the output ids live in a preallocated
``[batch(*beam), max_length]`` buffer written at column ``step`` (no growable
``TensorArray``, which XLA silently turns into an empty result), and the loop is
a ``tf.while_loop`` that stops early once every sentence is finished.

Output conventions (shared by both searches):

* the initial (BOS) id is *not* part of the output;
* every output sequence ends with EOS, which is kept; ids after EOS are 0 (pad);
* ``max_decode_lengths[b]`` is the largest number of output tokens of sentence
  ``b`` *including* EOS. When a hypothesis reaches it, EOS is forced (every
  other token is masked out; in beam search a forced EOS's log-probability is
  floored at -1e6 so the hypothesis stays valid). It is clipped to ``[1, max_length]``; ``None``
  means ``max_length`` for every sentence. The paper uses
  "input length + 50" (Section 6.1), which the Translator computes.

Beam search follows "Attention Is All You Need" (Vaswani et al., 2017),
Section 6.1 (beam size 4, length penalty alpha = 0.6) with the length penalty of
Wu et al. (2016), "Google's Neural Machine Translation System", Eq. 14:

    lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha,     score(Y) = log P(Y | X) / lp(Y)

where ``|Y|`` counts the output tokens including EOS. Its bookkeeping is the one
of tensor2tensor / TF-official ``beam_search``: an *alive* set of ``beam_size``
unfinished hypotheses and a separate *finished* set of the ``beam_size`` best
complete hypotheses, refilled each step from the ``2 * beam_size`` best
candidate extensions (so that at least ``beam_size`` unfinished candidates exist
even if ``beam_size`` of them end with EOS). With ``beam_size == 1`` only the best
extension is taken, which makes beam search with one beam exactly greedy search
(same tokens; the score is the greedy path's ``log P / lp``).
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

__all__ = [
    "greedy_search",
    "beam_search",
    "tile_for_beam",
    "length_penalty_factor",
]

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


def length_penalty_factor(length: Any, alpha: float) -> tf.Tensor:
    """Length penalty lp(Y) of Wu et al. (2016), Eq. 14, used in Section 6.1.

    Args:
        length: number of output tokens ``|Y|`` including EOS; int or float
            tensor of any shape.
        alpha: the length penalty exponent (0.6 in the paper; 0 disables it).

    Returns:
        float32 tensor shaped like ``length``: ``((5 + |Y|) / 6) ** alpha``.
    """
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))


def tile_for_beam(tensor: Any, beam_size: int) -> tf.Tensor:
    """Repeat every batch row ``beam_size`` times: [B, ...] -> [B * beam_size, ...].

    Row ``b`` of the input becomes rows ``b * beam_size + k`` for
    ``k = 0 .. beam_size - 1`` of the output (the layout beam search uses for its
    flattened ``[batch * beam]`` dimension).

    Args:
        tensor: a tensor of rank >= 1 (any dtype) with the batch first.
        beam_size: positive Python int.

    Returns:
        Tensor of the same dtype, shape ``[B * beam_size, ...]``.

    Raises:
        ValueError: if ``beam_size`` is not a positive int or ``tensor`` is a
            scalar.

    Example:

    >>> tile_for_beam(tf.constant([[1, 2], [3, 4]]), 2).numpy().tolist()
    [[1, 2], [1, 2], [3, 4], [3, 4]]
    """
    _check_static_int("beam_size", beam_size, 1)
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise ValueError("tile_for_beam needs a tensor with a batch dimension, got a scalar")
    return tf.repeat(tensor, repeats=beam_size, axis=0)


def greedy_search(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: Any,
    cache: Any,
    max_length: int,
    eos_id: int,
    max_decode_lengths: Any = None,
) -> tf.Tensor:
    """Greedy decoding: at each step take the most probable token.

    Stops a sentence at EOS (or forces EOS at its ``max_decode_lengths``) and the
    loop as soon as every sentence has finished.

    Args:
        symbols_to_logits_fn: ``(step_ids int32 [B], step int32 scalar, cache)
            -> (logits float32 [B, V], cache)``, see the module docstring.
        initial_ids: int32 [B], the first input (BOS).
        cache: nest of tensors with leading dimension B (passed through
            ``symbols_to_logits_fn``; shapes must not change between steps).
        max_length: static Python int, width of the output buffer.
        eos_id: Python int, end-of-sentence id.
        max_decode_lengths: optional int32 [B], per-sentence limit on output
            tokens including EOS (clipped to ``[1, max_length]``).

    Returns:
        ids: int32 [B, max_length], without the initial id, each row ending with
        EOS (kept) followed by zeros.

    Raises:
        ValueError: if ``max_length`` is not a positive int or
            ``max_decode_lengths`` is not rank 1.

    Paper: greedy decoding is the beam-size-1 baseline of Section 6.1.
    """
    _check_static_int("max_length", max_length, 1)
    initial_ids = tf.cast(tf.convert_to_tensor(initial_ids), tf.int32)
    batch_size = tf.shape(initial_ids)[0]
    limits = _decode_lengths(max_decode_lengths, batch_size, max_length)
    max_steps = tf.reduce_max(tf.concat([limits, [0]], axis=0))

    def cond(step, unused_ids, unused_last, finished, unused_cache):
        return tf.logical_and(step < max_steps, tf.logical_not(tf.reduce_all(finished)))

    def body(step, ids, last_ids, finished, cache):
        logits, cache = symbols_to_logits_fn(last_ids, step, cache)
        next_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        # Force EOS at the per-sentence limit (position step is the last allowed).
        next_ids = tf.where(step + 1 >= limits, tf.constant(eos_id, tf.int32), next_ids)
        # Finished rows emit padding.
        next_ids = tf.where(finished, tf.zeros_like(next_ids), next_ids)
        ids = _write_column(ids, step, next_ids)
        finished = tf.logical_or(finished, tf.equal(next_ids, eos_id))
        return step + 1, ids, next_ids, finished, cache

    ids = tf.zeros([batch_size, max_length], tf.int32)
    finished = tf.zeros([batch_size], tf.bool)
    _, ids, _, _, _ = tf.while_loop(
        cond,
        body,
        (tf.constant(0, tf.int32), ids, initial_ids, finished, cache),
        maximum_iterations=max_length,
    )
    return ids


def _gather_flat(nested: Any, beam_indices: tf.Tensor, beam_size: int, skip: Any = None) -> Any:
    """Beam-reorder a nest of flattened [B * beam, ...] tensors.

    Row ``b * beam + k`` of the result is row ``b * beam + beam_indices[b, k]``
    of the input. Leaves whose ``skip`` flag (same nest of Python bools) is
    True are returned as they are: they must be equal across the beams of a
    sentence, where the reorder is the identity.
    """
    batch_size = tf.shape(beam_indices)[0]
    offsets = tf.range(batch_size, dtype=tf.int32)[:, None] * beam_size
    flat_indices = tf.reshape(beam_indices + offsets, [-1])
    if skip is None:
        return tf.nest.map_structure(lambda t: tf.gather(t, flat_indices, axis=0), nested)
    return tf.nest.map_structure(
        lambda t, keep: t if keep else tf.gather(t, flat_indices, axis=0), nested, skip
    )


def beam_search(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: Any,
    cache: Any,
    beam_size: int,
    length_penalty: float,
    max_length: int,
    eos_id: int,
    max_decode_lengths: Any = None,
) -> "tuple[tf.Tensor, tf.Tensor]":
    """Batched beam search with the length penalty of Wu et al. (2016).

    Keeps, per sentence, ``beam_size`` alive (unfinished) hypotheses and the
    ``beam_size`` best finished ones. Each step extends the alive hypotheses by
    every token, keeps the ``2 * beam_size`` best extensions by log-probability,
    moves those ending in EOS to the finished set (scored by
    ``log P / lp(|Y|)``) and the best ``beam_size`` others to the alive set. The
    cache (batch ``B``) is tiled to ``B * beam_size`` rows (row ``b * beam + k``)
    and every leaf is re-gathered by parent beam each step, except leaves that
    ``symbols_to_logits_fn`` returns unchanged (the same tensor object it was
    given, at every step): those keep their tiled value, equal across the beams
    of a sentence, so the reorder would be the identity.

    A sentence is done once its ``beam_size`` finished slots are filled and the
    worst of them scores at least the best score any alive hypothesis could still
    reach (``alive log P / lp(max_decode_length)``, an upper bound because
    log-probabilities only decrease); the loop stops when every sentence is done
    or the longest ``max_decode_lengths`` is reached. ``beam_size=1`` keeps only
    the best extension each step: it returns exactly the tokens of
    :func:`greedy_search`.

    Args:
        symbols_to_logits_fn: ``(step_ids int32 [B*beam], step int32 scalar,
            cache) -> (logits float32 [B*beam, V], cache)``.
        initial_ids: int32 [B], the first input (BOS).
        cache: nest of tensors with leading dimension B (tiled internally).
        beam_size: static Python int >= 1 (4 in Section 6.1).
        length_penalty: alpha >= 0 (0.6 in Section 6.1; 0 = plain log P).
        max_length: static Python int, width of the output buffer.
        eos_id: Python int, end-of-sentence id.
        max_decode_lengths: optional int32 [B], per-sentence limit on output
            tokens including EOS (clipped to ``[1, max_length]``).

    Returns:
        ids: int32 [B, beam_size, max_length], best hypothesis first, without
            the initial id; each ends with EOS followed by zeros.
        scores: float32 [B, beam_size], ``log P(Y|X) / lp(Y)`` in decreasing
            order. A slot for which no complete hypothesis exists (only when
            fewer than ``beam_size`` distinct ones are possible, e.g. a tiny
            vocabulary or ``max_decode_lengths`` of 1) has score ``-inf`` and
            all-zero ids.

    Raises:
        ValueError: if ``beam_size``/``max_length`` are not positive ints,
            ``length_penalty`` is negative, or ``max_decode_lengths`` is not
            rank 1.

    Paper: Section 6.1 ("beam search with a beam size of 4 and length penalty
    alpha = 0.6"); length penalty of Wu et al. (2016), Eq. 14.
    """
    _check_static_int("beam_size", beam_size, 1)
    _check_static_int("max_length", max_length, 1)
    if float(length_penalty) < 0:
        raise ValueError(f"length_penalty must be >= 0, got {length_penalty!r}")
    alpha = float(length_penalty)
    k = beam_size
    # 2k candidates keep k unfinished ones even if k of them end with EOS. With
    # k == 1 only the single best extension is taken, so that beam_size=1 is
    # exactly greedy decoding (a less likely EOS is never kept as "finished").
    num_candidates = 2 * k if k > 1 else 1
    initial_ids = tf.cast(tf.convert_to_tensor(initial_ids), tf.int32)
    batch_size = tf.shape(initial_ids)[0]
    limits = _decode_lengths(max_decode_lengths, batch_size, max_length)
    max_steps = tf.reduce_max(tf.concat([limits, [0]], axis=0))
    # Upper bound of the length penalty each sentence can still reach.
    max_penalty = length_penalty_factor(limits, alpha)  # [B]

    cache = tf.nest.map_structure(lambda t: tile_for_beam(t, k), cache)
    # Leaves that symbols_to_logits_fn has returned unchanged (the very same
    # tensor) at every step so far still hold their tiled value, equal across
    # the beams of a sentence: reordering them by parent beam is the identity,
    # so they are not gathered (for a Transformer: cross-attention keys/values
    # and the source mask, about a third of the cache bytes).
    invariant = [True] * len(tf.nest.flatten(cache))

    alive_seq = tf.zeros([batch_size, k, max_length], tf.int32)
    # Only beam 0 is live at the start, so the k identical initial beams do not
    # produce k copies of the same hypothesis.
    alive_log_probs = tf.tile(
        tf.constant([[0.0] + [-_INF] * (k - 1)], tf.float32), [batch_size, 1]
    )
    alive_last = tf.tile(initial_ids[:, None], [1, k])  # [B, k]
    finished_seq = tf.zeros([batch_size, k, max_length], tf.int32)
    finished_scores = tf.fill([batch_size, k], tf.constant(-_INF, tf.float32))
    finished_flags = tf.zeros([batch_size, k], tf.bool)

    def sentence_done(alive_log_probs, finished_scores, finished_flags):
        neg_inf = tf.constant(-float("inf"), tf.float32)
        worst_finished = tf.reduce_min(
            tf.where(finished_flags, finished_scores, neg_inf), axis=1
        )
        best_alive = alive_log_probs[:, 0]
        best_alive_bound = tf.where(best_alive > -_INF / 2, best_alive / max_penalty, neg_inf)
        return worst_finished >= best_alive_bound

    def cond(step, alive_seq, alive_log_probs, alive_last, finished_seq, finished_scores,
             finished_flags, cache):
        del alive_seq, alive_last, finished_seq, cache
        done = sentence_done(alive_log_probs, finished_scores, finished_flags)
        return tf.logical_and(step < max_steps, tf.logical_not(tf.reduce_all(done)))

    def body(step, alive_seq, alive_log_probs, alive_last, finished_seq, finished_scores,
             finished_flags, cache):
        flat_ids = tf.reshape(alive_last, [-1])
        old_leaves = tf.nest.flatten(cache)
        logits, cache = symbols_to_logits_fn(flat_ids, step, cache)
        for i, (old, new) in enumerate(zip(old_leaves, tf.nest.flatten(cache))):
            invariant[i] = invariant[i] and new is old
        logits = tf.cast(logits, tf.float32)
        vocab_size = tf.shape(logits)[-1]
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        log_probs = tf.reshape(log_probs, [batch_size, k, vocab_size])

        # Force EOS for sentences whose limit is reached at this position.
        force_eos = (step + 1 >= limits)[:, None, None]  # [B, 1, 1]
        not_eos = tf.not_equal(tf.range(vocab_size), eos_id)[None, None, :]
        # A forced EOS the model deems impossible still yields a (very bad) valid
        # hypothesis: its log-probability is floored at -_INF / 10.
        forced = tf.where(not_eos, -_INF, tf.maximum(log_probs, -_INF / 10))
        log_probs = tf.where(force_eos, forced, log_probs)

        candidate_log_probs = alive_log_probs[:, :, None] + log_probs  # [B, k, V]
        flat_candidates = tf.reshape(candidate_log_probs, [batch_size, k * vocab_size])
        topk_log_probs, topk_indices = tf.math.top_k(flat_candidates, k=num_candidates)  # [B, 2k]
        topk_beams = topk_indices // vocab_size
        topk_ids = topk_indices % vocab_size
        topk_seq = tf.gather(alive_seq, topk_beams, axis=1, batch_dims=1)  # [B, 2k, L]
        topk_seq = _write_column(topk_seq, step, topk_ids)
        topk_finished = tf.equal(topk_ids, eos_id)
        # Extensions of masked (invalid) hypotheses never count.
        topk_valid = topk_log_probs > -_INF / 2

        # Alive set: best k unfinished candidates.
        alive_candidate_scores = tf.where(topk_finished, topk_log_probs - _INF, topk_log_probs)
        new_alive_log_probs, alive_pick = tf.math.top_k(alive_candidate_scores, k=k)
        new_alive_seq = tf.gather(topk_seq, alive_pick, axis=1, batch_dims=1)
        new_alive_last = tf.gather(topk_ids, alive_pick, axis=1, batch_dims=1)
        parent_beams = tf.gather(topk_beams, alive_pick, axis=1, batch_dims=1)
        cache = _gather_flat(cache, parent_beams, k, tf.nest.pack_sequence_as(cache, invariant))

        # Finished set: best k among old finished + new finished candidates.
        lengths = tf.cast(step + 1, tf.float32)
        new_scores = topk_log_probs / length_penalty_factor(lengths, alpha)
        new_flags = tf.logical_and(topk_finished, topk_valid)
        new_scores = tf.where(new_flags, new_scores, -_INF)
        # Old finished first: on ties top_k keeps the earlier entries.
        all_seq = tf.concat([finished_seq, topk_seq], axis=1)
        all_scores = tf.concat([finished_scores, new_scores], axis=1)
        all_flags = tf.concat([finished_flags, new_flags], axis=1)
        finished_scores, finished_pick = tf.math.top_k(all_scores, k=k)
        finished_seq = tf.gather(all_seq, finished_pick, axis=1, batch_dims=1)
        finished_flags = tf.gather(all_flags, finished_pick, axis=1, batch_dims=1)

        return (step + 1, new_alive_seq, new_alive_log_probs, new_alive_last, finished_seq,
                finished_scores, finished_flags, cache)

    loop_vars = (tf.constant(0, tf.int32), alive_seq, alive_log_probs, alive_last,
                 finished_seq, finished_scores, finished_flags, cache)
    (_, alive_seq, alive_log_probs, _, finished_seq, finished_scores, finished_flags,
     _) = tf.while_loop(cond, body, loop_vars, maximum_iterations=max_length)

    # Sentences without any finished hypothesis (cannot happen while EOS is forced
    # at the limit, kept for safety) fall back to their alive hypotheses.
    any_finished = tf.reduce_any(finished_flags, axis=1)  # [B]
    alive_scores = alive_log_probs / max_penalty[:, None]
    ids = tf.where(any_finished[:, None, None], finished_seq, alive_seq)
    scores = tf.where(any_finished[:, None], finished_scores, alive_scores)
    flags = tf.where(any_finished[:, None], finished_flags, alive_log_probs > -_INF / 2)
    scores = tf.where(flags, scores, -float("inf"))
    ids = tf.where(flags[:, :, None], ids, tf.zeros_like(ids))
    return ids, scores
