"""The globally token-normalized, per-replica XLA train step (Sections 5.1 and 5.4).

:func:`install_train_step` replaces a compiled model's ``train_step`` and
``test_step``: the label-smoothed loss (Section 5.4) summed over the real
target tokens of each replica's batch and divided by the real target tokens
of the global batch, so that with several devices or with gradient
accumulation (Section 5.1: ~25,000 source and target tokens per batch) the
loss and gradients equal one device's on the whole batch.

XLA under ``MirroredStrategy``. Keras 3's ``compile(jit_compile=True)`` XLA-
compiles the whole distributed step, which fails with more than one device
("Trying to access resource ... located in device ... from device"), and
``jit_compile="auto"`` silently turns XLA off there.
:func:`~keras_transformer.training.compile.compile_model` therefore compiles
the Keras step without XLA and installs a train step in which each replica's
forward and backward pass runs in an inner ``tf.function(jit_compile=True)``;
the token count all-reduce and the optimizer update (gradient all-reduce,
Adam) run outside it. Each replica compiles its own XLA executable per input
shape, so a bounded set of padded shapes bounds the compilations:
``make_dataset(padding="fixed")`` in the data pipeline (what the CLI uses),
or :func:`~keras_transformer.training.fixed_shapes.fixed_shape_batches` for
other datasets.

The private Keras attributes the step needs (the ``loss`` metric, the
symbolic build) are reached through
:mod:`keras_transformer.training.keras_internals`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.training import keras_internals
from keras_transformer.training.losses import MaskedLabelSmoothedCrossEntropy, token_losses

__all__ = ["install_train_step"]


def _loss_settings(model: keras.Model) -> tuple[float, int]:
    loss = getattr(model, "loss", None)
    if isinstance(loss, MaskedLabelSmoothedCrossEntropy):
        return loss.label_smoothing, loss.pad_id
    raise ValueError(
        "install_train_step needs a model compiled with MaskedLabelSmoothedCrossEntropy "
        f"(the global-token normalization), got loss={loss!r}"
    )


def _global_sum(value):
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        return context.all_reduce(tf.distribute.ReduceOp.SUM, value)
    return value


class _Untracked:
    """Holds a ``tf.function`` where ``tf.saved_model.save`` does not look for children.

    Calls and attribute look-ups (e.g. ``experimental_get_tracing_count``) go
    to the function.
    """

    def __init__(self, function):
        self.function = function

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)

    def __getattr__(self, name):
        if name == "function":
            raise AttributeError(name)
        return getattr(self.function, name)


def install_train_step(model: keras.Model, jit_compile: bool = True) -> keras.Model:
    """Replaces ``model.train_step``/``test_step`` by the globally token-normalized, per-replica XLA step.

    Per replica and step: (1) count the replica's real target tokens and
    all-reduce the count over replicas (the global count ``G``); (2) in an
    inner ``tf.function(jit_compile=jit_compile)``: forward, the sum of the
    label-smoothed token losses divided by ``G`` (times the loss scale under
    ``mixed_float16``), and its gradients; (3) outside XLA:
    ``optimizer.apply_gradients`` (which sums the gradients over replicas,
    handles loss scaling and gradient accumulation). Summed over replicas the
    loss and gradients equal those of one device on the whole global batch,
    whatever the split (Section 5.4 with padding masked).

    The reported ``loss`` is the running mean over the epoch's steps of that
    global-batch loss (nats per real target token).

    A built ``model`` gets its optimizer slots and compiled metrics here,
    eagerly, so ``fit`` traces the step once.

    Args:
        model: a model compiled by :func:`~keras_transformer.training.compile.compile_model` (or with
            :class:`MaskedLabelSmoothedCrossEntropy`).
        jit_compile: XLA-compile each replica's forward+backward.

    Returns:
        ``model``. ``model.replica_gradients`` is the inner ``tf.function``.

    Raises:
        ValueError: if the model was not compiled with the masked loss.
    """
    label_smoothing, pad_id = _loss_settings(model)

    def replica_loss_sum(x, y, training):
        logits = model(x, training=training)
        y = tf.cast(y, tf.int32)
        mask = tf.cast(tf.not_equal(y, pad_id), tf.float32)
        return tf.reduce_sum(token_losses(y, logits, label_smoothing) * mask), logits

    @tf.function(jit_compile=jit_compile, reduce_retracing=True, autograph=False)
    def replica_gradients(x, y, global_count):
        with tf.GradientTape() as tape:
            total, logits = replica_loss_sum(x, y, True)
            loss = total / global_count
            scaled = model.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        return loss, grads, logits

    @tf.function(jit_compile=jit_compile, reduce_retracing=True, autograph=False)
    def replica_eval(x, y):
        return replica_loss_sum(x, y, False)

    def token_count(y):
        return tf.reduce_sum(tf.cast(tf.not_equal(tf.cast(y, tf.int32), pad_id), tf.float32))

    def num_replicas():
        context = tf.distribute.get_replica_context()
        return context.num_replicas_in_sync if context is not None else 1

    def multi_worker_safe(logs):
        # Keras 3.15 reduces step outputs across workers with strategy.reduce("MEAN",
        # v, axis=0), which fails on scalars ("Invalid reduction dimension 0 for
        # input with 0 dimensions"). The metric values are already synchronized:
        # give them a leading axis of 1, which that reduction removes.
        if isinstance(model.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return {k: tf.reshape(v, [1]) for k, v in logs.items()}
        return logs

    def train_step(data):
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        global_count = tf.maximum(_global_sum(token_count(y)), 1.0)
        loss, grads, logits = replica_gradients(x, y, global_count)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        # Metric variables sum their updates over replicas: R * (partial / G) summed
        # over R replicas with weight 1 each gives the global-batch loss.
        keras_internals.update_loss_tracker(model, loss * num_replicas())
        return multi_worker_safe(model.compute_metrics(x, y, logits, sample_weight=None))

    def test_step(data):
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        global_count = tf.maximum(_global_sum(token_count(y)), 1.0)
        total, logits = replica_eval(x, y)
        keras_internals.update_loss_tracker(model, total / global_count * num_replicas())
        return multi_worker_safe(model.compute_metrics(x, y, logits, sample_weight=None))

    def maybe_symbolic_build(iterator=None, data_batch=None):
        # Keras 3.15 builds the compiled metrics from a batch it reduces with
        # strategy.reduce("MEAN"), which raises for int32 ids under
        # MultiWorkerMirroredStrategy ("Attempt to convert a value (PerReplica...)").
        # Shapes and dtypes are all it needs: take the first local replica's batch.
        strategy = model.distribute_strategy
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = tf.nest.map_structure(
                    lambda v: strategy.experimental_local_results(v)[0]
                    if isinstance(v, tf.distribute.DistributedValues)
                    else v,
                    next(it),
                )
                break
        with strategy.scope():
            keras_internals.symbolic_build(model, data_batch)

    if keras_internals.has_own_strategy(model):
        keras_internals.replace_maybe_symbolic_build(model, maybe_symbolic_build)
    if model.built:
        # The optimizer's slots and the compiled metrics made now (0.3 s for the tiny preset), not while
        # the train step is traced: variables made inside a trace are lifted out of the graph one by one
        # (6 s for the same 170 slots), and tf.function then traces the step a second time.
        ids = tf.zeros([1, 1], tf.int32)
        with model.distribute_strategy.scope():
            keras_internals.symbolic_build(model, ((ids, ids), ids))
    model.train_step = train_step
    model.test_step = test_step
    # Not a tracked attribute: tf.saved_model.save would try (and fail) to export a
    # training function that captures the dropout seed generators.
    model.replica_gradients = _Untracked(replica_gradients)
    model.make_train_function(force=True)
    model.make_test_function(force=True)
    return model
