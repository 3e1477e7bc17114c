"""Benchmark of the input pipeline on Multi30k train (Section 5.1 batching).

Measures, in one run and on the same prepared ids, (a) fixed batches of 64
sentences and (b) token batches bucketed by length: the fraction of padding
tokens (source + target slots) and the real tokens per second delivered by
``tf.data`` (best of ``--repeats`` full epochs, after one warm-up epoch), and
prints the ratio.

Usage:
    KERAS_TRANSFORMER_DATA=/path/to/data python scripts/bench/input_pipeline.py \
        [--batch-tokens 4096] [--vocab-size 8000] [--max-length 128]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from keras_transformer.data import (  # noqa: E402
    SubwordTokenizer,
    dataset_statistics,
    load_multi30k,
    make_dataset,
    prepare_pairs,
    train_sentencepiece,
)


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("KERAS_TRANSFORMER_DATA"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    pairs = load_multi30k("train", data_dir=args.data_dir, download=False)
    print(pairs.report.summary())
    with tempfile.TemporaryDirectory() as directory:
        start = time.perf_counter()
        model = train_sentencepiece([pairs.sources, pairs.targets], directory, vocab_size=args.vocab_size)
        tokenizer = SubwordTokenizer(model)
        print(f"SentencePiece unigram vocab {tokenizer.vocab_size} trained in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    prepared = prepare_pairs(pairs.sources, pairs.targets, tokenizer, max_length=args.max_length)
    print(f"prepared in {time.perf_counter() - start:.1f} s: {prepared.report.summary()}")

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
    if bucketed["padding_fraction"] >= 0.10:
        print("FAIL: bucketed padding is not below 10%")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
