"""Beam search (Section 6.1) with the length penalty of Wu et al. (2016).

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

Per step, the ``2 * beam_size`` best extensions are found without materializing
the ``[batch, beam, vocab]`` candidate scores: log-probabilities are monotone
within a row of logits, so the best extensions of a hypothesis are its row's
best logits (:func:`~keras_transformer.decoding.search.top_k_rows`, exact, two passes over the logits) shifted by
the row's log-normalizer; the final choice is made among ``beam * 2 * beam``
candidates per sentence.

The cache of ``B`` sentences is tiled to ``B * beam_size`` rows
(:func:`tile_for_beam`) and reordered by parent beam each step.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_transformer.decoding.search.common import (
    _INF, SymbolsToLogitsFn, _check_static_int, _decode_lengths, _max_limit, _relaxed_shape, _write_column,
)
from keras_transformer.decoding.search.length_penalty import length_penalty_factor
from keras_transformer.decoding.search.logits import top_k_rows

__all__ = ["beam_search", "tile_for_beam"]


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


def _keep_sentences(nested: Any, keep: tf.Tensor, beam_size: int, dropped: tf.Tensor) -> Any:
    """Rows ``keep[b] * beam + k`` of a nest of [B * beam, ...] tensors, when ``dropped``.

    Args:
        nested: nest of tensors with ``B * beam`` rows.
        keep: int32 [B'], the sentences that stay, in order.
        beam_size: Python int.
        dropped: scalar bool; False returns ``nested`` without copying it.
    """
    rows = tf.reshape(keep[:, None] * beam_size + tf.range(beam_size, dtype=tf.int32)[None, :], [-1])
    leaves = tf.nest.flatten(nested)
    if not leaves:
        return nested
    kept = tf.cond(dropped, lambda: [tf.gather(t, rows) for t in leaves], lambda: list(leaves))
    return tf.nest.pack_sequence_as(nested, kept)


def beam_search(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: Any,
    cache: Any,
    beam_size: int,
    length_penalty: float,
    max_length: int,
    eos_id: int,
    max_decode_lengths: Any = None,
    drop_finished: bool = False,
    early_stopping: bool = False,
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

    When is a sentence done? By default (``early_stopping=False``, the rule
    of tensor2tensor, which the paper used) once its ``beam_size`` finished
    slots are filled and the worst of them scores at least the best score any
    alive hypothesis could still reach (``alive log P / lp(max_decode_length)``,
    an upper bound because log-probabilities only decrease): the result is the
    best the beam can find, but a sentence often searches 1.6 times as many
    steps as its translation is long. With ``early_stopping=True`` (the rule of
    fairseq, OpenNMT and CTranslate2) a finished candidate is registered only
    when it ranks among the ``beam_size`` best extensions of its step, and the
    sentence is done once ``beam_size`` of them are registered; the best of
    them (by ``log P / lp``) is returned. The loop stops when every sentence is
    done or the longest ``max_decode_lengths`` is reached. With ``drop_finished`` a
    done sentence leaves the batch at once (its rows leave the cache), so later
    steps only compute the sentences still searching. ``beam_size=1`` keeps
    only the best extension each step: it returns exactly the tokens of
    :func:`~keras_transformer.decoding.search.greedy_search`.

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
        drop_finished: remove done sentences from the batch and the cache
            (shapes change between steps; not under XLA). Same results.
        early_stopping: the stopping rule above: False = tensor2tensor's
            bound, True = ``beam_size`` finished candidates (fairseq,
            CTranslate2).

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

    cache = tf.nest.map_structure(lambda t: tile_for_beam(t, k), cache)
    # Leaves that symbols_to_logits_fn has returned unchanged (the very same
    # tensor) at every step so far still hold their tiled value, equal across
    # the beams of a sentence: reordering them by parent beam is the identity,
    # so they are not gathered (for a Transformer: cross-attention keys/values
    # and the source mask, about a third of the cache bytes).
    invariant = [True] * len(tf.nest.flatten(cache))

    state = {
        "alive_seq": tf.zeros([batch_size, k, max_length], tf.int32),
        # Only beam 0 is live at the start, so the k identical initial beams do
        # not produce k copies of the same hypothesis.
        "alive_log_probs": tf.tile(tf.constant([[0.0] + [-_INF] * (k - 1)], tf.float32), [batch_size, 1]),
        "alive_last": tf.tile(initial_ids[:, None], [1, k]),  # [B, k]
        "finished_seq": tf.zeros([batch_size, k, max_length], tf.int32),
        "finished_scores": tf.fill([batch_size, k], tf.constant(-_INF, tf.float32)),
        "finished_flags": tf.zeros([batch_size, k], tf.bool),
        "limits": limits,
        "num_finished": tf.zeros([batch_size], tf.int32),  # registered finished candidates (early_stopping)
        # Upper bound of the length penalty each sentence can still reach.
        "max_penalty": length_penalty_factor(limits, alpha),
    }

    def sentence_done(state):
        if early_stopping:  # k registered, or nothing left alive (past the limit)
            return tf.logical_or(state["num_finished"] >= k, state["alive_log_probs"][:, 0] <= -_INF / 2)
        neg_inf = tf.constant(-float("inf"), tf.float32)
        worst_finished = tf.reduce_min(
            tf.where(state["finished_flags"], state["finished_scores"], neg_inf), axis=1
        )
        best_alive = state["alive_log_probs"][:, 0]
        best_alive_bound = tf.where(best_alive > -_INF / 2, best_alive / state["max_penalty"], neg_inf)
        return worst_finished >= best_alive_bound

    def candidates(step, state, cache):
        """One step: the best ``num_candidates`` extensions of each sentence's alive set."""
        flat_ids = tf.reshape(state["alive_last"], [-1])
        old_leaves = tf.nest.flatten(cache)
        logits, cache = symbols_to_logits_fn(flat_ids, step, cache)
        for i, (old, new) in enumerate(zip(old_leaves, tf.nest.flatten(cache))):
            invariant[i] = invariant[i] and new is old
        logits = tf.cast(logits, tf.float32)
        sentences = tf.shape(state["limits"])[0]
        vocab_size = logits.shape[-1]
        # A row contributes at most its vocabulary (a tiny vocabulary in tests);
        # an unknown (dynamic) vocabulary size must hold 2 * beam_size tokens.
        per_row = num_candidates if vocab_size is None else min(num_candidates, vocab_size)
        # log P(token | hypothesis) = logit - logsumexp(row); the row's best
        # tokens are its best logits (exact, see the module docstring).
        row_logits, row_ids = top_k_rows(logits, per_row)  # [B*k, n]
        # logsumexp(row) = top logit - log softmax(top logit): one fused
        # softmax pass (oneDNN on CPU), 2.5x faster than reduce_logsumexp's
        # max / subtract / exp / sum passes on [128, 8000]; the top token's
        # probability is at least 1 / vocab, so its log is well conditioned.
        top_probability = tf.gather(tf.nn.softmax(logits, axis=-1), row_ids[:, :1], axis=1, batch_dims=1)[:, 0]
        log_norm = row_logits[:, 0] - tf.math.log(top_probability)  # [B*k]
        row_log_probs = row_logits - log_norm[:, None]
        # Forced EOS (the sentence's limit): the row's only candidate is EOS,
        # floored at -_INF / 10 so that an EOS the model deems impossible still
        # ends a valid hypothesis; the other candidates are invalid.
        force_eos = tf.repeat(step + 1 >= state["limits"], k)[:, None]  # [B*k, 1]
        eos_log_prob = tf.maximum(logits[:, eos_id] - log_norm, -_INF / 10)
        rows = tf.shape(logits)[0]
        forced_ids = tf.concat([tf.fill([rows, 1], eos_id), row_ids[:, 1:]], axis=1)
        forced_log_probs = tf.concat([eos_log_prob[:, None], tf.fill([rows, per_row - 1], -_INF)], axis=1)
        row_ids = tf.where(force_eos, forced_ids, row_ids)
        row_log_probs = tf.where(force_eos, forced_log_probs, row_log_probs)
        width = tf.shape(row_ids)[-1]
        candidate_log_probs = state["alive_log_probs"][:, :, None] + tf.reshape(row_log_probs, [sentences, k, width])
        flat_candidates = tf.reshape(candidate_log_probs, [sentences, k * width])
        topk_log_probs, topk_indices = tf.math.top_k(flat_candidates, k=num_candidates)  # [B, 2k]
        topk_beams = topk_indices // width
        topk_ids = tf.gather(tf.reshape(row_ids, [sentences, k * width]), topk_indices, axis=1, batch_dims=1)
        return topk_log_probs, topk_beams, topk_ids, cache

    def update(step, state, topk_log_probs, topk_beams, topk_ids):
        """New alive and finished sets from the candidates; returns (state, parent beams)."""
        topk_seq = tf.gather(state["alive_seq"], topk_beams, axis=1, batch_dims=1)  # [B, 2k, L]
        topk_seq = _write_column(topk_seq, step, topk_ids)
        topk_finished = tf.equal(topk_ids, eos_id)
        # Extensions of masked (invalid) hypotheses never count.
        topk_valid = topk_log_probs > -_INF / 2

        # Alive set: best k unfinished candidates.
        alive_candidate_scores = tf.where(topk_finished, topk_log_probs - _INF, topk_log_probs)
        new_alive_log_probs, alive_pick = tf.math.top_k(alive_candidate_scores, k=k)
        new_state = dict(state)
        new_state["alive_seq"] = tf.gather(topk_seq, alive_pick, axis=1, batch_dims=1)
        new_state["alive_log_probs"] = new_alive_log_probs
        new_state["alive_last"] = tf.gather(topk_ids, alive_pick, axis=1, batch_dims=1)
        parent_beams = tf.gather(topk_beams, alive_pick, axis=1, batch_dims=1)

        # Finished set: best k among old finished + new finished candidates.
        lengths = tf.cast(step + 1, tf.float32)
        new_scores = topk_log_probs / length_penalty_factor(lengths, alpha)
        new_flags = tf.logical_and(topk_finished, topk_valid)
        if early_stopping:
            # Only finished candidates among the step's beam_size best count
            # (fairseq, CTranslate2).
            new_flags = tf.logical_and(new_flags, tf.range(num_candidates) < k)
            new_state["num_finished"] = state["num_finished"] + tf.reduce_sum(tf.cast(new_flags, tf.int32), axis=1)
        new_scores = tf.where(new_flags, new_scores, -_INF)
        # Old finished first: on ties top_k keeps the earlier entries.
        all_seq = tf.concat([state["finished_seq"], topk_seq], axis=1)
        all_scores = tf.concat([state["finished_scores"], new_scores], axis=1)
        all_flags = tf.concat([state["finished_flags"], new_flags], axis=1)
        new_state["finished_scores"], finished_pick = tf.math.top_k(all_scores, k=k)
        new_state["finished_seq"] = tf.gather(all_seq, finished_pick, axis=1, batch_dims=1)
        new_state["finished_flags"] = tf.gather(all_flags, finished_pick, axis=1, batch_dims=1)
        return new_state, parent_beams

    def results(state):
        """(ids [B, k, L], scores [B, k], valid flags [B, k]) of a sentence's search."""
        # Sentences without any finished hypothesis (cannot happen while EOS is
        # forced at the limit, kept for safety) fall back to their alive hypotheses.
        any_finished = tf.reduce_any(state["finished_flags"], axis=1)  # [B]
        alive_scores = state["alive_log_probs"] / state["max_penalty"][:, None]
        ids = tf.where(any_finished[:, None, None], state["finished_seq"], state["alive_seq"])
        scores = tf.where(any_finished[:, None], state["finished_scores"], alive_scores)
        flags = tf.where(any_finished[:, None], state["finished_flags"], state["alive_log_probs"] > -_INF / 2)
        return ids, scores, flags

    def finalize(ids, scores, flags):
        scores = tf.where(flags, scores, -float("inf"))
        ids = tf.where(flags[:, :, None], ids, tf.zeros_like(ids))
        return ids, scores

    if not drop_finished:
        def cond(step, state, cache):
            del cache
            return tf.logical_and(step < _max_limit(limits), tf.logical_not(tf.reduce_all(sentence_done(state))))

        def body(step, state, cache):
            topk_log_probs, topk_beams, topk_ids, cache = candidates(step, state, cache)
            state, parent_beams = update(step, state, topk_log_probs, topk_beams, topk_ids)
            cache = _gather_flat(cache, parent_beams, k, tf.nest.pack_sequence_as(cache, invariant))
            return step + 1, state, cache

        _, state, _ = tf.while_loop(
            cond, body, (tf.constant(0, tf.int32), state, cache), maximum_iterations=max_length
        )
        return finalize(*results(state))

    # Shrinking batch: done sentences write their results at their original
    # row and leave the batch (and the cache).
    out_ids = tf.zeros([batch_size, k, max_length], tf.int32)
    out_scores = tf.zeros([batch_size, k], tf.float32)
    out_flags = tf.zeros([batch_size, k], tf.bool)

    def shrink_cond(step, rows, state, cache, outputs):
        del state, cache, outputs
        return tf.size(rows) > 0

    def shrink_body(step, rows, state, cache, outputs):
        topk_log_probs, topk_beams, topk_ids, cache = candidates(step, state, cache)
        state, parent_beams = update(step, state, topk_log_probs, topk_beams, topk_ids)
        # Done by the stopping rule, or at the longest limit (as the static loop stops).
        done = tf.logical_or(sentence_done(state), step + 1 >= state["limits"])
        done_rows = tf.where(done)[:, 0]
        ids, scores, flags = (tf.gather(t, done_rows) for t in results(state))
        where = tf.gather(rows, done_rows)[:, None]
        outputs = (
            tf.tensor_scatter_nd_update(outputs[0], where, ids),
            tf.tensor_scatter_nd_update(outputs[1], where, scores),
            tf.tensor_scatter_nd_update(outputs[2], where, flags),
        )
        keep = tf.cast(tf.where(tf.logical_not(done))[:, 0], tf.int32)
        state = tf.nest.map_structure(lambda t: tf.gather(t, keep), state)
        # Reorder the changing leaves by parent beam, kept sentences only; the
        # beam-invariant leaves lose the rows of done sentences (no copy while
        # no sentence is done).
        leaves = tf.nest.flatten(cache)
        flat_indices = tf.reshape(tf.gather(parent_beams, keep) + keep[:, None] * k, [-1])
        changing = [tf.gather(t, flat_indices) for t, same in zip(leaves, invariant) if not same]
        unchanged = _keep_sentences([t for t, same in zip(leaves, invariant) if same], keep, k, tf.reduce_any(done))
        changing, unchanged = iter(changing), iter(unchanged)
        cache = tf.nest.pack_sequence_as(cache, [next(unchanged) if same else next(changing) for same in invariant])
        return step + 1, tf.gather(rows, keep), state, cache, outputs

    state_invariants = tf.nest.map_structure(lambda t: tf.TensorShape([None] + t.shape.as_list()[1:]), state)
    invariants = (
        tf.TensorShape([]),
        tf.TensorShape([None]),
        state_invariants,
        tf.nest.map_structure(_relaxed_shape, cache),
        (out_ids.shape, out_scores.shape, out_flags.shape),
    )
    rows = tf.range(batch_size, dtype=tf.int32)
    _, _, _, _, outputs = tf.while_loop(
        shrink_cond,
        shrink_body,
        (tf.constant(0, tf.int32), rows, state, cache, (out_ids, out_scores, out_flags)),
        shape_invariants=invariants,
        maximum_iterations=max_length,
    )
    return finalize(*outputs)
