"""Shared set-up of the benchmarks: Multi30k train ids, batch lists, timed ``model.fit`` runs.

Not a benchmark itself; imported by input_pipeline.py and train_throughput.py.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from keras_transformer.runtime import default_onednn  # noqa: E402

# Training benchmarks run TensorFlow as the command line's training does (before TensorFlow loads).
ONEDNN = default_onednn()

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.data import SubwordTokenizer, load_multi30k, prepare_pairs, train_sentencepiece  # noqa: E402


def load_prepared(data_dir: str | None, vocab_size: int, max_length: int):
    """Multi30k train -> shared SentencePiece (unigram) -> prepared ids. Prints what it did."""
    pairs = load_multi30k("train", data_dir=data_dir, download=False)
    with tempfile.TemporaryDirectory() as directory:
        start = time.perf_counter()
        tokenizer = SubwordTokenizer(train_sentencepiece([pairs.sources, pairs.targets], directory, vocab_size=vocab_size))
        print(f"SentencePiece unigram vocab {tokenizer.vocab_size} trained in {time.perf_counter() - start:.1f} s")
    prepared = prepare_pairs(pairs.sources, pairs.targets, tokenizer, max_length=max_length)
    print(f"train: {prepared.report.summary()}")
    return prepared, tokenizer


def as_numpy(dataset, limit: int | None = None) -> list:
    """Batches of ``dataset`` (``((source, target_in), target_out)``) as numpy arrays."""
    out = []
    for (source, target_in), target_out in dataset:
        out.append(((source.numpy(), target_in.numpy()), target_out.numpy()))
        if limit is not None and len(out) >= limit:
            break
    return out


def real_tokens(batches, side: str = "target") -> int:
    """Non-padding tokens of target_out (``"target"``) or of source + target_out (``"both"``)."""
    total = sum(int(np.count_nonzero(y)) for _, y in batches)
    if side == "both":
        total += sum(int(np.count_nonzero(x[0])) for x, _ in batches)
    return total


def slots(batches) -> tuple[int, int]:
    """(real tokens, token slots) of both sides."""
    real = real_tokens(batches, "both")
    return real, sum(x[0].size + y.size for x, y in batches)


def list_dataset(batches) -> tf.data.Dataset:
    """A dataset yielding ``batches`` (any shapes) with a known length."""
    spec = ((tf.TensorSpec([None, None], tf.int32),) * 2, tf.TensorSpec([None, None], tf.int32))
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(2)


class _BatchClock(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:
            self.begin = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


def timed_fit(model, batches, warm: int = 1) -> dict:
    """Trains one pass over ``batches`` with ``model.fit``; times the steps after the first ``warm``.

    Returns:
        dict with ``seconds`` (of the timed steps), ``steps``, ``target_tokens``
        (real target tokens of the timed steps), ``tokens_per_second`` and
        ``step_seconds`` (every step, the first one measured from the start of
        the first batch).
    """
    clock = _BatchClock()
    model.fit(list_dataset(batches), epochs=1, verbose=0, callbacks=[clock])
    ends = clock.ends
    step_seconds = [ends[0] - clock.begin] + [b - a for a, b in zip(ends, ends[1:])]
    timed = batches[warm:]
    seconds = ends[-1] - ends[warm - 1] if warm else ends[-1] - clock.begin
    tokens = real_tokens(timed)
    return dict(seconds=seconds, steps=len(timed), target_tokens=tokens, tokens_per_second=tokens / seconds,
                step_seconds=step_seconds)
