"""Streaming token batches from prepared shards: bounded memory, one set of shards per worker, exact resume.

Reads the shards written by :func:`keras_transformer.data.prepare.prepare_corpus`
with ``tf.data`` and batches them as Section 5.1 does ("sentence pairs were
batched together by approximate sequence length"), the bucketing of
:func:`~keras_transformer.data.pipeline.make_dataset`: each pair goes to the
bucket of the smallest padding width ``w >= max(len(source), len(target))``,
and bucket ``w`` emits batches of ``batch_tokens // w`` pairs, so a batch
holds at most ``batch_tokens`` tokens per side, padding included.

Per epoch and worker the pipeline is::

    this worker's shards, in an order drawn from (seed, epoch, worker)
      -> interleave (cycle_length files read at once, one record from each in turn)
      -> bounded shuffle: blocks of shuffle_buffer_size records, each permuted from (seed, epoch, worker, block)
      -> decode the int32 records -> group_by_window by bucket -> pad (bucket / fixed widths)
      -> [all-padding batches, so that every worker runs the same number of steps]
    epochs back to back -> prefetch

Memory holds one shuffle block, the open readers and the partial batches
of each bucket, whatever the corpus size. Every random choice is stateless
(``tf.random.stateless_*``), so the batches of epoch ``e`` are a function of
``(seed, e)`` and of the corpus only: a run killed anywhere and resumed by
:func:`~keras_transformer.training.fit` rebuilds epoch ``e`` and skips
the steps already trained, seeing exactly the batches of an uninterrupted run.

Many workers (``MultiWorkerMirroredStrategy``): worker ``i`` of ``W`` reads
the shards ``i, i + W, i + 2W, ...`` of the sorted list (explicit
file-level sharding, no ``tf.data`` auto-sharding), so within an epoch every
pair is read by exactly one worker, once. Its batches are per-replica
batches of ``batch_tokens // replicas`` tokens, handed to Keras through
``strategy.distribute_datasets_from_function``. Workers must run the same
number of steps: the manifest's length histograms give each worker's exact
number of batches, and a worker with fewer appends all-padding batches (no
real token, so no loss and no gradient; the token-normalized loss of
Section 5.4 counts the real tokens of the global batch). Write a multiple
of the workers as shards (``prepare --num-shards``; the default 32 serves
1, 2, 4, 8, 16 or 32 workers evenly, 48 or 96 also serve 3, 6 and 12): then
the workers' epochs differ only by the last, partial batch of each bucket.
When the shards do not divide, some workers read one shard more; the others
idle (all-padding steps) for about a shard's worth of batches each epoch;
fewer shards than workers is an error.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from keras_transformer.data.epochs import EpochBatches, StrategyLayout, stateless_order, strategy_layout
from keras_transformer.data.pipeline import PADDING_MODES, Batching, bucket_widths
from keras_transformer.settings import DataSettings, RunError

__all__ = ["ShardedEpochBatches", "decode_record", "make_streaming_batches"]

DEFAULT_SHUFFLE_BUFFER_SIZE = DataSettings.shuffle_buffer_size
DEFAULT_CYCLE_LENGTH = 16


def decode_record(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One shard record -> ``(source_ids [S] int32, target_out_ids [T] int32)``, both ending with EOS.

    Args:
        record: scalar ``tf.string``, int32 little-endian
            ``[S, source ids (S), target ids]`` (see
            :mod:`keras_transformer.data.prepare`).

    Returns:
        The source and target ids.
    """
    ids = tf.io.decode_raw(record, tf.int32, little_endian=True)
    length = ids[0]
    return ids[1 : 1 + length], ids[1 + length :]


class ShardedEpochBatches(EpochBatches):
    """Per-replica token batches streamed from a prepared folder (see the module docstring).

    Build it with :func:`make_streaming_batches`.

    Args:
        corpus: the :class:`~keras_transformer.data.prepared.PreparedCorpus`.
        split: the split to read.
        batching: the per-replica :class:`~keras_transformer.data.pipeline.Batching`.
        layout: workers and local replicas.
        seed: seed of every shuffle.
        shuffle: shuffle shards and records (else corpus order per worker).
        shuffle_buffer_size: records per shuffle block.
        cycle_length: shards read at once by one worker.

    Raises:
        ValueError: when there are fewer shards than workers, or no batch.
    """

    per_replica = True

    def __init__(self, corpus, split: str, batching: Batching, layout: StrategyLayout, seed: int, shuffle: bool,
                 shuffle_buffer_size: int, cycle_length: int):
        self.corpus, self.split_name, self.batching, self.layout = corpus, split, batching, layout
        self.seed, self.shuffle = int(seed), bool(shuffle)
        self.shuffle_buffer_size, self.cycle_length = int(shuffle_buffer_size), int(cycle_length)
        files = corpus.files(split)
        shards = corpus.split(split)["shards"]
        if len(files) < layout.num_workers:
            raise RunError(
                f"{corpus.directory} has {len(files)} {split} shards for {layout.num_workers} workers: every worker "
                f"needs at least one; prepare it with a multiple of {layout.num_workers} shards ({{data.num_shards}})"
            )
        self.worker_files = [files[i :: layout.num_workers] for i in range(layout.num_workers)]
        # Bucket of each pair length; lengths past the largest width do not occur (Batching.make checked it).
        bucket_of = np.minimum(batching.bucket_of(np.arange(corpus.max_length + 1)), len(batching.sizes) - 1)
        self.worker_pairs, self.worker_batches = [], []
        for i in range(layout.num_workers):
            histogram = np.sum([np.asarray(s["longest_histogram"], np.int64) for s in shards[i :: layout.num_workers]],
                               axis=0)
            counts = np.bincount(bucket_of, weights=histogram, minlength=len(batching.sizes)).astype(np.int64)
            self.worker_pairs.append(int(histogram.sum()))
            self.worker_batches.append(batching.batches_per_epoch(counts))
        self._steps = max(math.ceil(b / layout.local_replicas) for b in self.worker_batches)
        if self._steps < 1:
            raise ValueError(f"no training batch: {corpus.directory} has no {split} pairs")

    @property
    def steps_per_epoch(self) -> int:
        """Steps per epoch: the largest worker's batches, divided by its local replicas (rounded up)."""
        return self._steps

    def padding_batches(self, worker_index: int = 0) -> int:
        """All-padding batches worker ``worker_index`` appends to each epoch to match the others' steps."""
        return self._steps * self.layout.local_replicas - self.worker_batches[worker_index]

    def _seed(self, epoch: tf.Tensor, worker_index: int, stream: int) -> tf.Tensor:
        """``[2]`` ``int64`` stateless seed of (seed, epoch, worker, stream)."""
        key = (tf.cast(epoch, tf.int64) * self.layout.num_workers + worker_index) * 2 + stream
        return tf.stack([tf.constant(self.seed, tf.int64), key])

    def records(self, epoch: tf.Tensor, worker_index: int = 0) -> tf.data.Dataset:
        """The serialized records of one epoch for one worker, in the epoch's shuffled order."""
        files = tf.constant(self.worker_files[worker_index])
        if self.shuffle:
            files = tf.gather(files, stateless_order(tf.size(files, tf.int64), self._seed(epoch, worker_index, 0)))
        cycle = max(1, min(self.cycle_length, len(self.worker_files[worker_index])))
        records = tf.data.Dataset.from_tensor_slices(files).interleave(
            lambda path: tf.data.TFRecordDataset(path, buffer_size=1 << 20),
            cycle_length=cycle, block_length=1, num_parallel_calls=cycle, deterministic=True,
        )
        if self.shuffle:
            block_seed = self._seed(epoch, worker_index, 1)

            def permute(index, block):
                seed = tf.random.experimental.stateless_fold_in(block_seed, index)
                return tf.gather(block, stateless_order(tf.size(block, tf.int64), seed))

            records = records.batch(self.shuffle_buffer_size).enumerate().map(permute).unbatch()
        return records

    def epoch_dataset(self, epoch: tf.Tensor, worker_index: int = 0) -> tf.data.Dataset:
        """The per-replica batches of ``epoch`` for worker ``worker_index``: ``steps_per_epoch * local_replicas`` of them.

        Args:
            epoch: scalar ``int64`` tensor.
            worker_index: the worker (input pipeline).

        Returns:
            ``((source_ids [B,S], target_in_ids [B,T]), target_out_ids [B,T])``
            ``int32`` batches, then the all-padding ones.
        """
        batching = self.batching
        widths = tf.constant(batching.widths, tf.int32)
        sizes = tf.constant(batching.sizes, tf.int64)

        def with_key(record):
            source, target = decode_record(record)
            longest = tf.maximum(tf.size(source), tf.size(target))
            if batching.batch_tokens is None:
                key = tf.constant(0, tf.int64)
            else:
                key = tf.cast(tf.searchsorted(widths, tf.reshape(longest, [1]), side="left")[0], tf.int64)
            return source, target, key

        pairs = self.records(epoch, worker_index).map(with_key, num_parallel_calls=tf.data.AUTOTUNE,
                                                      deterministic=True)
        batches = pairs.group_by_window(
            key_func=lambda source, target, key: key,
            reduce_func=lambda key, window: window.padded_batch(
                tf.gather(sizes, key), padded_shapes=([None], [None], [])
            ),
            window_size_func=lambda key: tf.gather(sizes, key),
        )
        batches = batches.map(lambda source, target, keys: batching.finish(source, target, keys[0]),
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        padding = self.padding_batches(worker_index)
        if padding:
            batches = batches.concatenate(tf.data.Dataset.from_tensors(batching.empty_batch()).repeat(padding))
        options = tf.data.Options()
        options.deterministic = True
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return batches.with_options(options)

    def check_data(self) -> None:
        """Names the damaged shard after a ``DataLossError`` (reads this split's shards one by one).

        Raises:
            keras_transformer.data.prepared.PreparedDataError: naming it.
        """
        self.corpus.find_damaged_shard(self.split_name)


def make_streaming_batches(
    corpus,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    *,
    split: str = "train",
    padding: str = "bucket",
    widths: list[int] | None = None,
    seed: int = 0,
    shuffle: bool = True,
    shuffle_buffer_size: int = DEFAULT_SHUFFLE_BUFFER_SIZE,
    cycle_length: int = DEFAULT_CYCLE_LENGTH,
    strategy: tf.distribute.Strategy | None = None,
    layout: StrategyLayout | None = None,
) -> ShardedEpochBatches:
    """Every epoch's token batches streamed from a prepared folder, for :func:`~keras_transformer.training.fit`.

    Args:
        corpus: a :class:`~keras_transformer.data.prepared.PreparedCorpus` (or
            its folder's path).
        batch_tokens: tokens per global batch and side, padding included
            (``TransformerConfig.batch_tokens``); each replica's batches get
            ``batch_tokens // replicas``. Exclusive with ``batch_size``.
        batch_size: pairs per replica batch (fixed batches).
        split: the prepared split.
        padding: ``"bucket"``, ``"batch"`` or ``"fixed"`` (one shape per
            bucket, for XLA), as in :func:`~keras_transformer.data.pipeline.make_dataset`.
        widths: padding widths (default: :func:`~keras_transformer.data.pipeline.bucket_widths`
            up to the split's longest sequence).
        seed: seed of the shard order and the record shuffle.
        shuffle: shuffle (training) or read in shard order (evaluation).
        shuffle_buffer_size: records per shuffle block (memory: about 250
            bytes each at WMT's lengths).
        cycle_length: shards one worker reads at once.
        strategy: the strategy training will run under (its layout), or
        layout: the layout itself (default: one worker, one replica).

    Returns:
        A :class:`ShardedEpochBatches`.

    Raises:
        ValueError: for bad batching settings (as ``make_dataset``), fewer
            shards than workers, or an empty split.
        keras_transformer.data.prepared.PreparedDataError: for a damaged
            folder (when given a path).
    """
    from keras_transformer.data.prepared import PreparedCorpus, open_prepared

    if not isinstance(corpus, PreparedCorpus):
        corpus = open_prepared(corpus)
    if padding not in PADDING_MODES:
        raise ValueError(f"padding must be one of {PADDING_MODES}, got {padding!r}")
    if shuffle_buffer_size < 1 or cycle_length < 1:
        raise ValueError(f"shuffle_buffer_size and cycle_length must be positive, got {shuffle_buffer_size}, "
                         f"{cycle_length}")
    layout = layout or (strategy_layout(strategy) if strategy is not None else StrategyLayout())
    histogram = np.sum([np.asarray(s["longest_histogram"], np.int64) for s in corpus.split(split)["shards"]], axis=0)
    lengths = np.flatnonzero(histogram)
    longest = int(lengths.max()) if lengths.size else 1
    if widths is None:
        widths = bucket_widths(longest, min_width=min(8, longest))
    per_replica_tokens = None if batch_tokens is None else batch_tokens // layout.num_replicas
    if per_replica_tokens is not None and per_replica_tokens < int(widths[-1]):
        raise ValueError(
            f"batch_tokens={batch_tokens} over {layout.num_replicas} replicas leaves {per_replica_tokens} tokens per "
            f"replica batch, less than the longest width {widths[-1]}: raise batch_tokens"
        )
    batching = Batching.make(longest, per_replica_tokens, batch_size, widths, padding, num_replicas=1)
    return ShardedEpochBatches(corpus, split, batching, layout, seed, shuffle, shuffle_buffer_size, cycle_length)
