"""Benchmark of the input pipeline on Multi30k train (Section 5.1 batching).

Measures, in one run and on the same prepared ids, (a) fixed batches of 64
sentences and (b) token batches bucketed by length: the fraction of padding
tokens (source + target slots) and the real tokens per second delivered by
``tf.data`` (best of ``--repeats`` full epochs, after one warm-up epoch), and
prints the ratio. Then, in the same run, the real tokens per second that the
training step of the ``small`` preset CONSUMES on the bucketed batches (a
model from ``training.build_model``/``compile_model``, ``--train-steps`` steps
after ``--warmup-steps``, XLA as ``compile_model``'s default), and the ratio
pipeline tokens/s / training tokens/s (target: >= 10, so the input pipeline is
never the bottleneck). Tokens are real (non-padding) source + target tokens in
both measurements.

Usage:
    KERAS_TRANSFORMER_DATA=/path/to/data python scripts/bench/input_pipeline.py \
        [--batch-tokens 2048] [--vocab-size 8000] [--max-length 128] [--train-steps 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402  (sets KERAS_BACKEND and sys.path)

from keras_transformer import training  # noqa: E402
from keras_transformer.config import get_preset  # noqa: E402
from keras_transformer.data import dataset_statistics, make_dataset  # noqa: E402


def measure(dataset, repeats: int) -> dict:
    """One warm-up epoch, then the best tokens/s of ``repeats`` epochs."""
    stats = dataset_statistics(dataset)
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for batch in dataset:  # only delivery; counting is done above
            pass
        elapsed = time.perf_counter() - start
        best = max(best, (stats["source_tokens"] + stats["target_tokens"]) / elapsed)
    stats["tokens_per_second"] = best
    return stats


def training_consumption(prepared, vocab_size: int, batch_tokens: int, steps: int, warmup: int, jit_compile) -> dict:
    """Real source+target tokens/s consumed by the small preset's train step on bucketed batches."""
    config = get_preset("small", vocab_size=vocab_size, batch_tokens=batch_tokens)
    batches = _common.as_numpy(make_dataset(prepared, batch_tokens=batch_tokens, seed=1), limit=warmup + steps)
    model = training.build_model(config)
    training.compile_model(model, config, jit_compile=jit_compile)
    _common.timed_fit(model, batches[:warmup], warm=0)  # traces (and compiles) once
    run = _common.timed_fit(model, batches, warm=warmup)
    tokens = _common.real_tokens(batches[warmup:], "both")
    return dict(steps=run["steps"], seconds=run["seconds"], tokens_per_second=tokens / run["seconds"],
                jit_compile=training.default_jit_compile() if jit_compile == "auto" else jit_compile)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("KERAS_TRANSFORMER_DATA"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, default=get_preset("small").batch_tokens)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-steps", type=int, default=30, help="timed training steps (after warm-up)")
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--jit-compile", default="auto", choices=["auto", "true", "false"],
                        help="XLA for the training measurement (auto: compile_model's default)")
    args = parser.parse_args(argv)

    prepared, tokenizer = _common.load_prepared(args.data_dir, args.vocab_size, args.max_length)
    fixed = measure(make_dataset(prepared, batch_size=args.batch_size, padding="batch", seed=0), args.repeats)
    bucketed = measure(make_dataset(prepared, batch_tokens=args.batch_tokens, seed=0), args.repeats)
    rows = [(f"(a) fixed {args.batch_size}-sentence batches", fixed),
            (f"(b) bucketed batches of <= {args.batch_tokens} tokens", bucketed)]
    print(f"{'mode':45s} {'batches':>8s} {'shapes':>7s} {'padding':>8s} {'real tokens/s':>14s}")
    for name, s in rows:
        print(f"{name:45s} {s['batches']:8d} {len(s['shapes']):7d} {s['padding_fraction']:8.1%} "
              f"{s['tokens_per_second']:14,.0f}")
    print(f"bucketed / fixed real tokens/s: {bucketed['tokens_per_second'] / fixed['tokens_per_second']:.2f}x; "
          f"padding {fixed['padding_fraction']:.1%} -> {bucketed['padding_fraction']:.1%}; "
          f"largest bucketed batch {bucketed['max_batch_tokens']} <= {args.batch_tokens} tokens")

    jit = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    train = training_consumption(prepared, tokenizer.vocab_size, args.batch_tokens, args.train_steps, args.warmup_steps, jit)
    ratio = bucketed["tokens_per_second"] / train["tokens_per_second"]
    print(f"training step of the 'small' preset (XLA {'on' if train['jit_compile'] else 'off'}) on (b): "
          f"{train['steps']} steps in {train['seconds']:.1f} s = {train['tokens_per_second']:,.0f} real tokens/s")
    print(f"pipeline (b) tokens/s / training tokens/s: {ratio:.1f}x (target >= 10)")
    status = 0
    if bucketed["padding_fraction"] >= 0.10:
        print("FAIL: bucketed padding is not below 10%")
        status = 1
    if ratio < 10:
        print("FAIL: the input pipeline is less than 10x faster than training")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
