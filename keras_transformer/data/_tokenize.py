"""Tokenizing workers of :func:`keras_transformer.data.prepare.prepare_corpus` (numpy and sentencepiece only).

This module imports neither TensorFlow nor the rest of the package (but the
plain-Python :mod:`~keras_transformer.data.placeholders`), so the
worker processes (started with ``spawn``) come up in a fraction of a second
and small. One call of :func:`tokenize_chunk` tokenizes a chunk of pairs with
the shared SentencePiece model (Section 3.4), appends EOS, applies the
``max_length`` policy with exact counts (the rules of
:func:`keras_transformer.data.pipeline.prepare_pairs`) and encodes every kept
pair as one record of the shard format (pairs whose sides share numbers or
addresses are masked first, as ``prepare_pairs`` does):

    int32 little-endian: [S, source ids (S, EOS last), target ids (EOS last)]
"""

from __future__ import annotations

import itertools

import numpy as np
import sentencepiece as spm

from keras_transformer.data.placeholders import has_placeholder, mask_pairs  # plain Python: no TensorFlow

EOS_ID = 3  # keras_transformer.data.tokenizer.EOS_ID (not imported: that module loads TensorFlow)

_processor: spm.SentencePieceProcessor | None = None


def init_worker(model_bytes: bytes) -> None:
    """Loads the serialized SentencePiece model into this process (pool initializer)."""
    global _processor
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(model_bytes)
    _processor = processor


def _ids(sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(flat ids int32, lengths int64) of ``sentences``."""
    ids = _processor.encode(sentences)
    lengths = np.fromiter(map(len, ids), np.int64, len(ids))
    values = np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(lengths.sum()))
    return values, lengths


def _segment_positions(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For segments of ``lengths``: (segment of each position, position within its segment)."""
    total = int(lengths.sum())
    segment = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.cumsum(lengths) - lengths
    return segment, np.arange(total) - np.repeat(starts, lengths)


def tokenize_chunk(sources: list[str], targets: list[str], max_length: int, length_policy: str) -> dict:
    """Tokenizes one chunk of pairs and encodes the kept ones as records.

    Args:
        sources: source sentences.
        targets: aligned target sentences.
        max_length: longest kept sequence in tokens, EOS included (>= 2).
        length_policy: ``"drop"`` or ``"truncate"``.

    Returns:
        dict: ``records`` (``bytes``, the records back to back), ``offsets``
        (``[K + 1]`` ``int64`` byte offsets of the K records), and the exact
        counts ``pairs``, ``kept``, ``dropped``, ``truncated``,
        ``truncated_source``, ``truncated_target``, ``source_tokens``,
        ``target_tokens`` (kept, EOS included), ``longest_source``,
        ``longest_target`` (before the policy, EOS included) and
        ``longest_histogram`` (``[max_length + 1]`` ``int64``: kept pairs by
        ``max(len(source), len(target))``).
    """
    if has_placeholder(_processor):
        sources, targets = mask_pairs(sources, targets)
    src_values, src_lengths = _ids(sources)
    tgt_values, tgt_lengths = _ids(targets)
    limit = max_length - 1  # pieces that fit next to EOS
    src_long, tgt_long = src_lengths > limit, tgt_lengths > limit
    n = len(sources)
    counts = dict(pairs=n, dropped=0, truncated=0, truncated_source=0, truncated_target=0,
                  longest_source=int(src_lengths.max()) + 1 if n else 0,
                  longest_target=int(tgt_lengths.max()) + 1 if n else 0)
    if length_policy == "drop":
        keep = ~(src_long | tgt_long)
        counts["dropped"] = int((~keep).sum())
    else:
        keep = np.ones([n], bool)
        counts["truncated"] = int((src_long | tgt_long).sum())
        counts["truncated_source"] = int(src_long.sum())
        counts["truncated_target"] = int(tgt_long.sum())
    src_starts = np.cumsum(src_lengths) - src_lengths
    tgt_starts = np.cumsum(tgt_lengths) - tgt_lengths
    s_pieces = np.minimum(src_lengths, limit)[keep]  # pieces kept per side (then + EOS)
    t_pieces = np.minimum(tgt_lengths, limit)[keep]
    sizes = 1 + (s_pieces + 1) + (t_pieces + 1)  # int32 words per record
    starts = np.cumsum(sizes) - sizes
    out = np.full([int(sizes.sum())], EOS_ID, np.int32)  # EOS positions stay EOS
    out[starts] = s_pieces + 1
    for pieces, values, value_starts, first in (
        (s_pieces, src_values, src_starts[keep], starts + 1),
        (t_pieces, tgt_values, tgt_starts[keep], starts + 1 + s_pieces + 1),
    ):
        segment, position = _segment_positions(pieces)
        out[first[segment] + position] = values[value_starts[segment] + position]
    longest = np.maximum(s_pieces, t_pieces) + 1
    counts.update(
        kept=int(keep.sum()),
        source_tokens=int((s_pieces + 1).sum()),
        target_tokens=int((t_pieces + 1).sum()),
        longest_histogram=np.bincount(longest, minlength=max_length + 1).astype(np.int64),
        records=out.astype("<i4", copy=False).tobytes(),
        offsets=np.concatenate([[0], np.cumsum(sizes) * 4]).astype(np.int64),
    )
    return counts


def tokenize_chunk_in_worker(args: tuple) -> dict:
    """:func:`tokenize_chunk` on a ``(sources, targets, max_length, length_policy)`` tuple (for pools)."""
    return tokenize_chunk(*args)
