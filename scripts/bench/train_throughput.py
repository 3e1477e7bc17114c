"""Training throughput on Multi30k: our Transformer and train step vs a keras-hub baseline of the same size.

Measures real (non-padding) TARGET tokens per second of training, in one run,
on the same Multi30k train ids (shared 8k SentencePiece vocabulary):

* ours, XLA off: ``training.build_model`` + ``compile_model(jit_compile=False)``
  on token-bucketed batches (``make_dataset(batch_tokens=2048)``, the ``small``
  preset, ``padding="bucket"`` as the ``run`` command uses);
* ours, XLA on: ``compile_model(jit_compile=True)`` on ``padding="fixed"``
  batches (one shape per bucket). Steady-state steps are timed on the
  ``--xla-shapes`` most frequent bucket shapes after compiling them; the
  compile time per shape is measured too, and the epoch time with all
  compilations of an epoch is estimated from both;
* baseline: ``keras_hub.layers.TokenAndPositionEmbedding`` +
  ``TransformerEncoder`` x3 / ``TransformerDecoder`` x3 + ``Dense(vocab)``
  (d_model 256, 4 heads, dff 1024, dropout 0.1), ``model.fit`` with
  ``SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)`` on fixed
  64-sentence batches padded to their longest sentence (the keras-hub
  tutorial setup; ``jit_compile=False``, since with a new shape almost every
  batch XLA would recompile all the time).

Measurements are interleaved (A B C A B C ...) over ``--rounds`` rounds of
``--steps`` timed steps each, after warm-up, so that load from other processes
on a shared machine hits every configuration alike; only ratios measured in
the same run are meaningful. Prints a table and the decomposition of the gain:
target tokens/s = target slots/s x (1 - target padding fraction).

Usage (keras-hub is the ``bench`` extra: ``pip install -e ".[bench]"``):
    KERAS_TRANSFORMER_DATA=/path/to/data python scripts/bench/train_throughput.py [--steps 24] [--rounds 2] [--quick]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402  (sets sys.path to the repository)
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_transformer import training  # noqa: E402
from keras_transformer.config import get_preset  # noqa: E402
from keras_transformer.data import dataset_statistics, make_dataset  # noqa: E402


def import_keras_hub():
    """The ``keras_hub`` module, for the baseline.

    Raises:
        SystemExit: when keras-hub is not installed (it is the ``bench`` extra), saying how to install it.
    """
    try:
        import keras_hub
    except ImportError as error:
        raise SystemExit(f'the keras-hub baseline needs keras-hub ({error}): pip install -e ".[bench]"') from error
    return keras_hub


def build_baseline(vocab_size: int, max_length: int, d_model: int, num_layers: int, num_heads: int, dff: int,
                   dropout_rate: float) -> keras.Model:
    """The keras-hub tutorial Transformer of the same size, compiled for ``model.fit``."""
    keras_hub = import_keras_hub()

    source = keras.Input((None,), dtype="int32", name="source_ids")
    target_in = keras.Input((None,), dtype="int32", name="target_in_ids")
    x = keras_hub.layers.TokenAndPositionEmbedding(vocab_size, max_length, d_model, mask_zero=True)(source)
    for _ in range(num_layers):
        x = keras_hub.layers.TransformerEncoder(dff, num_heads, dropout=dropout_rate)(x)
    y = keras_hub.layers.TokenAndPositionEmbedding(vocab_size, max_length, d_model, mask_zero=True)(target_in)
    for _ in range(num_layers):
        y = keras_hub.layers.TransformerDecoder(dff, num_heads, dropout=dropout_rate)(y, x)
    logits = keras.layers.Dense(vocab_size)(y)
    model = keras.Model([source, target_in], logits)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
        jit_compile=False,
    )
    return model


def epoch_stats(dataset) -> dict:
    """Padding fraction of target slots, shapes, batches and real target tokens per batch over one epoch."""
    stats = dataset_statistics(dataset)
    stats["target_padding"] = 1.0 - stats["target_tokens"] / stats["target_slots"]
    stats["target_tokens_per_batch"] = stats["target_tokens"] / stats["batches"]
    return stats


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("KERAS_TRANSFORMER_DATA"))
    parser.add_argument("--steps", type=int, default=24, help="timed steps per configuration and round")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (A B C A B C ...)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of each measurement")
    parser.add_argument("--xla-shapes", type=int, default=3, help="bucket shapes compiled for the XLA measurement")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per baseline batch")
    parser.add_argument("--no-xla", action="store_true", help="skip the XLA measurement")
    parser.add_argument("--quick", action="store_true", help="--steps 6 --rounds 2 --xla-shapes 1 (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.rounds, args.xla_shapes = 6, 2, 1
    import_keras_hub()  # before any work: say how to install it

    prepared, tokenizer = _common.load_prepared(args.data_dir, 8000, 128)
    config = get_preset("small", vocab_size=tokenizer.vocab_size)
    n = args.warmup + args.steps
    ours_ds = make_dataset(prepared, batch_tokens=config.batch_tokens, seed=1)
    fixed_ds = make_dataset(prepared, batch_tokens=config.batch_tokens, padding="fixed", seed=1)
    base_ds = make_dataset(prepared, batch_size=args.batch_size, padding="batch", seed=1)
    stats = {"ours": epoch_stats(ours_ds), "ours_xla": epoch_stats(fixed_ds), "baseline": epoch_stats(base_ds)}

    batches = {"ours": _common.as_numpy(ours_ds, limit=n), "baseline": _common.as_numpy(base_ds, limit=n)}
    models = {}
    keras.utils.set_random_seed(0)
    models["ours"] = training.build_model(config)
    training.compile_model(models["ours"], config, jit_compile=False)
    models["baseline"] = build_baseline(tokenizer.vocab_size, config.max_length, config.d_model, config.num_layers,
                                        config.num_heads, config.dff, config.dropout_rate)
    compile_seconds = []
    if not args.no_xla:
        epoch = _common.as_numpy(fixed_ds)
        frequent = [shape for shape, _ in collections.Counter(x[0].shape for x, _ in epoch).most_common(args.xla_shapes)]
        chosen = [b for b in epoch if b[0][0].shape in frequent]
        batches["ours_xla"] = (chosen * (n // len(chosen) + 1))[:n]
        models["ours_xla"] = training.build_model(config)
        training.compile_model(models["ours_xla"], config, jit_compile=True)
        first = [next(b for b in epoch if b[0][0].shape == shape) for shape in frequent]
        # Compile each chosen shape (timed), then once more each: compile time = first - second.
        firsts = _common.timed_fit(models["ours_xla"], first, warm=0)["step_seconds"]
        seconds = _common.timed_fit(models["ours_xla"], first, warm=0)["step_seconds"]
        compile_seconds = [a - b for a, b in zip(firsts, seconds)]
        print(f"XLA compile time per shape ({', '.join(f'{s[0]}x{s[1]}' for s in frequent)}): "
              + ", ".join(f"{c:.1f} s" for c in compile_seconds))
    names = [name for name in ("ours", "ours_xla", "baseline") if name in batches]
    for name in names:  # trace every train function once
        _common.timed_fit(models[name], batches[name][: args.warmup], warm=0)
    totals = {name: dict(seconds=0.0, tokens=0, steps=0) for name in names}
    for r in range(args.rounds):
        for name in names:
            run = _common.timed_fit(models[name], batches[name], warm=args.warmup)
            totals[name]["seconds"] += run["seconds"]
            totals[name]["tokens"] += run["target_tokens"]
            totals[name]["steps"] += run["steps"]
            print(f"  round {r + 1} {name:9s} {run['target_tokens'] / run['seconds']:9,.0f} target tokens/s "
                  f"({run['steps']} steps, {run['seconds']:.1f} s)", flush=True)

    labels = {"ours": "ours, XLA off, bucketed <=2048 tok", "ours_xla": "ours, XLA on, fixed-shape buckets",
              "baseline": f"keras-hub, fit, {args.batch_size} sentences/batch"}
    print()
    print(f"{'configuration':38s} {'tok/s':>8s} {'x base':>7s} {'steps/s':>8s} {'tgt tok/step':>12s} "
          f"{'tgt pad':>8s} {'slots/s':>8s} {'shapes/ep':>9s} {'batches/ep':>10s}")
    rate = {name: totals[name]["tokens"] / totals[name]["seconds"] for name in names}
    for name in names:
        t = totals[name]
        measured = batches[name][args.warmup:]
        real = _common.real_tokens(measured)
        target_slots = sum(y.size for _, y in measured)
        slots_per_second = rate[name] * target_slots / real
        print(f"{labels[name]:38s} {rate[name]:8,.0f} {rate[name] / rate['baseline']:6.2f}x "
              f"{t['steps'] / t['seconds']:8.2f} {real / len(measured):12,.0f} {1 - real / target_slots:8.1%} "
              f"{slots_per_second:8,.0f} {len(stats[name]['shapes']):9d} {stats[name]['batches']:10d}")
    print()
    for name in names:
        s = stats[name]
        print(f"epoch of {labels[name]}: target padding {s['target_padding']:.1%}, "
              f"{s['target_tokens_per_batch']:,.0f} real target tokens per batch, {len(s['shapes'])} shapes")
    print(f"ours (XLA off) / baseline: {rate['ours'] / rate['baseline']:.2f}x (target >= 1.3)")
    if "ours_xla" in names and compile_seconds:
        epoch_tokens = stats["ours"]["target_tokens"]
        off = epoch_tokens / rate["ours"]
        shapes = len(stats["ours_xla"]["shapes"])
        per_shape = float(np.mean(compile_seconds))
        on = epoch_tokens / rate["ours_xla"] + shapes * per_shape
        print(f"XLA on / off, steady state: {rate['ours_xla'] / rate['ours']:.2f}x; one epoch "
              f"({epoch_tokens:,} target tokens): XLA off {off:.0f} s, XLA on {on:.0f} s "
              f"(= {epoch_tokens / rate['ours_xla']:.0f} s of steps + {shapes} shapes x {per_shape:.1f} s compile); "
              f"break-even after {max(shapes * per_shape / max(off - (on - shapes * per_shape), 1e-9), 0):.1f} epochs"
              if off > on - shapes * per_shape else
              f"XLA on / off, steady state: {rate['ours_xla'] / rate['ours']:.2f}x: XLA never pays off "
              f"(one epoch: XLA off {off:.0f} s, XLA on {on:.0f} s incl. {shapes} x {per_shape:.1f} s compile)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
