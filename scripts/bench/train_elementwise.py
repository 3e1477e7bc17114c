"""The training step's two largest elementwise costs, ours against Keras' own, alternated in one run.

* **loss**: forward and backward of the label-smoothed cross-entropy on logits
  of the ``compact`` recipe's shape (``[--tokens, --vocab]``, bfloat16):
  :func:`keras_transformer.training.token_losses` against Keras'
  ``CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)`` on
  one-hot targets (automatic differentiation of the same formula).
* **dropout**: forward and backward of :class:`keras_transformer.layers.Dropout`
  (16-bit draws) against ``keras.layers.Dropout`` (one float draw per
  element) on ``[--tokens, d_model]`` bfloat16 activations, 20 in a chain.

Each is a ``tf.function`` run ``--repeats`` times per round, the two sides
alternated over ``--rounds`` rounds; the table gives the median ms per call
and ours / Keras'. Run it on an otherwise idle machine:

    python scripts/bench/train_elementwise.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402,F401  (sets sys.path to the repository, oneDNN as training has it)
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.layers import Dropout  # noqa: E402
from keras_transformer.training import token_losses  # noqa: E402


def loss_functions(tokens: int, vocab: int, eps: float) -> dict:
    """``{"ours": f, "keras": f}``: each returns the gradient of the summed loss w.r.t. bfloat16 logits."""
    generator = tf.random.Generator.from_seed(0)
    logits = tf.cast(generator.normal([1, tokens, vocab]) * 3.0, tf.bfloat16)
    targets = generator.uniform([1, tokens], 0, vocab, tf.int32)
    keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=eps, reduction="sum")

    def ours(z):
        return tf.reduce_sum(token_losses(targets, z, eps))

    def theirs(z):
        return keras_loss(tf.one_hot(targets, vocab), tf.cast(z, tf.float32))

    return {name: _gradient_function(fn, logits) for name, fn in (("ours", ours), ("keras", theirs))}


def dropout_functions(tokens: int, d_model: int, rate: float, chain: int = 20) -> dict:
    """``{"ours": f, "keras": f}``: ``chain`` dropouts in a row on bfloat16 activations, forward and backward."""
    x = tf.cast(tf.random.stateless_normal([tokens, d_model], seed=[1, 2]), tf.bfloat16)
    layers = {"ours": Dropout(rate, seed=1, dtype="mixed_bfloat16"),
              "keras": keras.layers.Dropout(rate, seed=1, dtype="mixed_bfloat16")}

    def chained(layer):
        def fn(y):
            for _ in range(chain):
                y = layer(y, training=True)
            return tf.reduce_sum(tf.cast(y, tf.float32))
        return fn

    return {name: _gradient_function(chained(layer), x) for name, layer in layers.items()}


def _gradient_function(fn, x):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = fn(x)
        return tape.gradient(value, x)
    return step


def timed(fn, repeats: int) -> float:
    """Seconds per call of ``fn`` over ``repeats`` calls (results fetched)."""
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn()
    out.numpy()
    return (time.perf_counter() - start) / repeats


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096, help="positions per batch (the recipe's 4,096-token batches)")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    cases = {"label-smoothed loss": loss_functions(args.tokens, args.vocab, 0.1),
             "dropout x20": dropout_functions(args.tokens, args.d_model, 0.2)}
    for functions in cases.values():
        for fn in functions.values():
            fn()  # trace
    times = {case: {name: [] for name in functions} for case, functions in cases.items()}
    for _ in range(args.rounds):
        for case, functions in cases.items():
            for name, fn in functions.items():
                times[case][name].append(timed(fn, args.repeats))
    print(f"{'forward + backward, bfloat16':32s} {'ours ms':>8s} {'Keras ms':>9s} {'ours/Keras':>11s}")
    for case, by_name in times.items():
        ours, theirs = statistics.median(by_name["ours"]), statistics.median(by_name["keras"])
        print(f"{case:32s} {ours * 1000:8.1f} {theirs * 1000:9.1f} {ours / theirs:11.2f}")
    print(f"shapes: logits [{args.tokens}, {args.vocab}], activations [{args.tokens}, {args.d_model}]; "
          f"median of {args.rounds} alternated rounds of {args.repeats} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
