"""Sampling search, e.g. for back-translation.

Sampling search (:func:`sample_search`, for back-translation) is greedy
search with a random draw in place of the argmax: temperature, top-k and
top-p (nucleus) restrictions, Gumbel-max over stateless Philox random
numbers seeded by ``(seed, step, batch row)``, so a seed reproduces its
output in eager mode, graph mode and XLA.

The settings are checked by :func:`check_sampling` (also used by the
Translator and the command line before they build a search).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_transformer.decoding.search.common import SymbolsToLogitsFn, _check_static_int
from keras_transformer.decoding.search.logits import top_k_rows
from keras_transformer.decoding.search.token_by_token import _token_by_token_search

__all__ = ["sample_search", "check_sampling", "TOP_P_CANDIDATES"]


#: Candidates of top-p (nucleus) sampling without top-k: the nucleus is taken
#: among each step's ``TOP_P_CANDIDATES`` most probable tokens (more only with
#: a larger ``top_k``), so that the step sorts 64 values, not the vocabulary.
TOP_P_CANDIDATES = 64


def check_sampling(top_k: Any, top_p: Any, temperature: Any) -> "tuple[int, float, float]":
    """Validates sampling settings; returns them as ``(int, float, float)``.

    Args:
        top_k: Python int >= 0; 0 = no top-k restriction, 1 = greedy.
        top_p: number in ``(0, 1]``; 1 = no nucleus restriction.
        temperature: finite number > 0.

    Returns:
        ``(top_k, top_p, temperature)``.

    Raises:
        ValueError: naming the setting and the value it got.
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an int >= 0 (0: no top-k restriction), got {top_k!r}")
    try:
        top_p, temperature = float(top_p), float(temperature)
    except (TypeError, ValueError):
        raise ValueError(f"top_p and temperature must be numbers, got {top_p!r} and {temperature!r}") from None
    if not 0.0 < top_p <= 1.0:  # also rejects nan
        raise ValueError(f"top_p must be in (0, 1] (1: no nucleus restriction), got {top_p!r}")
    if not 0.0 < temperature < float("inf"):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    return top_k, top_p, temperature


def _sampling_seed(seed: Any) -> tf.Tensor:
    """int64 [2] stateless seed from an int, an int scalar tensor (``[seed, 0]``) or an int [2] tensor."""
    if isinstance(seed, bool) or seed is None:
        raise ValueError(f"seed must be an int or an integer tensor of shape [] or [2], got {seed!r}")
    seed = tf.convert_to_tensor(seed)
    if not seed.dtype.is_integer:
        raise ValueError(f"seed must be an integer (tensor), got dtype {seed.dtype.name}")
    seed = tf.cast(seed, tf.int64)
    if seed.shape.rank == 0:
        return tf.stack([seed, tf.constant(0, tf.int64)])
    if seed.shape.rank != 1 or seed.shape[0] != 2:
        raise ValueError(f"seed must be a scalar or have shape [2], got shape {seed.shape}")
    return seed


def _gumbel_noise(seed: tf.Tensor, step: tf.Tensor, rows: "tf.Tensor | None", num_rows: tf.Tensor,
                  width: Any) -> tf.Tensor:
    """Gumbel(0, 1) noise float32 [len(rows), width] for a step of sampling search.

    The step's seed is ``stateless_fold_in(seed, step)``; one Philox draw of
    ``[num_rows, width]`` uint32 values (``num_rows`` = the original batch
    size or more) gives row ``r`` of the batch its ``width`` values, which
    depend on ``(seed, step, r, width)`` only: Philox fills the tensor in
    row-major order, so a row's values do not depend on the number of rows.
    The integers are turned into floats here (23 bits -> ``u`` in
    ``[2^-24, 1 - 2^-24]``, never 0 or 1) because XLA's float conversion of
    ``stateless_uniform`` differs from the CPU kernel's while the integers
    agree; then ``g = -log(-log(u))``.
    """
    step_seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(step, tf.int64), alg="philox")
    bits = tf.random.stateless_uniform(
        tf.stack([num_rows, width]), step_seed, minval=None, maxval=None, dtype=tf.uint32, alg="philox"
    )
    if rows is not None:
        bits = tf.gather(bits, rows)
    uniform = (tf.cast(tf.bitwise.right_shift(bits, 9), tf.float32) + 0.5) * (2.0 ** -23)
    return -tf.math.log(-tf.math.log(uniform))


def sample_search(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: Any,
    cache: Any,
    max_length: int,
    eos_id: int,
    seed: Any,
    max_decode_lengths: Any = None,
    top_k: int = 0,
    top_p: float = 1.0,
    temperature: float = 1.0,
    drop_finished: bool = False,
) -> tf.Tensor:
    """Sampling search (ancestral sampling, optionally top-k / top-p), e.g. for back-translation.

    At each step the next token is drawn from the model's distribution over
    the vocabulary (sampling for back-translation: Edunov et al., 2018,
    "Understanding Back-Translation at Scale", Section 3), reshaped by:

    1. **temperature**: the logits are divided by ``temperature`` (below 1
       sharpens the distribution, above 1 flattens it; towards 0 it becomes
       greedy search);
    2. **top-k** (``top_k > 0``; Fan et al., 2018): only the ``top_k`` largest
       logits remain (found with :func:`~keras_transformer.decoding.search.top_k_rows`, exact; ties go to the
       lower id). ``top_k=1`` returns exactly :func:`~keras_transformer.decoding.search.greedy_search`'s tokens;
    3. **top-p**, the nucleus (``top_p < 1``; Holtzman et al., 2020): only
       the smallest set of most probable tokens whose probability reaches
       ``top_p`` remains (the most probable token always does). The
       probabilities are those after temperature and, with ``top_k``,
       renormalized over the top-k tokens (Hugging Face transformers'
       ``TopKLogitsWarper`` then ``TopPLogitsWarper``); without ``top_k`` they
       are the full softmax. **Bound**: the nucleus is searched among the
       step's ``max(top_k, 64)`` most probable tokens (:data:`TOP_P_CANDIDATES`):
       when those hold less than ``top_p`` of the probability, all of them
       are kept and nothing beyond them, which keeps a step as cheap as a
       top-64 and XLA's shapes static.

    The draw is Gumbel-max (``argmax(logits + g)`` with ``g`` Gumbel(0, 1)
    noise from stateless Philox random numbers, see below), which samples
    exactly the categorical distribution of the remaining tokens.

    Reproducibility: no random state exists; the noise of sentence row ``r``
    at step ``t`` comes from ``stateless_fold_in(seed, t)`` and ``r`` alone.
    So a fixed ``seed`` gives the same ids in eager mode, in a
    ``tf.function``, under XLA and in both modes of ``drop_finished``, and the
    sample of row ``r`` depends only on ``seed``, ``r`` and that row's logits:
    not on the other sentences of the batch, nor on the batch size (a
    sentence moved to another row samples differently). All of this holds up
    to float rounding of the logits and of the noise's logarithms (a token
    changes only where two perturbed logits tie within rounding).

    Output conventions, stopping and the two execution modes are those of
    :func:`~keras_transformer.decoding.search.greedy_search`
    (:mod:`keras_transformer.decoding.search`): ids ``[B, max_length]``
    without BOS, EOS kept and 0 after it, EOS forced at the sentence's
    ``max_decode_lengths``, the loop stops when every sentence is finished.

    Args:
        symbols_to_logits_fn: ``(step_ids int32 [B], step int32 scalar, cache)
            -> (logits float [B, V], cache)``, see
            :mod:`keras_transformer.decoding.search`.
        initial_ids: int32 [B], the first input (BOS).
        cache: nest of tensors with leading dimension B.
        max_length: static Python int, width of the output buffer.
        eos_id: Python int, end-of-sentence id.
        seed: the random seed: a Python int, an integer scalar tensor (used
            as ``[seed, 0]``) or an integer ``[2]`` tensor (a ``tf.random``
            stateless seed).
        max_decode_lengths: optional int32 [B], per-sentence limit on output
            tokens including EOS (clipped to ``[1, max_length]``).
        top_k: static Python int >= 0 (0: no top-k restriction).
        top_p: Python float in ``(0, 1]`` (1: no nucleus restriction).
        temperature: Python float > 0.
        drop_finished: shrink the batch as sentences finish (graph or eager
            mode; not under XLA). Same ids.

    Returns:
        ids: int32 [B, max_length], without the initial id, each row ending
        with EOS (kept) followed by zeros.

    Raises:
        ValueError: for ``max_length`` not a positive int, ``top_k`` not an
            int >= 0, ``top_p`` outside ``(0, 1]``, ``temperature`` not a finite
            number > 0, a ``seed`` that is not an integer of shape ``[]`` or
            ``[2]``, or ``max_decode_lengths`` not rank 1.
    """
    top_k, top_p, temperature = check_sampling(top_k, top_p, temperature)
    _check_static_int("max_length", max_length, 1)
    seed = _sampling_seed(seed)
    batch_size = tf.shape(tf.convert_to_tensor(initial_ids))[0]

    def choose(step, logits, rows):
        vocab_size = logits.shape[-1]
        if top_k:
            width = top_k if vocab_size is None else min(top_k, vocab_size)
        elif top_p < 1.0:
            width = TOP_P_CANDIDATES if vocab_size is None else min(TOP_P_CANDIDATES, vocab_size)
        else:
            width = None  # the whole vocabulary
        if width is None:
            candidates, candidate_ids = logits / temperature, None
            width = tf.shape(logits)[-1] if vocab_size is None else vocab_size
        else:
            # Dividing by temperature > 0 keeps the order: choose on the raw logits.
            candidates, candidate_ids = top_k_rows(logits, width)
            candidates = candidates / temperature
        if isinstance(width, int) and width == 1:  # top_k=1: the best token, no randomness (exactly greedy)
            return candidate_ids[:, 0]
        if top_p < 1.0:
            # Nucleus: keep a candidate while the mass of the better ones is below top_p.
            if top_k:
                log_norm = tf.reduce_logsumexp(candidates, axis=-1, keepdims=True)  # renormalized top-k
            else:
                log_norm = tf.reduce_logsumexp(logits / temperature, axis=-1, keepdims=True)
            mass_before = tf.math.cumsum(tf.exp(candidates - log_norm), axis=-1, exclusive=True)
            keep = mass_before < top_p
        else:
            keep = None
        num_rows = batch_size if rows is None else tf.reduce_max(rows) + 1
        perturbed = candidates + _gumbel_noise(seed, step, rows, num_rows, width)
        if keep is not None:
            perturbed = tf.where(keep, perturbed, -float("inf"))
        choice = tf.argmax(perturbed, axis=-1, output_type=tf.int32)
        if candidate_ids is None:
            return choice
        return tf.gather(candidate_ids, choice, axis=1, batch_dims=1)

    return _token_by_token_search(
        symbols_to_logits_fn, initial_ids, cache, max_length, eos_id, max_decode_lengths, drop_finished, choose
    )
