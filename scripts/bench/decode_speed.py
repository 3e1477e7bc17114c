"""Decoding speed: uncached greedy baseline vs cached greedy vs beam search, XLA off / on.

One run on the same sentences (the first ``--sentences`` lines of Multi30k
test2016.en, batches of ``--batch-size``) of a trained model; prints for every
mode sentences/s, target tokens/s (output tokens of the best hypothesis,
EOS included) and the ratio against (a):

(a) ``uncached greedy``: tutorial-style greedy decoding that reruns
    ``model.decode`` on the whole prefix at every step (encoder run once,
    ``tf.function`` with a growing prefix, no key/value cache);
(b) ``cached greedy``: :meth:`Translator._greedy_core` (key/value cache,
    Section 3.2.3; graph mode: growing cache, shrinking batch) and
    ``_greedy_core_xla`` (static shapes);
(c) ``beam``: :meth:`Translator._beam_core` (beam 4, alpha 0.6, Section 6.1)
    and ``_beam_core_xla``.

Tokenization is done once before timing (every mode decodes the same
``source_ids``). Each mode first runs on the first batch (``warm-up``: tracing,
and the XLA compile of that shape); the timed pass then decodes every batch
(an XLA compile for a shape not seen yet is inside the timed pass and reported
by the ``compiles`` column). Identity checks: (a) == (b) tokens, (b) eager
graph == (b) XLA, (c) graph == (c) XLA.

    python scripts/bench/decode_speed.py --model runs/multi30k/model.keras \
        --spm runs/multi30k/spm.model --sentences 256
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.data import SubwordTokenizer  # noqa: E402
from keras_transformer.decoding import Translator  # noqa: E402


def uncached_greedy_fn(model, eos_id: int, bos_id: int):
    """Tutorial-style greedy decoder: ``model.decode`` over the whole prefix at every step.

    Same stopping rules as :func:`greedy_search` (EOS kept, 0 after, EOS forced
    at ``max_decode_lengths``), so its tokens must equal the cached search's.

    Returns:
        a ``tf.function(source_ids [B, S] int32, max_decode_lengths [B] int32)
        -> ids [B, T] int32`` (``T`` = steps run).
    """

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)])
    def decode(source_ids, limits):
        batch = tf.shape(source_ids)[0]
        encoder_outputs = model.encode(source_ids, training=False)
        prefix = tf.fill([batch, 1], tf.constant(bos_id, tf.int32))
        finished = tf.zeros([batch], tf.bool)
        max_steps = tf.reduce_max(limits)

        def cond(step, prefix, finished):
            return tf.logical_and(step < max_steps, tf.logical_not(tf.reduce_all(finished)))

        def body(step, prefix, finished):
            logits = model.decode(prefix, encoder_outputs, source_ids, training=False)[:, -1, :]
            next_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
            next_ids = tf.where(step + 1 >= limits, tf.constant(eos_id, tf.int32), next_ids)
            next_ids = tf.where(finished, tf.zeros_like(next_ids), next_ids)
            finished = tf.logical_or(finished, tf.equal(next_ids, eos_id))
            return step + 1, tf.concat([prefix, next_ids[:, None]], axis=1), finished

        _, prefix, _ = tf.while_loop(
            cond, body, (tf.constant(0), prefix, finished),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None]), tf.TensorShape([None])),
        )
        return prefix[:, 1:]

    return decode


def _best(out):
    """int32 numpy [B, T] of the best hypothesis (beam output [B, beam, T] -> beam 0)."""
    ids = out[0] if isinstance(out, tuple) else out
    ids = ids.numpy()
    return ids[:, 0, :] if ids.ndim == 3 else ids


def _trim(ids, width):
    out = np.zeros((ids.shape[0], width), np.int32)
    w = min(width, ids.shape[1])
    out[:, :w] = ids[:, :w]
    return out


def run_mode(name, fn, batches, compile_counter=None):
    """Warm-up on batch 0, then one timed pass over every batch. Returns a result dict."""
    start = time.perf_counter()
    _best(fn(*batches[0]))
    warm = time.perf_counter() - start
    before = compile_counter() if compile_counter else 0
    outputs = []
    start = time.perf_counter()
    for source_ids, limits in batches:
        outputs.append(_best(fn(source_ids, limits)))
    seconds = time.perf_counter() - start
    compiles = (compile_counter() - before) if compile_counter else 0
    sentences = sum(o.shape[0] for o in outputs)
    tokens = sum(int(np.count_nonzero(o)) for o in outputs)
    return dict(name=name, warm=warm, seconds=seconds, sentences=sentences, tokens=tokens,
                outputs=outputs, compiles=compiles)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="runs/multi30k/model.keras", help="a trained model (from `run`)")
    parser.add_argument("--spm", default="runs/multi30k/spm.model", help="its SentencePiece model")
    parser.add_argument("--source", default=os.path.join(
        os.environ.get("KERAS_TRANSFORMER_DATA", "../shared/data"), "multi30k", "test2016.en"))
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--length-penalty", type=float, default=0.6)
    parser.add_argument("--extra-decode-length", type=int, default=50)
    parser.add_argument("--max-length", type=int, default=None, help="default: the model's max_length")
    parser.add_argument("--modes", default="a,b,b-xla,c,c-xla",
                        help="comma-separated subset of a, b, b-xla, c, c-xla")
    args = parser.parse_args(argv)

    model = keras.saving.load_model(args.model)
    tokenizer = SubwordTokenizer(args.spm)
    max_length = args.max_length or model.max_length
    with open(args.source, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f][: args.sentences]
    kwargs = dict(max_length=max_length, extra_decode_length=args.extra_decode_length,
                  beam_size=args.beam_size, length_penalty=args.length_penalty)
    plain = Translator(model, tokenizer, **kwargs)
    xla = Translator(model, tokenizer, jit_compile=True, **kwargs)
    batches = []
    for i in range(0, len(lines), args.batch_size):
        inputs = plain.source_ids(tf.constant(lines[i: i + args.batch_size]))
        batches.append((inputs["source_ids"], inputs["max_decode_lengths"]))
    widths = [int(s.shape[1]) for s, _ in batches]
    print(f"{len(lines)} sentences in {len(batches)} batches of {args.batch_size}, source widths {widths}; "
          f"beam {args.beam_size}, alpha {args.length_penalty}, max_length {max_length}, "
          f"extra_decode_length {args.extra_decode_length}; tf {tf.__version__}, keras {keras.__version__}, "
          f"{os.cpu_count()} CPUs", flush=True)

    def xla_counter(fn):
        # Distinct input shapes seen by the inner XLA function (one compile each).
        seen = set()
        def call(source_ids, limits):
            seen.add(tuple(source_ids.shape))
            return fn(source_ids, limits)
        call.count = lambda: len(seen)
        return call

    modes = {
        "a": ("(a) uncached greedy (tutorial)", uncached_greedy_fn(model, plain.eos_id, plain.bos_id), None),
        "b": ("(b) cached greedy", plain._greedy_core, None),
        "b-xla": ("(b) cached greedy, XLA", xla_counter(xla._greedy_core_xla), True),
        "c": (f"(c) beam {args.beam_size}", plain._beam_core, None),
        "c-xla": (f"(c) beam {args.beam_size}, XLA", xla_counter(xla._beam_core_xla), True),
    }
    results = {}
    for key in args.modes.split(","):
        label, fn, is_xla = modes[key]
        counter = None
        if is_xla:
            fn.count()  # noqa: B018
            counter = fn.count
        results[key] = run_mode(label, fn, batches, counter)
        r = results[key]
        print(f"  done {label}: {r['seconds']:.1f} s (warm-up {r['warm']:.1f} s)", flush=True)

    base = results.get("a")
    print(f"\n{'mode':34s} {'warm-up s':>9s} {'timed s':>8s} {'compiles':>8s} {'sent/s':>8s} "
          f"{'tokens/s':>9s} {'x (a)':>7s}")
    for key, r in results.items():
        sps, tps = r["sentences"] / r["seconds"], r["tokens"] / r["seconds"]
        ratio = f"{sps / (base['sentences'] / base['seconds']):.1f}" if base else "-"
        compiles = str(r["compiles"]) if key.endswith("xla") else "-"
        print(f"{r['name']:34s} {r['warm']:9.1f} {r['seconds']:8.1f} {compiles:>8s} {sps:8.2f} {tps:9.1f} {ratio:>7s}")

    def same(k1, k2):
        if k1 not in results or k2 not in results:
            return
        equal = all(np.array_equal(_trim(x, max_length), _trim(y, max_length))
                    for x, y in zip(results[k1]["outputs"], results[k2]["outputs"]))
        rows = sum(o.shape[0] for o in results[k1]["outputs"])
        diff = sum(int(np.any(_trim(x, max_length) != _trim(y, max_length), axis=1).sum())
                   for x, y in zip(results[k1]["outputs"], results[k2]["outputs"]))
        print(f"identical tokens {k1} vs {k2}: {equal} ({diff}/{rows} sentences differ)")

    print()
    same("a", "b")
    same("b", "b-xla")
    same("c", "c-xla")


if __name__ == "__main__":
    main()
