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

The searches, one module each, on shared parts:

* :mod:`~keras_transformer.decoding.search.greedy`: :func:`greedy_search`,
  the most probable token at each step;
* :mod:`~keras_transformer.decoding.search.sampling`: :func:`sample_search`
  (for back-translation), a random draw in place of the argmax, and
  :func:`check_sampling`, :data:`TOP_P_CANDIDATES`;
* :mod:`~keras_transformer.decoding.search.beam`: :func:`beam_search`
  (Section 6.1) and :func:`tile_for_beam`, its ``[batch * beam]`` layout;
* :mod:`~keras_transformer.decoding.search.token_by_token`: the loop of one
  hypothesis per sentence that greedy and sampling search share;
* :mod:`~keras_transformer.decoding.search.logits`: operations on a step's
  logits that several searches apply (:func:`top_k_rows`);
* :mod:`~keras_transformer.decoding.search.length_penalty`:
  :func:`length_penalty_factor` (Wu et al. 2016, Eq. 14), beam search's
  ranking and the Translator's forced-decoding scores;
* :mod:`~keras_transformer.decoding.search.common`: the bookkeeping of every
  search loop (per-sentence limits, the static output buffer, the shape
  invariants of the shrinking batch, the masking constant).
"""

from keras_transformer.decoding.search.beam import beam_search, tile_for_beam
from keras_transformer.decoding.search.greedy import greedy_search
from keras_transformer.decoding.search.length_penalty import length_penalty_factor
from keras_transformer.decoding.search.logits import top_k_rows
from keras_transformer.decoding.search.sampling import TOP_P_CANDIDATES, check_sampling, sample_search

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
