"""Helper processes for the training tests (each needs a fresh TensorFlow).

Usage: ``python tests/training/_workers.py MODE OUT_JSON [options]``. Modes:

* ``mirrored``: two logical CPU devices; trains the tiny Transformer a few
  steps under ``MirroredStrategy`` with XLA, then the same model on one device
  on the same global batches; writes both loss lists and weight differences.
* ``worker``: one task of a ``MultiWorkerMirroredStrategy`` cluster
  (``TF_CONFIG`` set by the caller), or a single process without it.
* ``mirrored_bleu``: two logical CPU devices; ``training.fit`` of the tiny
  Transformer on real Multi30k pairs under ``MirroredStrategy`` with
  validation BLEU every 3 steps; then the same sentences translated by a
  single-device copy of the final weights and scored with ``score_corpus``;
  then a second run with validation loss and a scripted validation BLEU
  every 2 steps feeding early stopping (patience 2), recording the weights
  at each evaluation and epoch end, and the best-by-BLEU and best-by-loss
  weights reloaded on one device.
  Needs ``KERAS_TRANSFORMER_DATA`` (the folder holding ``multi30k/``).
* ``resume``: ``training.fit`` with checkpoints every step; logs each batch
  (epoch, batch, optimizer step) to ``OUT_JSON`` lines; sleeps per batch so a
  test can kill it mid-epoch.
* ``stream PREPARED_DIR MODEL_DIR EPOCHS BATCH_TOKENS [WIDTHS]``: ``training.fit`` on
  batches streamed from a prepared folder (one worker, or a task of the
  ``TF_CONFIG`` cluster), checkpoints every step; a probe logs every batch the
  training consumes (position, the hashes of its real pairs) and a callback
  every step to ``OUT_JSON`` lines; sleeps ``WORKER_SLEEP`` seconds per step.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

MODE, OUT = sys.argv[1], sys.argv[2]
if MODE == "stream" and "TF_CONFIG" in os.environ:
    # MultiWorkerMirroredStrategy must exist before TensorFlow runs any op.
    STRATEGY = tf.distribute.MultiWorkerMirroredStrategy()
if MODE in ("mirrored", "mirrored_bleu"):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402

from keras_transformer import training  # noqa: E402
from keras_transformer.config import get_preset  # noqa: E402

keras.config.disable_traceback_filtering()
CONFIG = get_preset("tiny", warmup_steps=2)


def uneven_batches(steps: int, batch: int = 8, length: int = 9, seed: int = 0):
    """Global batches whose two halves hold very different numbers of real target tokens."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        src = rng.integers(4, CONFIG.vocab_size, (batch, length)).astype("int32")
        tgt = rng.integers(4, CONFIG.vocab_size, (batch, length + 1)).astype("int32")
        src_len = rng.integers(2, length + 1, batch)
        tgt_len = np.where(np.arange(batch) < batch // 2, 2, length + 1)  # first half: 2 tokens, second: 10
        for i in range(batch):
            src[i, src_len[i]:] = 0
            tgt[i, tgt_len[i]:] = 0
        tgt_in = np.concatenate([np.full((batch, 1), 2, "int32"), tgt[:, :-1]], axis=1)
        tgt_in[tgt == 0] = 0
        out.append(((src, tgt_in), tgt))
    return out


def as_dataset(batches):
    def gen():
        yield from batches

    spec = ((tf.TensorSpec([None, None], tf.int32),) * 2, tf.TensorSpec([None, None], tf.int32))
    return tf.data.Dataset.from_generator(gen, output_signature=spec)


class StepLosses(keras.callbacks.Callback):
    """Records the loss of each step from the running mean Keras reports."""

    def __init__(self):
        super().__init__()
        self.means = []

    def on_train_batch_end(self, batch, logs=None):
        self.means.append(float(logs["loss"]))


def train(strategy, batches, jit_compile, epochs=1):
    with strategy.scope():
        keras.utils.set_random_seed(7)
        model = training.build_model(CONFIG)
        training.compile_model(model, CONFIG, jit_compile=jit_compile)
    recorder = StepLosses()
    model.fit(as_dataset(batches), epochs=epochs, verbose=0, callbacks=[recorder])
    # Per-step losses from the running means: l_k = k*m_k - (k-1)*m_{k-1}.
    means = recorder.means
    losses = [means[0]] + [(k + 1) * means[k] - k * means[k - 1] for k in range(1, len(means))]
    return model, losses


def pair_hashes(source, target_out):
    """sha1 (16 hex digits) of each real row's (source ids, target ids); all-padding rows are left out."""
    import hashlib

    out = []
    for s, t in zip(source, target_out):
        if (t != 0).any():
            key = np.concatenate([s[s != 0], [-1], t[t != 0]]).astype("<i4").tobytes()
            out.append(hashlib.sha1(key).hexdigest()[:16])
    return out


def stream(prepared_dir, model_dir, epochs, batch_tokens, widths=None):
    from keras_transformer.data.epochs import EpochBatches
    from keras_transformer.data.prepared import open_prepared

    strategy = STRATEGY if "TF_CONFIG" in os.environ else tf.distribute.get_strategy()
    keras.utils.set_random_seed(7)
    corpus = open_prepared(prepared_dir)
    widths = [int(w) for w in widths.split(",")] if widths else None  # few buckets: few steps per epoch
    inner = corpus.epoch_batches(batch_tokens=int(batch_tokens), seed=11, strategy=strategy, shuffle_buffer_size=64,
                                 cycle_length=2, widths=widths)
    worker = inner.layout.worker_index

    def log(record):
        with open(OUT, "a") as f:
            f.write(json.dumps(dict(record, pid=os.getpid(), worker=worker)) + "\n")

    class Probed(EpochBatches):
        """The streaming batches, with every batch the training takes logged as it is taken."""

        per_replica, layout = inner.per_replica, inner.layout

        @property
        def steps_per_epoch(self):
            return inner.steps_per_epoch

        def epoch_dataset(self, epoch, worker_index=0):
            return inner.epoch_dataset(epoch, worker_index)

        def dataset(self, first_epoch, stop_epoch, skip=0, worker_index=0):
            def record(position, source, target_out):
                log({"first_epoch": first_epoch, "skip": skip, "position": int(position),
                     "pairs": pair_hashes(source.numpy(), target_out.numpy())})
                return position

            def probe(position, batch):
                (source, target_in), target_out = batch
                done = tf.py_function(record, [position, source, target_out], tf.int64)
                with tf.control_dependencies([done]):
                    return (tf.identity(source), tf.identity(target_in)), tf.identity(target_out)

            base = inner.dataset(first_epoch, stop_epoch, skip, worker_index)
            return base.enumerate().map(probe).apply(tf.data.experimental.assert_cardinality(base.cardinality()))

        def check_data(self):
            inner.check_data()

    config = get_preset("tiny", warmup_steps=2, vocab_size=corpus.manifest["vocabulary"]["vocab_size"],
                        max_length=corpus.max_length)
    with strategy.scope():
        model = training.build_model(config)
        training.compile_model(model, config, jit_compile=False)

    class Log(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            log({"epoch": self.epoch, "step": step})
            time.sleep(float(os.environ.get("WORKER_SLEEP", "0")))

    training.fit(model, Probed(), model_dir=model_dir, epochs=int(epochs), save_freq=1, keep_checkpoints=2,
                tensorboard=False, callbacks=[Log()], verbose=0)
    log({"done": True, "steps_per_epoch": inner.steps_per_epoch,
         "step": int(keras.ops.convert_to_numpy(model.optimizer.iterations))})


def main():
    result = {}
    if MODE == "mirrored":
        batches = uneven_batches(4)
        strategy = training.get_strategy("mirrored")
        result["replicas"] = strategy.num_replicas_in_sync
        m2, l2 = train(strategy, batches, jit_compile=True)
        result["replica_traces"] = m2.replica_gradients.experimental_get_tracing_count()
        m1, l1 = train(tf.distribute.OneDeviceStrategy("/cpu:0"), batches, jit_compile=False)
        result["mirrored_losses"], result["single_losses"] = l2, l1
        # Gradients of one global batch: summed over the two replicas vs one device.
        (src, tin), tout = batches[0]
        m1.set_weights(m2.get_weights())
        dist = strategy.experimental_distribute_dataset(as_dataset(batches[:1]))

        def replica_fn(data):
            x, y = data
            count = tf.reduce_sum(tf.cast(tf.not_equal(y, 0), tf.float32))
            ctx = tf.distribute.get_replica_context()
            loss, grads, _ = m2.replica_gradients(x, y, ctx.all_reduce("sum", count))
            return loss, grads, count

        loss2, grads2, counts = strategy.run(tf.function(replica_fn), args=(next(iter(dist)),))
        result["replica_counts"] = [float(c) for c in strategy.experimental_local_results(counts)]
        loss2 = float(strategy.reduce("SUM", loss2, axis=None))
        grads2 = [strategy.reduce("SUM", g, axis=None).numpy() for g in grads2]
        count = float(np.sum(tout != 0))
        loss1, grads1, _ = m1.replica_gradients((tf.constant(src), tf.constant(tin)), tf.constant(tout), tf.constant(count))
        result["grad_loss_mirrored"], result["grad_loss_single"] = loss2, float(loss1)
        result["max_grad_diff"] = max(float(np.max(np.abs(a - b.numpy()))) for a, b in zip(grads2, grads1))
        result["max_grad"] = max(float(np.max(np.abs(b.numpy()))) for b in grads1)
    elif MODE == "worker":
        batches = uneven_batches(3)
        strategy = training.get_strategy("multi_worker" if "TF_CONFIG" in os.environ else "default")
        result["replicas"] = strategy.num_replicas_in_sync
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        with strategy.scope():
            keras.utils.set_random_seed(7)
            model = training.build_model(CONFIG)
            training.compile_model(model, CONFIG, jit_compile=True)
        recorder = StepLosses()
        model.fit(as_dataset(batches).with_options(options), epochs=1, verbose=0, callbacks=[recorder])
        result["losses"] = recorder.means
        result["weights_sum"] = float(sum(np.sum(w.numpy().astype(np.float64)) for w in model.trainable_weights))
        # Loss of the final weights (the last update is not in the training losses).
        result["final_loss"] = float(model.evaluate(as_dataset(batches[:1]).with_options(options), verbose=0, return_dict=True)["loss"])
        np.savez(OUT + ".npz", *[w.numpy() for w in model.trainable_weights])
    elif MODE == "mirrored_bleu":
        import itertools
        import pathlib

        from keras_transformer.data.pipeline import make_dataset, prepare_pairs
        from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece
        from keras_transformer.decoding.corpus import translate_lines
        from keras_transformer.decoding.translator import Translator
        from keras_transformer.evaluation import score_corpus
        from keras_transformer.training.validation import ValidationBLEU

        model_dir = pathlib.Path(sys.argv[3])
        data = pathlib.Path(os.environ["KERAS_TRANSFORMER_DATA"]) / "multi30k"

        def lines(name, n):
            with open(data / name, encoding="utf-8") as f:
                return [line.rstrip("\n") for line in itertools.islice(f, n)]

        train_src, train_tgt = lines("train.en", 300), lines("train.de", 300)
        valid_src, valid_ref = lines("val.en", 10), lines("val.de", 10)
        spm = train_sentencepiece(train_src + train_tgt, model_dir / "spm", vocab_size=300)
        keras.utils.set_random_seed(7)
        tokenizer = SubwordTokenizer(spm)
        config = get_preset("tiny", vocab_size=tokenizer.vocab_size, warmup_steps=10)
        strategy = training.get_strategy("mirrored")
        result["replicas"] = strategy.num_replicas_in_sync
        prepared = prepare_pairs(train_src, train_tgt, tokenizer, config.max_length)
        dataset = make_dataset(prepared, batch_tokens=config.batch_tokens, padding="fixed", shuffle=False,
                               num_replicas=2).take(6)
        with strategy.scope():
            model = training.build_model(config)
            training.compile_model(model, config, jit_compile=False, learning_rate_scale=0.02)
        callback = ValidationBLEU(valid_src, valid_ref, tokenizer, config, every_steps=3, model_dir=model_dir)
        training.fit(model, dataset, model_dir=model_dir, epochs=1, verbose=0, validation_bleu=callback)
        result["evaluations"] = callback.evaluations
        result["callback_hypotheses"] = callback.hypotheses
        result["step"] = int(model.optimizer.iterations.numpy())
        result["variable_type"] = type(model.trainable_variables[0].value).__name__
        single = training.build_model(config)  # outside the strategy: one device
        single.set_weights(model.get_weights())
        translator = Translator(single, tokenizer, max_length=config.max_length,
                                extra_decode_length=config.extra_decode_length, beam_size=1)
        hypotheses = translate_lines(translator.translate_greedy, valid_src, batch_size=64)
        scores = score_corpus(hypotheses, valid_ref)
        result["hypotheses"], result["bleu"], result["chrf"] = hypotheses, scores.bleu, scores.chrf
        result["best"] = json.loads((model_dir / "best_bleu.weights.h5.json").read_text())

        # Second run under the strategy: the best model by validation loss and by (scripted) BLEU, and early
        # stopping on BLEU, checked against the weights recorded at each evaluation and epoch end.
        from keras_transformer.evaluation import Scores
        from keras_transformer.training.validation import EarlyStopping

        weights_at = {}

        def record(step):
            weights_at[step] = [w.tolist() for w in model.get_weights()]

        class ScriptedBLEU(ValidationBLEU):
            def translate_and_score(self):
                record(int(self.model.optimizer.iterations.numpy()))
                bleu = next(scripted)
                return Scores(bleu, bleu / 2, "tok:13a", "chrF", len(self.sources)), [""] * len(self.sources)

        class EpochEnds(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                record(int(self.model.optimizer.iterations.numpy()))

        scripted = iter([5.0, 7.0, 6.0, 6.5, 99.0])
        stop_dir = model_dir / "stopping"
        with strategy.scope():
            model = training.build_model(config)
            training.compile_model(model, config, jit_compile=False, learning_rate_scale=0.02)
        valid = make_dataset(prepare_pairs(valid_src, valid_ref, tokenizer, config.max_length),
                             batch_tokens=config.batch_tokens, padding="fixed", num_replicas=2)
        stopping = EarlyStopping("val_bleu", patience=2, model_dir=stop_dir)
        callback = ScriptedBLEU(valid_src, valid_ref, tokenizer, config, every_steps=2, model_dir=stop_dir,
                                early_stopping=stopping, tensorboard=False)
        history = training.fit(model, dataset, model_dir=stop_dir, epochs=3, validation_data=valid, verbose=0,
                              validation_bleu=callback, early_stopping=stopping, callbacks=[EpochEnds()])
        result["stop_step"] = int(model.optimizer.iterations.numpy())
        result["stop_history"] = stopping.history
        result["stop_val_loss"] = history.history["val_loss"]
        result["stop_best_bleu"] = json.loads((stop_dir / "best_bleu.weights.h5.json").read_text())
        result["stop_best_loss"] = json.loads((stop_dir / "best.weights.h5.json").read_text())
        for name in ("best_bleu", "best"):
            single.load_weights(stop_dir / f"{name}.weights.h5")
            result[f"{name}_weights"] = [w.tolist() for w in single.get_weights()]
        result["weights_at"] = weights_at
    elif MODE == "resume":
        model_dir, epochs, steps = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        batches = uneven_batches(steps, seed=3)
        keras.utils.set_random_seed(7)
        model = training.build_model(CONFIG)
        training.compile_model(model, CONFIG, jit_compile=False)

        class Log(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.epoch = epoch

            def on_train_batch_end(self, batch, logs=None):
                step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
                with open(OUT, "a") as f:
                    f.write(json.dumps({"pid": os.getpid(), "epoch": self.epoch, "step": step}) + "\n")
                time.sleep(float(os.environ.get("WORKER_SLEEP", "0")))

        training.fit(model, as_dataset(batches), model_dir=model_dir, epochs=epochs, save_freq=1,
                    keep_checkpoints=3, tensorboard=True, callbacks=[Log()], verbose=0)
        with open(OUT, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "done": True,
                                "step": int(keras.ops.convert_to_numpy(model.optimizer.iterations))}) + "\n")
        return
    elif MODE == "stream":
        stream(*sys.argv[3:8])
        return
    else:
        raise ValueError(f"unknown mode {MODE!r}")
    with open(OUT, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
