"""Greedy search: at each step the most probable token (the beam-size-1 baseline of Section 6.1)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_transformer.decoding.search.common import SymbolsToLogitsFn
from keras_transformer.decoding.search.token_by_token import _token_by_token_search

__all__ = ["greedy_search"]


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
            -> (logits float32 [B, V], cache)``, see
            :mod:`keras_transformer.decoding.search`.
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
