"""tf.data input pipeline: strings -> ids -> BOS/EOS -> length policy -> token batches.

"Attention Is All You Need" (Vaswani et al., 2017), Section 5.1: "Sentence
pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens
and 25000 target tokens."

Two steps:

1. :func:`prepare_pairs` tokenizes every pair once (batched, with the in-graph
   :class:`~keras_transformer.data.tokenizer.SubwordTokenizer`), appends EOS to
   source and target, applies the ``max_length`` policy (``"drop"`` the pair, or
   ``"truncate"`` it keeping EOS as the last token) and returns the ids with a
   :class:`LengthReport` whose counts are exact. Nothing is dropped or
   truncated silently: the report is logged (warning level when anything was
   dropped or truncated) and returned.
2. :func:`make_dataset` builds the ``tf.data.Dataset`` of
   ``((source_ids [B,S] int32, target_in_ids [B,T] int32), target_out_ids [B,T] int32)``,
   0-padded on the right, where ``target_in = [BOS] + pieces`` and
   ``target_out = pieces + [EOS]`` (teacher forcing, Section 3.1). Batches are
   either token batches (``batch_tokens``: pairs grouped by length into
   buckets, ``B * max(S, T) <= batch_tokens`` with the padding included) or
   fixed ``batch_size`` batches. Each epoch yields every kept pair exactly
   once (no repeat; call ``.repeat()`` yourself).

Padding widths come from a small fixed set (:func:`bucket_widths`, about 10%
apart), so padding stays low; with ``padding="fixed"`` every batch of bucket
``w`` has the shape ``[batch_tokens // w, w]`` on both sides (all-0 padding
rows), so XLA compiles at most once per bucket. Each epoch is planned at once
from a shuffled index permutation (the batches ``group_by_window`` would emit,
each bucket's incomplete last batch moved from the end of the epoch to a
position drawn from the permutation) and each batch is gathered from the
in-memory ids in one op.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_transformer.data.epochs import EpochBatches, stateless_order
from keras_transformer.data.placeholders import has_placeholder, mask_pairs
from keras_transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer
from keras_transformer.settings import DEFAULT_SUBWORD_ALPHA

__all__ = [
    "LengthReport",
    "PreparedPairs",
    "prepare_pairs",
    "bucket_widths",
    "make_pair_dataset",
    "make_dataset",
    "make_epoch_batches",
    "Batching",
    "MemoryEpochBatches",
    "count_real_tokens",
    "dataset_statistics",
]

logger = logging.getLogger(__name__)

LENGTH_POLICIES = ("drop", "truncate")


@dataclasses.dataclass
class LengthReport:
    """Exact counts of :func:`prepare_pairs`.

    Attributes:
        max_length: longest kept sequence in tokens (EOS / BOS included).
        length_policy: ``"drop"`` or ``"truncate"``.
        pairs: pairs given (times ``segmentations``: rows before the policy).
        kept: pairs in the result.
        dropped: pairs removed because a side was longer than ``max_length``.
        truncated: pairs with at least one side truncated.
        truncated_source: pairs whose source was truncated.
        truncated_target: pairs whose target was truncated.
        source_tokens: real source tokens kept (EOS included).
        target_tokens: real target tokens kept (per target_out, EOS included).
        longest_source: longest source before the policy (tokens incl. EOS).
        longest_target: longest target before the policy (tokens incl. EOS).
        segmentations: rows per pair given (1, or 1 + ``subword_samples``
            of :func:`prepare_pairs`); ``pairs`` counts rows.
    """

    max_length: int
    length_policy: str
    pairs: int = 0
    kept: int = 0
    dropped: int = 0
    truncated: int = 0
    truncated_source: int = 0
    truncated_target: int = 0
    source_tokens: int = 0
    target_tokens: int = 0
    longest_source: int = 0
    longest_target: int = 0
    segmentations: int = 1

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict."""
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """One line for logs."""
        rows = ""
        if self.segmentations > 1:
            rows = f" ({self.pairs // self.segmentations} x {self.segmentations} segmentations)"
        return (
            f"{self.pairs} pairs{rows}, {self.kept} kept, {self.dropped} dropped and {self.truncated} truncated "
            f"(source {self.truncated_source}, target {self.truncated_target}) by max_length={self.max_length} "
            f"policy={self.length_policy!r}; longest source {self.longest_source}, target {self.longest_target} "
            f"tokens; {self.source_tokens} source + {self.target_tokens} target tokens"
        )


@dataclasses.dataclass
class PreparedPairs:
    """Token ids of kept pairs, ready for :func:`make_dataset`.

    Attributes:
        source_ids: ``tf.RaggedTensor`` ``[N, None]`` ``int32``, pieces + EOS.
        target_ids: ``tf.RaggedTensor`` ``[N, None]`` ``int32``, pieces + EOS
            (``target_out``; ``target_in`` is derived from it).
        report: the :class:`LengthReport`.
    """

    source_ids: tf.RaggedTensor
    target_ids: tf.RaggedTensor
    report: LengthReport

    def __len__(self) -> int:
        return int(self.source_ids.nrows())


def _tokenize_all(tokenizer: SubwordTokenizer, sentences: Sequence[str], chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """(flat ids int32, row lengths int64) of all sentences, tokenized in chunks."""
    values, lengths = [], []
    for start in range(0, len(sentences), chunk):
        ragged = tokenizer.tokenize(tf.constant(list(sentences[start : start + chunk]), dtype=tf.string))
        values.append(ragged.flat_values.numpy())
        lengths.append(ragged.row_lengths().numpy())
    if not values:
        return np.zeros([0], np.int32), np.zeros([0], np.int64)
    return np.concatenate(values).astype(np.int32), np.concatenate(lengths).astype(np.int64)


def _add_samples(tokenizer, sentences, values, lengths, copies: int, alpha: float, seed: int, side: int):
    """``(values, lengths)`` followed by ``copies`` sampled segmentations of ``sentences`` (flat int32, int64)."""
    all_values, all_lengths = [values], [lengths]
    for copy in range(1, copies + 1):
        # One seed per (seed, copy, side), spread over sentencepiece's 32-bit seeds.
        draw_seed = int(np.random.SeedSequence([int(seed), copy, side]).generate_state(1)[0])
        ids = tokenizer.sample(sentences, alpha, draw_seed)
        all_lengths.append(np.fromiter((len(row) for row in ids), np.int64, len(ids)))
        all_values.append(np.fromiter((i for row in ids for i in row), np.int32, int(all_lengths[-1].sum())))
    return np.concatenate(all_values), np.concatenate(all_lengths)


def _with_eos(values: np.ndarray, lengths: np.ndarray, keep_rows: np.ndarray, limit: int) -> tf.RaggedTensor:
    """Rows ``keep_rows`` cut to ``limit`` pieces, each followed by EOS: ``[K, None]`` int32."""
    ragged = tf.RaggedTensor.from_row_lengths(tf.constant(values, tf.int32), tf.constant(lengths, tf.int64))
    ragged = tf.ragged.boolean_mask(ragged, tf.constant(keep_rows, tf.bool))[:, :limit]
    eos = tf.RaggedTensor.from_tensor(tf.fill([ragged.nrows(), 1], tf.constant(EOS_ID, tf.int32)))
    return tf.concat([ragged, tf.cast(eos, tf.int32)], axis=1)


def prepare_pairs(
    sources: Sequence[str],
    targets: Sequence[str],
    tokenizer: SubwordTokenizer,
    max_length: int,
    length_policy: str = "drop",
    tokenize_batch_size: int = 8192,
    subword_samples: int = 0,
    subword_alpha: float = DEFAULT_SUBWORD_ALPHA,
    seed: int = 0,
) -> PreparedPairs:
    """Tokenizes all pairs once and applies the ``max_length`` policy.

    Source = pieces + [EOS]; target_out = pieces + [EOS] (target_in = [BOS] +
    pieces is built by :func:`make_dataset`). With ``"truncate"`` a side
    longer than ``max_length`` keeps its first ``max_length - 1`` pieces and
    then EOS, so EOS is always the last real token.

    Subword regularization (Kudo, 2018; not in the Transformer paper): with
    ``subword_samples`` = k > 0 the result holds every pair ``1 + k`` times,
    first in the best segmentation (rows ``0 .. N-1``, exactly the result
    with ``k = 0``), then in k segmentations drawn from the unigram model
    (:meth:`SubwordTokenizer.sample`, both sides, copy ``c`` drawn with a
    seed made of ``(seed, c)``). An epoch over the result then covers the
    data ``1 + k`` times, each time in other pieces, which regularizes a model
    trained on little data. The draws are fixed when the pairs are prepared,
    so within one process every epoch's batches stay a function of
    ``(seed, epoch)``; another process (a resumed run) draws other
    segmentations (:meth:`SubwordTokenizer.sample`), so resumption is not
    exact with samples. The length policy applies to each row; the report
    counts rows.

    Args:
        sources: source sentences (``str``).
        targets: target sentences, aligned with ``sources``.
        tokenizer: the shared-vocabulary :class:`SubwordTokenizer` (Section 3.4).
        max_length: longest kept sequence in tokens, EOS/BOS included
            (``TransformerConfig.max_length``).
        length_policy: ``"drop"`` (remove the pair) or ``"truncate"``.
        tokenize_batch_size: sentences per tokenizer call.
        subword_samples: sampled segmentations of each pair added to its
            best one (0: none).
        subword_alpha: the sampling exponent (:meth:`SubwordTokenizer.sample`).
        seed: seed of the sampled segmentations.

    Returns:
        :class:`PreparedPairs` (ragged ``int32`` ids, ``(1 +
        subword_samples) * N`` rows before the policy) with an exact
        :class:`LengthReport`.

    Raises:
        ValueError: for unequal numbers of sources and targets, an unknown
            ``length_policy``, ``max_length < 2``, a negative
            ``subword_samples`` or ``subword_alpha <= 0`` with samples.
    """
    if len(sources) != len(targets):
        raise ValueError(f"prepare_pairs: {len(sources)} sources but {len(targets)} targets")
    if length_policy not in LENGTH_POLICIES:
        raise ValueError(f"length_policy must be one of {LENGTH_POLICIES}, got {length_policy!r}")
    if not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"max_length must be an integer >= 2 (one piece + EOS), got {max_length!r}")
    if isinstance(subword_samples, bool) or not isinstance(subword_samples, int) or subword_samples < 0:
        raise ValueError(f"subword_samples must be an integer >= 0, got {subword_samples!r}")
    if subword_samples and not subword_alpha > 0:
        raise ValueError(f"subword_alpha must be > 0, got {subword_alpha!r}")
    if has_placeholder(tokenizer):  # numbers and addresses both sides share become placeholders
        sources, targets = mask_pairs(sources, targets)
    src_values, src_lengths = _tokenize_all(tokenizer, sources, tokenize_batch_size)
    tgt_values, tgt_lengths = _tokenize_all(tokenizer, targets, tokenize_batch_size)
    if subword_samples:
        src_values, src_lengths = _add_samples(tokenizer, sources, src_values, src_lengths, subword_samples,
                                               subword_alpha, seed, side=0)
        tgt_values, tgt_lengths = _add_samples(tokenizer, targets, tgt_values, tgt_lengths, subword_samples,
                                               subword_alpha, seed, side=1)
    limit = max_length - 1  # pieces that fit next to EOS (or BOS for target_in)
    src_long = src_lengths > limit
    tgt_long = tgt_lengths > limit
    n = len(src_lengths)
    report = LengthReport(max_length=max_length, length_policy=length_policy, pairs=n,
                          segmentations=1 + subword_samples)
    if n:
        report.longest_source = int(src_lengths.max()) + 1
        report.longest_target = int(tgt_lengths.max()) + 1
    if length_policy == "drop":
        keep = ~(src_long | tgt_long)
        report.dropped = int((~keep).sum())
    else:
        keep = np.ones([n], dtype=bool)
        report.truncated = int((src_long | tgt_long).sum())
        report.truncated_source = int(src_long.sum())
        report.truncated_target = int(tgt_long.sum())
    source_ids = _with_eos(src_values, src_lengths, keep, limit)
    target_ids = _with_eos(tgt_values, tgt_lengths, keep, limit)
    report.kept = int(keep.sum())
    report.source_tokens = int(source_ids.row_lengths().numpy().sum())
    report.target_tokens = int(target_ids.row_lengths().numpy().sum())
    level = logging.WARNING if (report.dropped or report.truncated) else logging.INFO
    logger.log(level, "prepare_pairs: %s", report.summary())
    return PreparedPairs(source_ids, target_ids, report)


def bucket_widths(max_length: int, min_width: int = 8, growth: float = 1.1) -> list[int]:
    """The fixed padding widths: ``min_width``, then about ``growth`` times apart, up to ``max_length``.

    Args:
        max_length: the last (largest) width.
        min_width: the first width.
        growth: ratio between consecutive widths (> 1).

    Returns:
        Strictly increasing ``list[int]`` ending with ``max_length``; e.g.
        ``bucket_widths(32) == [8, 9, 10, 11, 13, 15, 17, 19, 21, 24, 27, 30, 32]``.

    Raises:
        ValueError: for ``growth <= 1`` or non-positive sizes.
    """
    if growth <= 1.0 or min_width < 1 or max_length < 1:
        raise ValueError(f"need growth > 1 and positive sizes, got {max_length=}, {min_width=}, {growth=}")
    widths, width = [], min_width
    while width < max_length:
        widths.append(width)
        width = max(width + 1, int(math.ceil(round(width * growth, 6))))
    widths.append(max_length)
    return widths


def make_pair_dataset(prepared: PreparedPairs) -> tf.data.Dataset:
    """Unbatched ``(source_ids [S], target_in_ids [T], target_out_ids [T])`` ``int32``, each pair once, in order.

    ``target_in = [BOS] + target_out[:-1]`` (the decoder input is the target
    shifted right, Section 3.1).

    Args:
        prepared: output of :func:`prepare_pairs`.

    Returns:
        A finite ``tf.data.Dataset`` of ``len(prepared)`` triples.
    """
    dataset = tf.data.Dataset.from_tensor_slices((prepared.source_ids, prepared.target_ids))

    def add_target_in(source: tf.Tensor, target_out: tf.Tensor):
        target_in = tf.concat([tf.constant([BOS_ID], tf.int32), target_out[:-1]], axis=0)
        return source, target_in, target_out

    return dataset.map(add_target_in, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _pad_to_width(ids: tf.Tensor, widths: tf.Tensor) -> tf.Tensor:
    """Right-pads ``[B, L]`` ids with 0 to the smallest width >= L."""
    length = tf.shape(ids)[1]
    index = tf.searchsorted(widths, tf.reshape(length, [1]), side="left")[0]
    width = tf.gather(widths, tf.minimum(index, tf.size(widths) - 1))
    width = tf.maximum(width, length)
    return tf.pad(ids, [[0, 0], [0, width - length]], constant_values=PAD_ID)


def _shift_right(target_out: tf.Tensor) -> tf.Tensor:
    """``[B, T]`` pieces+EOS (0-padded) -> ``[B, T]`` BOS+pieces (0-padded), Section 3.1 "offset by one"."""
    bos = tf.fill([tf.shape(target_out)[0], 1], tf.constant(BOS_ID, target_out.dtype))
    shifted = tf.concat([bos, target_out[:, :-1]], axis=1)
    return tf.where(tf.equal(shifted, EOS_ID), tf.zeros_like(shifted), shifted)


PADDING_MODES = ("bucket", "batch", "fixed")


def _batch_plan(
    permutation: tf.Tensor, bucket_of: tf.Tensor, sizes: tf.Tensor, drop_remainder: bool
) -> tuple[tf.RaggedTensor, tf.Tensor]:
    """The batches of one epoch, computed at once.

    Pairs arrive in ``permutation`` order; pair ``i`` joins bucket
    ``bucket_of[i]``, whose batch is emitted as soon as it holds
    ``sizes[bucket]`` pairs (``tf.data``'s ``group_by_window`` order for full
    batches). The incomplete last batch of each bucket is emitted at a
    position drawn from the epoch's permutation (``permutation[bucket] mod
    N``), not at the end of the epoch: ``group_by_window`` emits them all
    last, in increasing bucket order, so every epoch would end with a run of
    small batches of the longest sentences, just before the epoch-end
    checkpoint, validation and checkpoint averaging. With a single bucket
    (fixed ``batch_size`` batches) the incomplete batch stays last, as
    ``batch()`` emits it. The plan stays a pure function of the permutation
    (exact resumption).

    Args:
        permutation: ``[N]`` ``int64`` pair indices in arrival order.
        bucket_of: ``[num_pairs]`` ``int64`` bucket of each pair.
        sizes: ``[num_buckets]`` ``int64`` pairs per full batch of each bucket.
        drop_remainder: leave out the incomplete batches.

    Returns:
        ``(indices, keys)``: ``tf.RaggedTensor`` ``[num_batches, None]``
        ``int64`` pair indices per batch (in arrival order) and ``[num_batches]``
        ``int64`` bucket of each batch, in emission order.
    """
    n = tf.size(permutation, out_type=tf.int64)
    keys = tf.gather(bucket_of, permutation)
    order = tf.argsort(keys, stable=True)  # arrival positions grouped by bucket, in arrival order
    sorted_keys = tf.gather(keys, order)
    counts = tf.math.bincount(tf.cast(keys, tf.int32), minlength=tf.size(sizes), dtype=tf.int64)
    rank = tf.range(n, dtype=tf.int64) - tf.gather(tf.cumsum(counts, exclusive=True), sorted_keys)
    size = tf.gather(sizes, sorted_keys)
    segment = tf.cumsum(tf.cast(tf.equal(rank % size, 0), tf.int64)) - 1  # one segment per batch
    num_batches = tf.maximum(tf.reduce_max(segment) + 1, 0)  # 0 for an empty epoch
    positions = tf.cast(order, tf.int64)
    last = tf.math.unsorted_segment_max(positions, segment, num_batches)
    batch_keys = tf.math.unsorted_segment_max(sorted_keys, segment, num_batches)
    lengths = tf.math.unsorted_segment_sum(tf.ones_like(segment), segment, num_batches)
    full = tf.equal(lengths, tf.gather(sizes, batch_keys))
    # A full batch leaves when its last pair arrives; an incomplete one at a
    # position that the permutation draws for its bucket (spread over the epoch).
    # With one bucket (fixed ``batch_size`` batches) it stays last, as ``batch()`` puts it.
    span = tf.maximum(n, 1)
    drawn = tf.where(tf.size(sizes) > 1, tf.gather(permutation, batch_keys % span) % span, n)
    emitted = tf.argsort(tf.where(full, last, drawn), stable=True)
    indices = tf.RaggedTensor.from_value_rowids(tf.gather(permutation, order), segment, nrows=num_batches)
    indices, batch_keys, full = (tf.gather(x, emitted) for x in (indices, batch_keys, full))
    if drop_remainder:
        indices, batch_keys = tf.ragged.boolean_mask(indices, full), tf.boolean_mask(batch_keys, full)
    return indices, batch_keys


def _fixed_rows(rows: int, num_replicas: int) -> int:
    """``rows`` rounded down to a multiple of ``num_replicas`` (at least ``num_replicas``)."""
    return max(rows // num_replicas, 1) * num_replicas


@dataclasses.dataclass(frozen=True)
class Batching:
    """How pairs become batches: the checked settings shared by the in-memory and the streaming pipelines.

    Attributes:
        widths: padding widths / bucket upper bounds, strictly increasing.
        sizes: pairs per full batch of each bucket (``len(widths)`` entries for
            token batches, one entry for fixed ``batch_size`` batches).
        batch_tokens: the token budget, or ``None`` for fixed batches.
        padding: ``"bucket"``, ``"batch"`` or ``"fixed"``.
    """

    widths: tuple[int, ...]
    sizes: tuple[int, ...]
    batch_tokens: int | None
    padding: str

    @classmethod
    def make(
        cls,
        longest: int,
        batch_tokens: int | None = None,
        batch_size: int | None = None,
        widths: Sequence[int] | None = None,
        padding: str = "bucket",
        num_replicas: int = 1,
    ) -> "Batching":
        """Checks the settings of :func:`make_dataset` (see there) for sequences of at most ``longest`` tokens.

        Raises:
            ValueError: as :func:`make_dataset`.
        """
        if (batch_tokens is None) == (batch_size is None):
            raise ValueError("give exactly one of batch_tokens (token batches) or batch_size (fixed batches)")
        if padding not in PADDING_MODES:
            raise ValueError(f"padding must be one of {PADDING_MODES}, got {padding!r}")
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be a positive integer, got {num_replicas!r}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size!r}")
        longest = max(int(longest), 1)
        if widths is None:
            widths = bucket_widths(longest, min_width=min(8, longest))
        widths = [int(w) for w in widths]
        if any(b <= a for a, b in zip(widths, widths[1:])) or widths[0] < 1:
            raise ValueError(f"widths must be positive and strictly increasing, got {widths}")
        if widths[-1] < longest:
            raise ValueError(f"the largest width {widths[-1]} is shorter than the longest prepared sequence ({longest})")
        if batch_tokens is not None:
            if batch_tokens < widths[-1]:
                raise ValueError(
                    f"batch_tokens={batch_tokens} is smaller than the largest width {widths[-1]}: "
                    "a batch could not hold one pair"
                )
            sizes = [batch_tokens // w for w in widths]
            if padding == "fixed":
                sizes = [_fixed_rows(size, num_replicas) for size in sizes]
        else:
            sizes = [batch_size]
        return cls(tuple(widths), tuple(sizes), batch_tokens, padding)

    def bucket_of(self, longest: np.ndarray) -> np.ndarray:
        """Bucket of each pair from ``max(len(source), len(target))`` (``int64`` numpy), all 0 for fixed batches."""
        if self.batch_tokens is None:
            return np.zeros(np.shape(longest), np.int64)
        return np.searchsorted(np.asarray(self.widths), longest, side="left").astype(np.int64)

    def batches_per_epoch(self, bucket_counts: np.ndarray, drop_remainder: bool = False) -> int:
        """Batches an epoch emits for ``bucket_counts`` pairs per bucket, whatever their order.

        Every bucket emits ``ceil(count / size)`` batches (``floor`` with
        ``drop_remainder``): the full ones as they fill, the last one at the
        end of the epoch.
        """
        counts = np.asarray(bucket_counts, np.int64)
        sizes = np.asarray(self.sizes, np.int64)
        return int((counts // sizes).sum() if drop_remainder else (-(-counts // sizes)).sum())

    def finish(self, source: tf.Tensor, target_out: tf.Tensor, key: tf.Tensor):
        """0-padded ``[B, S]`` sources and ``[B, T]`` targets (pieces + EOS) of bucket ``key`` -> model inputs.

        Pads each side as :attr:`padding` says and builds ``target_in`` by
        shifting ``target_out`` right (Section 3.1).

        Returns:
            ``((source_ids, target_in_ids), target_out_ids)``, ``int32``.
        """
        widths_t = tf.constant(self.widths, tf.int32)
        if self.padding == "bucket":
            source = _pad_to_width(source, widths_t)
            target_out = _pad_to_width(target_out, widths_t)
        elif self.padding == "fixed":
            if self.batch_tokens is not None:
                width = tf.gather(widths_t, key)
            else:
                longest_in_batch = tf.maximum(tf.shape(source)[1], tf.shape(target_out)[1])
                index = tf.searchsorted(widths_t, tf.reshape(longest_in_batch, [1]), side="left")[0]
                width = tf.gather(widths_t, tf.minimum(index, len(self.widths) - 1))
            rows = tf.gather(tf.constant(self.sizes, tf.int32), key)

            def to_shape(ids):  # all-0 rows and columns (target_in of a padding row is all 0 too)
                shape = tf.shape(ids)
                return tf.pad(ids, [[0, rows - shape[0]], [0, width - shape[1]]], constant_values=PAD_ID)

            target_in = _shift_right(target_out)
            return (to_shape(source), to_shape(target_in)), to_shape(target_out)
        return (source, _shift_right(target_out)), target_out

    def empty_batch(self):
        """An all-padding batch (no real token: it adds nothing to the loss or its gradients).

        Used to give every worker the same number of steps. Its shape is one
        the pipeline emits anyway: ``[sizes[0], widths[0]]`` with
        ``padding="fixed"``, else ``[1, widths[0]]``.

        Returns:
            ``((source_ids, target_in_ids), target_out_ids)``, all 0, ``int32``.
        """
        rows = self.sizes[0] if self.padding == "fixed" else 1
        zeros = tf.zeros([rows, self.widths[0]], tf.int32)
        return (zeros, zeros), zeros


def make_dataset(
    prepared: PreparedPairs,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    widths: Sequence[int] | None = None,
    padding: str = "bucket",
    shuffle: bool = True,
    seed: int = 0,
    shuffle_buffer_size: int | None = None,
    cache: bool | str = False,
    deterministic: bool = True,
    drop_remainder: bool = False,
    prefetch: bool = True,
    num_replicas: int = 1,
    epoch: int | None = None,
) -> tf.data.Dataset:
    """Batched training/evaluation data (Section 5.1: batches by approximate length).

    Token batches (``batch_tokens``): each pair goes to the bucket of the
    smallest width ``w >= max(len(source), len(target))``; bucket ``w`` emits
    batches of ``batch_tokens // w`` pairs, so every batch satisfies
    ``B * max(S, T) <= batch_tokens`` including padding (the last batch of a
    bucket in an epoch may be smaller, except with ``padding="fixed"``, which
    pads it with all-0 rows). Fixed batches (``batch_size``): the paper-less
    baseline, ``batch_size`` pairs in shuffled order.

    The batches of an epoch are planned at once from a shuffled index
    permutation (the same batches as ``shuffle(...).group_by_window(...)``
    over the pairs in that order, the full ones in the same order; each
    bucket's incomplete last batch comes at a drawn position instead of at
    the end of the epoch: see :func:`_batch_plan`), then
    each batch is gathered from the in-memory ids in one vectorized op.

    Which permutation: with ``epoch=None`` a new one at every iteration of the
    dataset (``tf.data``'s ``reshuffle_each_iteration``; a restarted process
    starts again from the first); with ``epoch=e`` the permutation of epoch
    ``e``, a function of ``(seed, e)`` only
    (:func:`~keras_transformer.data.epochs.stateless_order`; with
    ``shuffle_buffer_size`` pairs move only within windows of that size).
    :func:`make_epoch_batches` gives every epoch this way, for exact resumption.

    Shapes per epoch (what XLA compiles for): ``"batch"`` up to one per batch;
    ``"bucket"`` a few per width (source and target widths differ and last
    batches are smaller); ``"fixed"`` exactly one per non-empty bucket,
    ``[B_w, w]`` on both sides with ``B_w = batch_tokens // w`` (rounded down
    to a multiple of ``num_replicas``, at least ``num_replicas``), or
    ``[batch_size, w]`` for fixed batches. Padding rows are all 0 (no real
    target token), so the token-normalized loss and its gradients are those of
    the real rows.

    ``tf.data`` autotuning is off (``options().autotune.enabled`` is False):
    destroying an autotuned iterator at an epoch's end stalled training for up
    to 60 s (TensorFlow 2.21); ``AUTOTUNE`` parallelism and prefetching use
    tf.data's fixed defaults.

    Args:
        prepared: output of :func:`prepare_pairs`.
        batch_tokens: token budget per batch and side (padding included),
            ``TransformerConfig.batch_tokens``. Exclusive with ``batch_size``.
        batch_size: pairs per batch. Exclusive with ``batch_tokens``.
        widths: padding widths / bucket upper bounds (increasing); default
            :func:`bucket_widths` up to the longest prepared sequence.
        padding: ``"bucket"``: each side is padded to the smallest width in
            ``widths`` that fits its batch; ``"batch"``: to the longest
            sequence of the batch; ``"fixed"``: both sides to the bucket's
            width and the rows to the bucket's batch size (one shape per
            bucket, for XLA).
        shuffle: shuffle pairs (seeded).
        seed: shuffle seed.
        shuffle_buffer_size: default: all pairs (a full shuffle).
        cache: accepted for compatibility; has no effect (the ids already
            live in memory and every epoch is planned from them).
        deterministic: fixed element order for a seed (``tf.data`` option).
        drop_remainder: drop incomplete batches (then not every pair is
            yielded each epoch).
        prefetch: add ``prefetch(AUTOTUNE)``.
        num_replicas: with ``padding="fixed"``, batch sizes are multiples of
            it (equal per-replica shapes under a ``tf.distribute`` strategy).
        epoch: ``None`` (reshuffle at every iteration) or the 0-based epoch
            whose permutation to use.

    Returns:
        A finite ``tf.data.Dataset`` of ``((source_ids [B,S] int32,
        target_in_ids [B,T] int32), target_out_ids [B,T] int32)``, 0-padded on
        the right; one pass = one epoch.

    Raises:
        ValueError: unless exactly one of ``batch_tokens``/``batch_size`` is
            given, when ``batch_tokens`` is smaller than the largest width, or
            for an unknown ``padding``, non-increasing ``widths`` or
            ``num_replicas < 1``.
    """
    del cache  # see Args
    planner = _Planner(prepared, batch_tokens, batch_size, widths, padding, shuffle, seed, shuffle_buffer_size,
                       deterministic, drop_remainder, num_replicas)
    if epoch is None:
        order = tf.data.Dataset.range(planner.num_pairs)
        if shuffle:
            buffer = shuffle_buffer_size or max(planner.num_pairs, 1)
            order = order.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
        # One element per epoch: the arrival order of the pairs (the permutation
        # shuffle(...) would apply to them, fresh each epoch).
        dataset = planner.batches(order.batch(max(planner.num_pairs, 1)))
    else:
        dataset = planner.epoch(tf.constant(epoch, tf.int64))
    if prefetch:
        dataset = dataset.prefetch(tf.data.AUTOTUNE)
    return dataset


class _Planner:
    """The in-memory ids and the checked batching of :func:`make_dataset`."""

    def __init__(self, prepared, batch_tokens, batch_size, widths, padding, shuffle, seed, shuffle_buffer_size,
                 deterministic, drop_remainder, num_replicas):
        self.num_pairs = len(prepared)
        source_lengths = prepared.source_ids.row_lengths().numpy()
        target_lengths = prepared.target_ids.row_lengths().numpy()
        pair_longest = np.maximum(source_lengths, target_lengths)
        longest = int(pair_longest.max()) if self.num_pairs else 1
        self.batching = Batching.make(longest, batch_tokens, batch_size, widths, padding, num_replicas)
        bucket_of = self.batching.bucket_of(pair_longest)
        self.bucket_counts = np.bincount(bucket_of, minlength=len(self.batching.sizes))
        self.bucket_of = tf.constant(bucket_of, tf.int64)
        self.sizes = tf.constant(self.batching.sizes, tf.int64)
        self.source_ids, self.target_ids = prepared.source_ids, prepared.target_ids
        self.shuffle, self.seed, self.window = shuffle, int(seed), shuffle_buffer_size
        self.deterministic, self.drop_remainder = deterministic, drop_remainder

    def batches(self, permutations: tf.data.Dataset) -> tf.data.Dataset:
        """One epoch of batches per element of ``permutations`` (``[N]`` ``int64`` arrival orders)."""
        dataset = permutations.flat_map(
            lambda permutation: tf.data.Dataset.from_tensor_slices(
                _batch_plan(permutation, self.bucket_of, self.sizes, self.drop_remainder)
            )
        )
        batching, source_ids, target_ids = self.batching, self.source_ids, self.target_ids

        def to_model_inputs(indices, key):
            source = tf.gather(source_ids, indices).to_tensor(default_value=PAD_ID)
            target_out = tf.gather(target_ids, indices).to_tensor(default_value=PAD_ID)
            return batching.finish(source, target_out, key)

        dataset = dataset.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE, deterministic=self.deterministic)
        options = tf.data.Options()
        options.deterministic = self.deterministic
        # No tf.data autotuning: Keras makes a new iterator at every epoch (and for every validation
        # pass), and destroying an autotuned one waits for its optimization thread, whose sleep grows
        # to 60 s. Measured with TensorFlow 2.21 on a 2-core CPU: 0-60 s with both cores idle at each
        # epoch's end (epochs of 84-141 s with it, 74-80 s without; the same losses).
        options.autotune.enabled = False
        return dataset.with_options(options)

    def permutation(self, epoch: tf.Tensor) -> tf.Tensor:
        """The arrival order of epoch ``epoch``: a function of ``(seed, epoch)`` only."""
        n = tf.constant(self.num_pairs, tf.int64)
        if not self.shuffle:
            return tf.range(n, dtype=tf.int64)
        seed = tf.stack([tf.constant(self.seed, tf.int64), tf.cast(epoch, tf.int64)])
        return stateless_order(n, seed, self.window)

    def epoch(self, epoch: tf.Tensor) -> tf.data.Dataset:
        """The batches of ``epoch`` (scalar ``int64`` tensor)."""
        return self.batches(tf.data.Dataset.from_tensors(epoch).map(self.permutation))

    @property
    def batches_per_epoch(self) -> int:
        return self.batching.batches_per_epoch(self.bucket_counts, self.drop_remainder)


def make_epoch_batches(
    prepared: PreparedPairs, batch_tokens: int | None = None, batch_size: int | None = None,
    widths: Sequence[int] | None = None, padding: str = "bucket", shuffle: bool = True, seed: int = 0,
    shuffle_buffer_size: int | None = None, drop_remainder: bool = False, num_replicas: int = 1,
) -> "MemoryEpochBatches":
    """Every epoch's in-memory batches, each from ``(seed, epoch)``: the training data of :func:`~keras_transformer.training.fit`.

    Epoch ``e`` is ``make_dataset(prepared, ..., epoch=e)``; the arguments
    are :func:`make_dataset`'s. The batches are global: the strategy splits
    each across its replicas.

    Returns:
        A :class:`MemoryEpochBatches` (an
        :class:`~keras_transformer.data.epochs.EpochBatches`).

    Raises:
        ValueError: as :func:`make_dataset`, or when the epoch would have no
            batch.
    """
    return MemoryEpochBatches(
        _Planner(prepared, batch_tokens, batch_size, widths, padding, shuffle, seed, shuffle_buffer_size,
                 True, drop_remainder, num_replicas)
    )


class MemoryEpochBatches(EpochBatches):
    """In-memory batches of every epoch (see :func:`make_epoch_batches`).

    Args:
        planner: the checked ids and batching (internal).

    Raises:
        ValueError: when an epoch would have no batch.
    """

    per_replica = False

    def __init__(self, planner: _Planner):
        self._planner = planner
        self._steps = planner.batches_per_epoch
        if self._steps < 1:
            raise ValueError(f"no training batch: {planner.num_pairs} pairs give no batch per epoch")

    @property
    def steps_per_epoch(self) -> int:
        """Global batches per epoch (``sum_w ceil(pairs_w / B_w)`` over the buckets)."""
        return self._steps

    @property
    def batching(self) -> Batching:
        """The :class:`Batching`."""
        return self._planner.batching

    def epoch_dataset(self, epoch: tf.Tensor, worker_index: int = 0) -> tf.data.Dataset:
        """The global batches of ``epoch`` (``worker_index`` is ignored: the strategy shards them)."""
        return self._planner.epoch(epoch)


def count_real_tokens(ids: tf.Tensor) -> tf.Tensor:
    """Number of non-padding tokens (``ids != 0``).

    Args:
        ids: integer ids of any shape, 0 = padding.

    Returns:
        Scalar ``int64`` tensor.
    """
    return tf.math.count_nonzero(tf.not_equal(ids, PAD_ID), dtype=tf.int64)


def dataset_statistics(dataset: tf.data.Dataset) -> dict[str, Any]:
    """Iterates one epoch and counts sentences, real and padded tokens.

    Args:
        dataset: yields ``((source_ids [B,S], target_in_ids [B,T]), target_out_ids [B,T])``.

    Returns:
        dict with ``batches``, ``sentences``, ``source_tokens``,
        ``target_tokens`` (real, of target_out), ``source_slots`` and
        ``target_slots`` (``B*S`` and ``B*T`` summed), ``padding_fraction``
        (padded slots / all slots, both sides), ``max_batch_tokens``
        (largest ``B * max(S, T)``) and ``shapes`` (distinct ``(B, S, T)``).
    """
    stats = dict(batches=0, sentences=0, source_tokens=0, target_tokens=0, source_slots=0, target_slots=0,
                 max_batch_tokens=0)
    shapes = set()
    for (source, _), target_out in dataset:
        b, s = source.shape
        t = target_out.shape[1]
        shapes.add((b, s, t))
        stats["batches"] += 1
        stats["sentences"] += b
        stats["source_tokens"] += int(count_real_tokens(source))
        stats["target_tokens"] += int(count_real_tokens(target_out))
        stats["source_slots"] += b * s
        stats["target_slots"] += b * t
        stats["max_batch_tokens"] = max(stats["max_batch_tokens"], b * max(s, t))
    slots = stats["source_slots"] + stats["target_slots"]
    stats["padding_fraction"] = 1.0 - (stats["source_tokens"] + stats["target_tokens"]) / slots if slots else 0.0
    stats["shapes"] = shapes
    return stats
