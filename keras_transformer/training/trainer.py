"""Training: strategy, XLA per replica, mixed precision, accumulation, callbacks (Section 5).

The pieces of Section 5 meet here: Adam with the warmup schedule (Section 5.3,
Eq. 3), the label-smoothed loss normalized by the real target tokens of the
global batch (Section 5.4), batches of about ``batch_tokens`` tokens reached
with several devices or with gradient accumulation (Section 5.1: ~25,000 source
and target tokens per batch), checkpoints that survive a kill and are averaged
at the end (Section 6.1), the best model by validation loss,
``TerminateOnNaN`` and TensorBoard logs.

XLA under ``MirroredStrategy``. Keras 3's ``compile(jit_compile=True)`` XLA-
compiles the whole distributed step, which fails with more than one device
("Trying to access resource ... located in device ... from device"), and
``jit_compile="auto"`` silently turns XLA off there. :func:`compile_model`
therefore compiles the Keras step without XLA and installs a train step in
which each replica's forward and backward pass runs in an inner
``tf.function(jit_compile=True)``; the token count all-reduce and the
optimizer update (gradient all-reduce, Adam) run outside it. Each replica
compiles its own XLA executable per input shape, so a bounded set of padded
shapes bounds the compilations: ``make_dataset(padding="fixed")`` in the data
pipeline (what the CLI uses), or :func:`fixed_shape_batches` for other datasets.
"""

from __future__ import annotations

import json
import os
import pathlib
import time

import keras
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.training import checkpoints as ckpt
from keras_transformer.training.accumulation import PerUpdateSchedule
from keras_transformer.training.losses import MaskedLabelSmoothedCrossEntropy, masked_accuracy, token_losses
from keras_transformer.training.schedule import paper_optimizer

__all__ = [
    "PRECISION_POLICIES",
    "TimeBudget",
    "build_model",
    "compile_model",
    "default_jit_compile",
    "fit",
    "fixed_shape_batches",
    "with_known_length",
    "get_strategy",
    "install_train_step",
    "is_chief",
    "set_precision",
    "task_dir",
]

PRECISION_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


def get_strategy(name: str = "auto", devices: list[str] | None = None) -> tf.distribute.Strategy:
    """The ``tf.distribute`` strategy to build and train the model under.

    Args:
        name: ``"auto"`` (``MultiWorkerMirroredStrategy`` when ``TF_CONFIG``
            describes a cluster of more than one task, else
            ``MirroredStrategy`` over all local GPUs when there are several,
            else the default single-device strategy); ``"mirrored"`` (all local
            GPUs, or all logical CPU devices when there is no GPU, or
            ``devices``); ``"multi_worker"`` (``MultiWorkerMirroredStrategy``
            from the ``TF_CONFIG`` environment variable); ``"default"``.
        devices: explicit device names for ``"mirrored"``.

    Returns:
        A ``tf.distribute.Strategy``. Batch sizes given to ``fit`` are global:
        each step's batch is split across its replicas.

    Raises:
        ValueError: for an unknown name, or ``"multi_worker"`` without
            ``TF_CONFIG``.
    """
    if name == "auto":
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
        if sum(len(v) for v in cluster.values()) > 1:
            return tf.distribute.MultiWorkerMirroredStrategy()
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
    if name == "mirrored":
        if devices is None:
            gpus = tf.config.list_logical_devices("GPU")
            devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("strategy 'multi_worker' needs the TF_CONFIG environment variable (cluster and task)")
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "default":
        return tf.distribute.get_strategy()
    raise ValueError(f"unknown strategy {name!r}; choose auto, mirrored, multi_worker or default")


def is_chief() -> bool:
    """Whether this process is the chief of its ``TF_CONFIG`` cluster (True without one).

    The chief is task ``chief`` if the cluster has one, else ``worker`` 0.
    """
    config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task = config.get("task", {})
    if not task:
        return True
    if "chief" in config.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0


def task_dir(model_dir: str | os.PathLike) -> pathlib.Path:
    """Where this process writes its training state: ``model_dir`` on the chief, ``model_dir/<type>-<index>`` elsewhere.

    Every worker of a ``MultiWorkerMirroredStrategy`` cluster must save and
    restore its own checkpoints (and any state that decides when training
    stops), but only the chief's are the run's: the others write beside it,
    in their own folder.

    Args:
        model_dir: the run's folder.

    Returns:
        The folder (not created).
    """
    model_dir = pathlib.Path(model_dir)
    if is_chief():
        return model_dir
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    return model_dir / f"{task['type']}-{task.get('index', 0)}"


def set_precision(policy: str | None) -> tuple[str, str]:
    """Sets Keras' global dtype policy; call it before building the model.

    ``mixed_float16`` (GPU): float16 compute, float32 variables; ``compile``
    then wraps the optimizer in ``keras.optimizers.LossScaleOptimizer``
    (dynamic loss scaling). ``mixed_bfloat16`` (TPU, recent CPUs and GPUs): no
    loss scaling needed. Logits stay float32 (the model's contract).
    ``"auto"`` picks by hardware
    (:func:`keras_transformer.training.precision.choose_precision`).

    Args:
        policy: ``"auto"``, one of :data:`PRECISION_POLICIES`, or ``None``
            (float32).

    Returns:
        ``(policy, reason)``: the policy set and why (for ``"auto"``: the
        hardware feature that decided it).

    Raises:
        ValueError: for another policy name.
    """
    from keras_transformer.training.precision import AUTO, resolve_precision

    if policy == AUTO:
        policy, reason = resolve_precision(policy)
    else:
        policy, reason = policy or "float32", "asked for"
    if policy not in PRECISION_POLICIES:
        raise ValueError(f"unknown precision policy {policy!r}; choose one of {PRECISION_POLICIES} or 'auto'")
    keras.config.set_dtype_policy(policy)
    return policy, reason


def default_jit_compile() -> bool:
    """Whether XLA is on by default: on GPU/TPU yes; on CPU no.

    Measured with ``scripts/bench/train_throughput.py`` on a 2-core CPU
    (``small`` preset, Multi30k): in steady state the XLA step runs at 0.97x
    the plain step, and each new batch shape costs about 5 s of compilation
    (17 s for the first), so an epoch took 497 s with XLA against 324 s
    without. On GPU XLA fuses the many small kernels of a Transformer layer
    and is the usual default.

    Returns:
        ``True`` when a GPU or TPU is visible.
    """
    return bool(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))


def build_model(config: TransformerConfig):
    """A :class:`keras_transformer.Transformer` built from ``config`` (weights created).

    Create it under ``strategy.scope()`` to train it with that strategy.

    Args:
        config: the hyper-parameters.

    Returns:
        The model, with variables created for ``[1, 1]`` inputs.
    """
    from keras_transformer.model import Transformer

    model = Transformer(**config.model_kwargs())
    dummy = tf.ones([1, 1], tf.int32)
    model((dummy, dummy))
    return model


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
        model: a model compiled by :func:`compile_model` (or with
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
        model._loss_tracker.update_state(loss * num_replicas())
        return multi_worker_safe(model.compute_metrics(x, y, logits, sample_weight=None))

    def test_step(data):
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        global_count = tf.maximum(_global_sum(token_count(y)), 1.0)
        total, logits = replica_eval(x, y)
        model._loss_tracker.update_state(total / global_count * num_replicas())
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
            model._symbolic_build(data_batch=data_batch)

    if getattr(model, "_distribute_strategy", None) is not None:
        model._maybe_symbolic_build = maybe_symbolic_build
    if model.built:
        # The optimizer's slots and the compiled metrics made now (0.3 s for the tiny preset), not while
        # the train step is traced: variables made inside a trace are lifted out of the graph one by one
        # (6 s for the same 170 slots), and tf.function then traces the step a second time.
        ids = tf.zeros([1, 1], tf.int32)
        with model.distribute_strategy.scope():
            model._symbolic_build(data_batch=((ids, ids), ids))
    model.train_step = train_step
    model.test_step = test_step
    # Not a tracked attribute: tf.saved_model.save would try (and fail) to export a
    # training function that captures the dropout seed generators.
    model.replica_gradients = _Untracked(replica_gradients)
    model.make_train_function(force=True)
    model.make_test_function(force=True)
    return model


def compile_model(
    model: keras.Model,
    config: TransformerConfig,
    *,
    jit_compile: bool | str = "auto",
    learning_rate_scale: float | None = None,
    gradient_accumulation_steps: int | None = None,
    steps_per_execution: int = 1,
) -> keras.Model:
    """Compiles ``model`` with the paper's optimizer, loss and masked accuracy, and installs the train step.

    Args:
        model: a Transformer (create it under the strategy's scope).
        config: gives ``d_model``, ``warmup_steps`` and ``label_smoothing``.
        jit_compile: XLA for each replica's forward+backward: ``True``,
            ``False`` or ``"auto"`` (:func:`default_jit_compile`).
        learning_rate_scale: multiplies Eq. 3 (default: ``config.learning_rate_scale``).
        gradient_accumulation_steps: accumulate this many batches per update
            (``None`` or 1: every batch), so one device reaches the paper's
            ~25k-token batches: ``batch_tokens * steps * replicas``. The
            schedule (Eq. 3) counts updates (:class:`PerUpdateSchedule`). Each accumulated batch is
            normalized by its own global token count and the accumulated
            gradients are averaged (Keras' optimizer accumulation).
        steps_per_execution: batches per ``tf.function`` call.

    Returns:
        The same model, compiled (Keras-level ``jit_compile=False``; XLA, if
        on, is inside the installed step: see :func:`install_train_step`).

    Raises:
        ValueError: for ``gradient_accumulation_steps < 1`` or a bad
            ``jit_compile``.
    """
    if jit_compile == "auto":
        jit_compile = default_jit_compile()
    if jit_compile not in (True, False):
        raise ValueError(f"jit_compile must be True, False or 'auto', got {jit_compile!r}")
    if gradient_accumulation_steps is not None and gradient_accumulation_steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be >= 1, got {gradient_accumulation_steps!r}")
    accumulate = gradient_accumulation_steps if gradient_accumulation_steps and gradient_accumulation_steps > 1 else None
    optimizer = paper_optimizer(
        config.d_model,
        config.warmup_steps,
        config.learning_rate_scale if learning_rate_scale is None else learning_rate_scale,
        gradient_accumulation_steps=accumulate,
    )
    if accumulate:
        # Keras evaluates schedules at the batch counter; Eq. 3 counts updates.
        optimizer.learning_rate = PerUpdateSchedule(optimizer._learning_rate, accumulate)
    model.compile(
        optimizer=optimizer,
        loss=MaskedLabelSmoothedCrossEntropy(label_smoothing=config.label_smoothing),
        metrics=[masked_accuracy],
        jit_compile=False,
        steps_per_execution=steps_per_execution,
    )
    install_train_step(model, jit_compile=bool(jit_compile))
    return model


def fixed_shape_batches(
    dataset: tf.data.Dataset, batch_tokens: int, widths: list[int], num_replicas: int = 1
) -> tf.data.Dataset:
    """Pads every batch to one shape per width, so XLA compiles at most ``len(widths)`` times.

    A batch whose longer side is ``w`` (a width of ``widths``, e.g. from
    ``padding="bucket"``) becomes ``[B_w, w]`` on both sides with ``B_w =
    batch_tokens // w`` rounded up to a multiple of ``num_replicas`` (equal
    per-replica shapes). Added rows and columns are padding (id 0): the
    loss and its gradients are unchanged (only real target tokens count).

    Args:
        dataset: ``((source_ids [B,S], target_in_ids [B,T]), target_out_ids [B,T])``
            batches with ``max(S, T)`` in ``widths`` and ``B <= batch_tokens // max(S, T)``
            (the pipeline's token batches).
        batch_tokens: the pipeline's token budget.
        widths: the padding widths (increasing).
        num_replicas: replicas in sync.

    Returns:
        The dataset with static-per-width shapes.

    Raises:
        ValueError: if ``batch_tokens`` is smaller than the largest width.
    """
    widths = [int(w) for w in widths]
    if batch_tokens < widths[-1]:
        raise ValueError(f"batch_tokens={batch_tokens} is smaller than the largest width {widths[-1]}")
    widths_t = tf.constant(widths, tf.int32)

    def pad(inputs, target_out):
        source, target_in = inputs
        longest = tf.maximum(tf.shape(source)[1], tf.shape(target_in)[1])
        index = tf.minimum(tf.searchsorted(widths_t, tf.reshape(longest, [1]), side="left")[0], len(widths) - 1)
        width = tf.maximum(widths_t[index], longest)
        rows = batch_tokens // width
        rows = tf.maximum((rows + num_replicas - 1) // num_replicas * num_replicas, tf.shape(source)[0])

        def to(ids):
            return tf.pad(ids, [[0, rows - tf.shape(ids)[0]], [0, width - tf.shape(ids)[1]]])

        return (to(source), to(target_in)), to(target_out)

    return dataset.map(pad, num_parallel_calls=tf.data.AUTOTUNE)


class TimeBudget(keras.callbacks.Callback):
    """Stops training after ``seconds`` of wall time, at the end of a batch.

    Args:
        seconds: the budget in seconds (wall clock, from the start of ``fit``).
        excluded: a function returning seconds not to count (e.g. the time
            spent translating for validation BLEU), or None.
    """

    def __init__(self, seconds: float, excluded=None):
        super().__init__()
        self.seconds = float(seconds)
        self.excluded = excluded
        self._start = None
        self.stopped_early = False

    def on_train_begin(self, logs=None):
        if self._start is None:
            self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        spent = time.monotonic() - self._start - (self.excluded() if self.excluded is not None else 0.0)
        if spent >= self.seconds:
            self.stopped_early = True
            self.model.stop_training = True


def with_known_length(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """``dataset`` with its number of batches asserted (counted once when unknown).

    Keras 3.15 ends an epoch of unknown length by calling the train function
    once more until the iterator raises ``OutOfRange``; the optimizer's
    iteration counter, which has no data input, is still incremented in that
    call, so ``optimizer.iterations`` (and Eq. 3) gains a phantom step per
    epoch. A known length makes Keras stop at the last batch. Counting costs
    one pass of the input pipeline (no training).

    Args:
        dataset: a finite ``tf.data.Dataset``.

    Returns:
        The dataset with a known ``cardinality``.

    Raises:
        ValueError: for an infinite dataset.
    """
    cardinality = int(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        raise ValueError("train_data must be finite (one pass = one epoch); do not .repeat() it")
    if cardinality >= 0:
        return dataset
    count = int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
    return dataset.apply(tf.data.experimental.assert_cardinality(count))


def _merge_histories(first, second):
    if first is None:
        return second
    for key, values in second.history.items():
        first.history.setdefault(key, []).extend(values)
    first.epoch.extend(second.epoch)
    return first


def fit(
    model: keras.Model,
    train_data,
    *,
    model_dir: str | os.PathLike,
    epochs: int,
    validation_data: tf.data.Dataset | None = None,
    save_freq: int | None = None,
    keep_checkpoints: int = 5,
    max_train_seconds: float | None = None,
    tensorboard: bool = True,
    callbacks: list | None = None,
    verbose: int | str = "auto",
    validation_bleu: keras.callbacks.Callback | None = None,
    early_stopping: keras.callbacks.Callback | None = None,
) -> keras.callbacks.History:
    """Runs ``model.fit`` with the project's callbacks; re-running the same call after a kill resumes.

    ``model_dir`` receives ``checkpoints/`` (:class:`~keras_transformer.training.checkpoints.ResumableCheckpoint`:
    ``ckpt-<step>.weights.h5`` every ``save_freq`` batches and at each epoch
    end, the last ``keep_checkpoints`` kept for averaging, Section 6.1, and
    ``state.json``), ``best.weights.h5`` (best validation loss, when
    ``validation_data`` is given) and ``logs/`` (TensorBoard).
    ``TerminateOnNaN`` stops a diverging run. On a re-run the latest
    checkpoint is restored (weights, optimizer state and step) and training
    continues in the same epoch after the batches already trained (the first,
    partial epoch skips them), so no epoch restarts from zero. With
    ``TF_CONFIG``, workers other than the chief write to
    ``model_dir/worker-<index>/`` (every worker must save and restore).

    Exact resumption: with an :class:`~keras_transformer.data.epochs.EpochBatches`
    (:func:`~keras_transformer.data.pipeline.make_epoch_batches` in memory,
    :func:`~keras_transformer.data.streaming.make_streaming_batches` from
    prepared shards) every epoch's batches are rebuilt from ``(seed,
    epoch)``, so the resumed run trains on exactly the batches the
    uninterrupted run would have, from the step after the checkpoint on. A
    plain ``tf.data.Dataset`` that reshuffles at each iteration restarts from
    its first permutation in a new process (its epochs then differ from an
    uninterrupted run's, though no batch of the resumed epoch is repeated).

    With ``validation_bleu`` (a :class:`~keras_transformer.training.validation.ValidationBLEU`)
    the model is also translated and scored during training, and the best
    model by validation BLEU is kept (``best_bleu.weights.h5``); its time is
    left out of ``max_train_seconds``. With ``early_stopping`` (an
    :class:`~keras_transformer.training.validation.EarlyStopping`) training
    stops after its patience, and a re-run of a stopped run trains nothing.

    Args:
        model: a compiled Transformer (see :func:`compile_model`).
        train_data: an :class:`~keras_transformer.data.epochs.EpochBatches`,
            or finite batches ``((source_ids, target_in_ids), target_out_ids)``
            (one pass = one epoch, in a deterministic order for the mid-epoch
            skip to skip the batches already trained).
        model_dir: where checkpoints and logs go (created).
        epochs: passes over ``train_data``.
        validation_data: batches in the same format, or ``None``.
        save_freq: checkpoint every this many batches (``None``: per epoch).
        keep_checkpoints: newest checkpoints kept (``config.checkpoint_average``).
        max_train_seconds: stop after this wall time (``None``: no limit).
        tensorboard: write TensorBoard logs.
        callbacks: further Keras callbacks (they see ``val_bleu``/``val_chrf``
            in the epoch logs when ``validation_bleu`` is given).
        verbose: passed to ``model.fit``.
        validation_bleu: a ``ValidationBLEU`` callback, or None.
        early_stopping: an ``EarlyStopping`` callback (on ``val_loss``, or on
            ``val_bleu``/``val_chrf`` fed by ``validation_bleu``), or None.

    Returns:
        The Keras ``History`` (merged over the partial and the full epochs).

    Raises:
        keras_transformer.data.prepared.PreparedDataError: when reading a
            prepared shard fails its checksum (the shard is named).
    """
    from keras_transformer.data.epochs import EpochBatches

    model_dir = task_dir(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    ckpt_dir = model_dir / "checkpoints"
    ckpt_dir.mkdir(exist_ok=True)
    by_epoch = isinstance(train_data, EpochBatches)
    if not by_epoch:
        train_data = with_known_length(train_data)
    if isinstance(validation_data, tf.data.Dataset):  # else Keras warns "ran out of data" after the first evaluation
        validation_data = with_known_length(validation_data)
    state = ckpt.restore(model, ckpt_dir)
    start_epoch, skip, batches = (state.epoch, state.batch, state.batches) if state else (0, 0, 0)
    if by_epoch and skip >= train_data.steps_per_epoch:  # killed between the last batch's and the epoch's checkpoint
        start_epoch, skip = start_epoch + 1, 0

    saver = ckpt.ResumableCheckpoint(ckpt_dir, save_freq=save_freq, keep=keep_checkpoints, initial_batches=batches, batch_offset=skip)
    cbs = [keras.callbacks.TerminateOnNaN(), saver]
    if validation_data is not None:
        cbs.append(ckpt.BestCheckpoint(model_dir / "best.weights.h5"))
    if tensorboard:
        cbs.append(keras.callbacks.TensorBoard(str(model_dir / "logs"), write_graph=False))
    # After Keras' TensorBoard (which would log val_bleu a second time, per epoch), before the user's callbacks.
    cbs.extend(cb for cb in (validation_bleu, early_stopping) if cb is not None)
    if early_stopping is not None:
        step = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
        early_stopping.restore(step)
        if early_stopping.exhausted:
            best = early_stopping.best
            print(
                f"early stopping: this run stopped at step {step} ({early_stopping.monitor} did not improve in "
                f"{early_stopping.patience} evaluations after its best"
                + (f", {best['value']:.4g} at step {best['step']}" if best else "")
                + "); nothing more to train",
                flush=True,
            )
            history = keras.callbacks.History()
            history.set_model(model)
            return history
    excluded = (lambda: validation_bleu.seconds) if validation_bleu is not None else None
    budget = TimeBudget(max_train_seconds, excluded) if max_train_seconds is not None else None
    if budget is not None:
        cbs.append(budget)
    cbs.extend(callbacks or [])

    def budget_spent() -> bool:
        if budget is None or not budget.stopped_early:
            return False
        # Keras' epoch line still shows the epoch's full batch count; say where training really stopped.
        epoch, batch = saver.position
        print(
            f"time budget of {budget.seconds / 60:g} min reached after batch {batch} of epoch {epoch + 1} "
            "(checkpointed; re-running the same command continues from there)",
            flush=True,
        )
        return True

    def run(first: int, stop: int, skipped: int):
        if by_epoch:
            data = train_data.for_fit(model.distribute_strategy, first, stop, skipped)
            steps = train_data.steps_per_epoch - skipped
        else:
            data, steps = (train_data.skip(skipped) if skipped else train_data), None
        try:
            return model.fit(data, validation_data=validation_data, initial_epoch=first, epochs=stop,
                             steps_per_epoch=steps, callbacks=cbs, verbose=verbose)
        except tf.errors.DataLossError:
            if by_epoch:
                train_data.check_data()  # raises naming the damaged file
            raise

    history = None
    if skip and start_epoch < epochs:
        history = run(start_epoch, start_epoch + 1, skip)
        start_epoch += 1
        if budget_spent() or model.stop_training:
            return history
    if start_epoch < epochs:
        history = _merge_histories(history, run(start_epoch, epochs, 0))
        budget_spent()
    if history is None:
        history = keras.callbacks.History()
        history.set_model(model)
    return history
