"""Training batches as a function of the epoch: what exact resumption needs.

A ``tf.data`` pipeline that reshuffles at every iteration gives a killed and
restarted run the first permutation again, whatever epoch it stopped in. An
:class:`EpochBatches` instead derives each epoch's batches from ``(seed,
epoch)`` only (stateless shuffles, Salmon et al. 2011's counter-based
generators behind ``tf.random.stateless_*``), so
:func:`keras_transformer.training.fit` can rebuild, after a kill, the
exact batches of the epoch it stopped in and skip the ones already trained:
the resumed run sees the same sequence of batches as an uninterrupted one.

Two kinds of batches:

* global batches (``per_replica = False``, the in-memory
  :class:`~keras_transformer.data.pipeline.MemoryEpochBatches`): each element
  is the batch of one step; the ``tf.distribute`` strategy splits it across
  replicas (Keras' ``experimental_distribute_dataset``).
* per-replica batches (``per_replica = True``, the sharded
  :class:`~keras_transformer.data.streaming.ShardedEpochBatches`): each input
  pipeline (one per worker) builds its own batches from its own files, one
  element per local replica and step, and is handed to Keras through
  ``strategy.distribute_datasets_from_function``.

Both yield exactly :attr:`EpochBatches.steps_per_epoch` steps per epoch on
every worker, so ``model.fit(steps_per_epoch=...)`` never waits for a worker
that ran out of data.
"""

from __future__ import annotations

import abc
import dataclasses

import tensorflow as tf

__all__ = ["EpochBatches", "StrategyLayout", "strategy_layout", "stateless_order"]


@dataclasses.dataclass(frozen=True)
class StrategyLayout:
    """How a ``tf.distribute`` strategy's replicas are spread over workers.

    Attributes:
        num_workers: input pipelines, one per worker process (``TF_CONFIG`` tasks).
        worker_index: this process's input pipeline (0 without a cluster).
        local_replicas: replicas (devices) of each worker.
    """

    num_workers: int = 1
    worker_index: int = 0
    local_replicas: int = 1

    @property
    def num_replicas(self) -> int:
        """Replicas in sync over the cluster."""
        return self.num_workers * self.local_replicas


def strategy_layout(strategy: tf.distribute.Strategy | None = None) -> StrategyLayout:
    """The :class:`StrategyLayout` of ``strategy`` (default: the current one).

    Args:
        strategy: a ``tf.distribute`` strategy, or ``None``.

    Returns:
        Workers, this worker's index (``InputContext.input_pipeline_id``'s
        numbering: the chief, if any, is 0) and local replicas.
    """
    strategy = strategy or tf.distribute.get_strategy()
    replicas = int(strategy.num_replicas_in_sync)
    try:
        local = max(len(strategy.extended.worker_devices), 1)
    except (AttributeError, RuntimeError, NotImplementedError):
        local = 1
    local = min(local, replicas)
    num_workers = max(replicas // local, 1)
    index = 0
    if num_workers > 1:
        index = int(getattr(strategy.extended, "_id_in_cluster", 0) or 0)
    return StrategyLayout(num_workers=num_workers, worker_index=index, local_replicas=local)


def stateless_order(n: tf.Tensor, seed: tf.Tensor, window: int | None = None) -> tf.Tensor:
    """A permutation of ``range(n)`` that depends only on ``seed``, shuffled within windows.

    ``window=None`` (or ``>= n``) gives a uniform random permutation; a
    window ``w`` permutes each block ``[k*w, (k+1)*w)`` within itself (a
    bounded, stateless shuffle: an element moves less than ``w`` places).

    Args:
        n: scalar ``int64``, the number of elements.
        seed: ``[2]`` ``int64``, e.g. ``[seed, epoch]``
            (``tf.random.stateless_uniform``'s seed).
        window: block size, or ``None``.

    Returns:
        ``[n]`` ``int64`` indices.
    """
    n = tf.cast(n, tf.int64)
    keys = tf.random.stateless_uniform(tf.reshape(n, [1]), seed=seed, dtype=tf.float64)
    if window is not None:
        keys += tf.cast(tf.range(n, dtype=tf.int64) // int(window), tf.float64)
    return tf.cast(tf.argsort(keys, stable=True), tf.int64)


class EpochBatches(abc.ABC):
    """The training batches of every epoch, each epoch a pure function of ``(seed, epoch)``.

    Subclasses give :attr:`steps_per_epoch` and :meth:`epoch_dataset`;
    :meth:`for_fit` turns them into what ``model.fit`` takes, for any range
    of epochs and a number of steps already trained in the first one.

    Attributes:
        per_replica: ``True`` when an element is one replica's batch (see the
            module docstring), ``False`` for global batches.
        layout: the :class:`StrategyLayout` the batches were planned for.
    """

    per_replica: bool = False
    layout: StrategyLayout = StrategyLayout()

    @property
    @abc.abstractmethod
    def steps_per_epoch(self) -> int:
        """Training steps per epoch, the same on every worker (``int``)."""

    @abc.abstractmethod
    def epoch_dataset(self, epoch: tf.Tensor, worker_index: int = 0) -> tf.data.Dataset:
        """The batches of ``epoch`` for input pipeline ``worker_index``.

        Args:
            epoch: scalar ``int64`` tensor (0-based).
            worker_index: the worker's input pipeline (per-replica batches).

        Returns:
            A finite dataset of ``((source_ids [B,S], target_in_ids [B,T]),
            target_out_ids [B,T])`` ``int32`` batches: exactly
            ``steps_per_epoch`` elements, times ``layout.local_replicas``
            for per-replica batches.
        """

    @property
    def elements_per_step(self) -> int:
        """Dataset elements a worker consumes per step (its local replicas, or 1 for global batches)."""
        return self.layout.local_replicas if self.per_replica else 1

    def epoch(self, epoch: int, worker_index: int = 0) -> tf.data.Dataset:
        """The batches of one epoch (a Python ``int``), e.g. to inspect or count them.

        Args:
            epoch: 0-based epoch.
            worker_index: the worker's input pipeline.

        Returns:
            The dataset of :meth:`epoch_dataset`.
        """
        return self.epoch_dataset(tf.constant(epoch, tf.int64), worker_index)

    def dataset(self, first_epoch: int, stop_epoch: int, skip: int = 0, worker_index: int = 0) -> tf.data.Dataset:
        """Epochs ``first_epoch .. stop_epoch - 1`` back to back, without the first ``skip`` steps.

        Args:
            first_epoch: the first epoch (0-based).
            stop_epoch: one past the last epoch.
            skip: steps of ``first_epoch`` already trained (resume).
            worker_index: the worker's input pipeline.

        Returns:
            A dataset with a known cardinality (asserted, so a miscount fails
            loudly instead of desynchronizing workers), prefetched.

        Raises:
            ValueError: for an empty range or ``skip`` outside
                ``[0, steps_per_epoch)``.
        """
        if stop_epoch <= first_epoch:
            raise ValueError(f"no epochs in [{first_epoch}, {stop_epoch})")
        if not 0 <= skip < self.steps_per_epoch:
            raise ValueError(f"skip must be in [0, {self.steps_per_epoch}), got {skip}")
        per_step = self.elements_per_step
        dataset = tf.data.Dataset.range(first_epoch, stop_epoch).flat_map(
            lambda epoch: self.epoch_dataset(epoch, worker_index)
        )
        if skip:
            dataset = dataset.skip(skip * per_step)
        count = ((stop_epoch - first_epoch) * self.steps_per_epoch - skip) * per_step
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
        return dataset.prefetch(tf.data.AUTOTUNE)

    def for_fit(self, strategy: tf.distribute.Strategy | None, first_epoch: int, stop_epoch: int, skip: int = 0):
        """What ``model.fit(..., steps_per_epoch=self.steps_per_epoch)`` takes for these epochs.

        Args:
            strategy: the model's strategy (``model.distribute_strategy``).
            first_epoch: the first epoch (0-based).
            stop_epoch: one past the last epoch.
            skip: steps of ``first_epoch`` already trained.

        Returns:
            A ``tf.data.Dataset`` (global batches, or one replica), else a
            ``tf.distribute`` distributed dataset built per worker by
            ``strategy.distribute_datasets_from_function``.

        Raises:
            ValueError: when ``strategy`` has another layout than the
                batches were planned for.
        """
        if not self.per_replica:
            return self.dataset(first_epoch, stop_epoch, skip)
        layout = strategy_layout(strategy)
        if (layout.num_workers, layout.local_replicas) != (self.layout.num_workers, self.layout.local_replicas):
            raise ValueError(
                f"these batches were planned for {self.layout.num_workers} worker(s) x {self.layout.local_replicas} "
                f"replica(s), but the strategy has {layout.num_workers} x {layout.local_replicas}"
            )
        if layout.num_replicas == 1:
            return self.dataset(first_epoch, stop_epoch, skip)

        def worker_dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
            if context.num_input_pipelines != self.layout.num_workers:
                raise ValueError(
                    f"{context.num_input_pipelines} input pipelines, but the batches were planned for "
                    f"{self.layout.num_workers} workers"
                )
            return self.dataset(first_epoch, stop_epoch, skip, worker_index=context.input_pipeline_id)

        return strategy.distribute_datasets_from_function(worker_dataset)

    def check_data(self) -> None:
        """Raises an error naming the damaged data file, if any (after a ``DataLossError``); default: nothing."""
