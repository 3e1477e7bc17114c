"""Operations on a step's logits ``float32 [rows, vocab]`` that several searches apply.

:func:`top_k_rows` is ``tf.math.top_k`` over the vocabulary, exact, in about
two passes: beam search takes each hypothesis's best extensions with it
(:mod:`~keras_transformer.decoding.search.beam`) and sampling search its
top-k and top-p candidates (:mod:`~keras_transformer.decoding.search.sampling`).
:func:`guard_repetition` wraps any search's ``symbols_to_logits_fn`` with a
repetition guard (no repeated n-gram, a penalty on tokens already written).
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.decoding.search.common import _check_static_int

__all__ = ["HISTORY_KEY", "check_repetition_settings", "guard_repetition", "init_repetition_history", "top_k_rows"]


def _block_width(vocab_size: int) -> int:
    """A divisor of ``vocab_size`` near 64 for :func:`top_k_rows`, or 0 if none fits."""
    for width in (64, 50, 40, 80, 48, 72, 32, 100, 96, 125, 128):
        if vocab_size % width == 0:
            return width
    for width in range(33, 129):
        if vocab_size % width == 0:
            return width
    return 0


def top_k_rows(values: tf.Tensor, k: int) -> "tuple[tf.Tensor, tf.Tensor]":
    """``tf.math.top_k(values, k)`` over the last axis, exact, in about two passes.

    TensorFlow's CPU ``TopKV2`` costs about 2 ms on ``[128, 8000]`` float32
    (a decoding step of beam 4 at batch 32 spends longer in it than in a
    decoder layer). Here the row is cut into blocks of ``w`` values (``w``
    divides the row length, near 64): the ``k`` blocks with the largest maxima
    hold the ``k`` largest values (a value outside them is at most the
    ``k``-th largest block maximum), so ``top_k`` runs on ``k * w`` values
    instead of the row. The chosen blocks are kept in index order, so ties
    resolve to the lower index exactly as ``tf.math.top_k`` does. Rows shorter
    than ``4 * k * w`` or without a divisor in ``[32, 128]`` use
    ``tf.math.top_k`` directly.

    Args:
        values: float tensor ``[rows, n]`` with a static ``n``.
        k: static Python int, ``1 <= k <= n``.

    Returns:
        ``(top_values [rows, k], indices int32 [rows, k])``, best first, as
        ``tf.math.top_k(values, k)`` returns them.

    Raises:
        ValueError: if ``values`` is not rank 2 or ``k`` is not in ``[1, n]``.
    """
    if values.shape.rank != 2:
        raise ValueError(f"top_k_rows needs a [rows, n] tensor, got shape {values.shape}")
    n = values.shape[-1]
    if n is not None:
        _check_static_int("k", k, 1)
        if k > n:
            raise ValueError(f"top_k_rows: k ({k}) exceeds the row length ({n})")
    width = _block_width(n) if n is not None else 0
    if not width or n < 4 * k * width:
        return tf.math.top_k(values, k=k)
    rows = tf.shape(values)[0]
    blocks = tf.reshape(values, [rows, n // width, width])
    _, best_blocks = tf.math.top_k(tf.reduce_max(blocks, axis=-1), k=k)  # [rows, k]
    best_blocks = tf.sort(best_blocks, axis=-1)  # index order: ties go to the lower index
    candidates = tf.reshape(tf.gather(blocks, best_blocks, axis=1, batch_dims=1), [rows, k * width])
    top_values, positions = tf.math.top_k(candidates, k=k)
    block_of = tf.gather(best_blocks, positions // width, axis=1, batch_dims=1)
    return top_values, block_of * width + positions % width


#: The cache entry holding what a guarded search has written so far (:func:`guard_repetition`).
HISTORY_KEY = "repetition_history"
_BANNED = -1.0e9


def check_repetition_settings(no_repeat_ngram_size: int, repetition_penalty: float) -> tuple[int, float]:
    """The repetition guard's settings, checked: ``(n-gram size >= 0, penalty >= 1.0)``.

    Raises:
        ValueError: naming the setting out of range.
    """
    if isinstance(no_repeat_ngram_size, bool) or not isinstance(no_repeat_ngram_size, int) \
            or no_repeat_ngram_size < 0 or no_repeat_ngram_size == 1:
        raise ValueError(f"no_repeat_ngram_size must be 0 (off) or an int >= 2, got {no_repeat_ngram_size!r}")
    if not 1.0 <= float(repetition_penalty) < float("inf"):
        raise ValueError(f"repetition_penalty must be a finite number >= 1.0 (1.0: off), got {repetition_penalty!r}")
    return no_repeat_ngram_size, float(repetition_penalty)


def _token_mask(tokens: tf.Tensor, valid: tf.Tensor, vocab_size: tf.Tensor) -> tf.Tensor:
    """bool ``[rows, vocab]``: True where row ``r`` has token ``v`` at a valid position of ``tokens [rows, W]``."""
    rows, width = tf.shape(tokens)[0], tf.shape(tokens)[1]
    row_ids = tf.broadcast_to(tf.range(rows)[:, None], [rows, width])
    indices = tf.stack([tf.reshape(row_ids, [-1]), tf.reshape(tokens, [-1])], axis=1)
    counts = tf.scatter_nd(indices, tf.reshape(tf.cast(valid, tf.int32), [-1]), tf.stack([rows, vocab_size]))
    return counts > 0


def guard_repetition(symbols_to_logits_fn, no_repeat_ngram_size: int = 0, repetition_penalty: float = 1.0):
    """``symbols_to_logits_fn`` with a repetition guard, for every search (greedy, beam, sampling).

    The two remedies of CTranslate2 (``no_repeat_ngram_size``,
    ``repetition_penalty``) and fairseq (``--no-repeat-ngram-size``) for a
    model that loops on input it never saw:

    * ``no_repeat_ngram_size = n`` (>= 2): a token that would complete an
      n-gram already written in this hypothesis gets a score of -1e9, so no
      n-gram occurs twice;
    * ``repetition_penalty = p`` (> 1): the logit of every token already
      written is divided by ``p`` when positive and multiplied by ``p`` when
      negative (Keskar et al., 2019, CTRL), making it less likely.

    What the hypothesis has written is kept in the search's cache
    (``cache[HISTORY_KEY]``, int32 ``[rows, history length]``, position ``t``
    = the token fed at step ``t``, BOS at 0): beam search reorders it with
    the rest of the cache and the graph-mode searches drop finished rows from
    it, so each row's guard sees its own hypothesis. Add it with
    :func:`init_repetition_history`.

    Args:
        symbols_to_logits_fn: ``(step_ids [rows], step, cache) -> (logits float32 [rows, vocab], cache)``.
        no_repeat_ngram_size: 0 (off) or n >= 2.
        repetition_penalty: 1.0 (off) or more.

    Returns:
        The guarded function (the same one when both are off).

    Raises:
        ValueError: for settings out of range (:func:`check_repetition_settings`).
    """
    n, penalty = check_repetition_settings(no_repeat_ngram_size, repetition_penalty)
    if not n and penalty == 1.0:
        return symbols_to_logits_fn

    def guarded(step_ids, step, cache):
        history = cache[HISTORY_KEY]
        length = tf.shape(history)[1]
        step = tf.cast(step, tf.int32)
        history = history + tf.one_hot(step, length, dtype=tf.int32)[None, :] * tf.cast(step_ids, tf.int32)[:, None]
        model_cache = {k: v for k, v in cache.items() if k != HISTORY_KEY}
        logits, model_cache = symbols_to_logits_fn(step_ids, step, model_cache)
        vocab_size = tf.shape(logits)[1]
        positions = tf.range(length)
        written = (positions >= 1) & (positions <= step)  # the generated tokens y_1..y_step (not BOS)
        if penalty != 1.0:
            seen = _token_mask(history, tf.broadcast_to(written[None, :], tf.shape(history)), vocab_size)
            penalized = tf.where(logits > 0, logits / penalty, logits * penalty)
            logits = tf.where(seen, penalized, logits)
        if n:
            logits = tf.where(_completes_a_seen_ngram(history, step, n, vocab_size), _BANNED, logits)
        model_cache[HISTORY_KEY] = history
        return logits, model_cache

    return guarded


def _completes_a_seen_ngram(history: tf.Tensor, step: tf.Tensor, n: int, vocab_size: tf.Tensor) -> tf.Tensor:
    """bool ``[rows, vocab]``: the next tokens that would repeat an n-gram of ``history[:, 1:step + 1]``."""
    generated = history[:, 1:]  # y_1, y_2, ...: y_t at index t - 1; y_step is the last written
    width = tf.shape(generated)[1] - (n - 1)
    match = tf.ones([tf.shape(generated)[0], width], tf.bool)
    for k in range(n - 1):  # the n-gram starting at i has the last n - 1 written tokens as its prefix
        last = tf.gather(generated, tf.maximum(step - (n - 1) + k, 0), axis=1)
        match &= tf.equal(generated[:, k:k + width], last[:, None])
    starts = tf.range(width)
    valid = (starts + n - 1 <= step - 1) & (step >= n - 1)  # the whole n-gram is written, and a prefix exists
    banned_tokens = generated[:, n - 1:n - 1 + width]
    return _token_mask(banned_tokens, match & valid[None, :], vocab_size)


def init_repetition_history(cache: dict, rows: tf.Tensor, length: int) -> dict:
    """``cache`` with an empty history for :func:`guard_repetition` (``length`` positions, BOS included)."""
    return dict(cache, **{HISTORY_KEY: tf.zeros(tf.stack([rows, length]), tf.int32)})
