"""Greedy, sampling and beam search over one incremental-decoding contract.

The searches drive a single function,

    ``symbols_to_logits_fn(step_ids, step, cache) -> (logits, cache)``

where ``step_ids`` is the int32 ``[batch]`` token consumed at position ``step``
(a scalar int32, 0-based; step 0 consumes BOS), ``logits`` is the float32
``[batch, vocab]`` distribution over the token at position ``step + 1`` and
``cache`` is any nest of tensors whose leading dimension is the batch (for a
Transformer: per-layer self-attention key/value buffers, cross-attention
keys/values and the source padding mask, see ``Transformer.init_cache``).

Two execution modes share the code:

* **Static shapes** (``drop_finished=False``, the default; required under XLA,
  ``tf.function(jit_compile=True)``): every tensor keeps its shape through the
  ``tf.while_loop``; the output ids live in a preallocated
  ``[batch(*beam), max_length]`` buffer written at column ``step`` (no growable
  ``TensorArray``, which XLA silently turns into an empty result); the loop
  stops early once every sentence is finished.
* **Shrinking batch** (``drop_finished=True``, graph or eager mode only): a
  sentence leaves the batch as soon as it is finished (greedy: EOS; beam: the
  stopping rule below), so the model only computes rows that can still change
  the result, and the cache may change shape between steps (a growing
  key/value cache). The loop carries the original index of each remaining
  sentence and writes each finished result into the output at that index.
  Results are identical to the static mode.

Output conventions (shared by all searches and both modes):

* the initial (BOS) id is *not* part of the output;
* every output sequence ends with EOS, which is kept; ids after EOS are 0 (pad);
* ``max_decode_lengths[b]`` is the largest number of output tokens of sentence
  ``b`` *including* EOS. When a hypothesis reaches it, EOS is forced (every
  other token is masked out; in beam search a forced EOS's log-probability is
  floored at -1e6 so the hypothesis stays valid). It is clipped to ``[1, max_length]``; ``None``
  means ``max_length`` for every sentence. The paper uses
  "input length + 50" (Section 6.1), which the Translator computes.

Sampling search (:func:`sample_search`, for back-translation) is greedy
search with a random draw in place of the argmax: temperature, top-k and
top-p (nucleus) restrictions, Gumbel-max over stateless Philox random
numbers seeded by ``(seed, step, batch row)``, so a seed reproduces its
output in eager mode, graph mode and XLA.

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
best logits (:func:`top_k_rows`, exact, two passes over the logits) shifted by
the row's log-normalizer; the final choice is made among ``beam * 2 * beam``
candidates per sentence.
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

__all__ = [
    "greedy_search",
    "sample_search",
    "check_sampling",
    "TOP_P_CANDIDATES",
    "beam_search",
    "tile_for_beam",
    "length_penalty_factor",
    "top_k_rows",
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
    drop_finished: bool = False,
) -> tf.Tensor:
    """Greedy decoding: at each step take the most probable token.

    Stops a sentence at EOS (or forces EOS at its ``max_decode_lengths``) and the
    loop as soon as every sentence has finished.

    Args:
        symbols_to_logits_fn: ``(step_ids int32 [B], step int32 scalar, cache)
            -> (logits float32 [B, V], cache)``, see the module docstring.
        initial_ids: int32 [B], the first input (BOS).
        cache: nest of tensors with leading dimension B (passed through
            ``symbols_to_logits_fn``; shapes must not change between steps
            unless ``drop_finished``).
        max_length: static Python int, width of the output buffer.
        eos_id: Python int, end-of-sentence id.
        max_decode_lengths: optional int32 [B], per-sentence limit on output
            tokens including EOS (clipped to ``[1, max_length]``).
        drop_finished: remove finished sentences from the batch (and from the
            cache) instead of carrying them to the end; cache leaves may then
            change shape between steps. Not under XLA.

    Returns:
        ids: int32 [B, max_length], without the initial id, each row ending with
        EOS (kept) followed by zeros.

    Raises:
        ValueError: if ``max_length`` is not a positive int or
            ``max_decode_lengths`` is not rank 1.

    Paper: greedy decoding is the beam-size-1 baseline of Section 6.1.
    """

    def argmax(step, logits, rows):
        del step, rows
        return tf.argmax(logits, axis=-1, output_type=tf.int32)

    return _token_by_token_search(
        symbols_to_logits_fn, initial_ids, cache, max_length, eos_id, max_decode_lengths, drop_finished, argmax
    )


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
       logits remain (found with :func:`top_k_rows`, exact; ties go to the
       lower id). ``top_k=1`` returns exactly :func:`greedy_search`'s tokens;
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
    :func:`greedy_search` (module docstring): ids ``[B, max_length]``
    without BOS, EOS kept and 0 after it, EOS forced at the sentence's
    ``max_decode_lengths``, the loop stops when every sentence is finished.

    Args:
        symbols_to_logits_fn: ``(step_ids int32 [B], step int32 scalar, cache)
            -> (logits float [B, V], cache)``, see the module docstring.
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
    the per-sentence limit after ``choose``; see :func:`greedy_search` for the
    arguments and the result.
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
