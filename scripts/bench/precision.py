"""Training throughput by precision policy: float32 vs mixed_bfloat16 (and mixed_float16) on this machine.

Builds the ``small`` preset once per policy (``training.set_precision`` before
``training.build_model``; float32 variables, low-precision compute, softmax,
logits and loss in float32), trains each on the same token-bucketed Multi30k
batches (``make_dataset(batch_tokens=2048)``, what ``run`` uses), and times
the steps after warm-up. Measurements are interleaved (A B A B ...) over
``--rounds`` rounds so that load from other processes hits every policy
alike; the table gives real target tokens/s and the ratio to float32 measured
in the same run.

On x86 CPUs with AVX512_BF16 / AMX, TensorFlow's oneDNN kernels run bfloat16
matrix products natively; elsewhere bfloat16 may be slower than float32.
``mixed_float16`` is included with ``--float16`` (it is meant for GPUs; on a
CPU it mostly measures emulation).

Usage:
    KERAS_TRANSFORMER_DATA=/path/to/data python scripts/bench/precision.py [--steps 30] [--rounds 2] [--float16]
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402  (sets sys.path to the repository)
import keras  # noqa: E402

from keras_transformer import training  # noqa: E402
from keras_transformer.config import get_preset  # noqa: E402
from keras_transformer.data import make_dataset  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--data-dir", default=os.environ.get("KERAS_TRANSFORMER_DATA"))
parser.add_argument("--steps", type=int, default=30, help="timed steps per policy and round")
parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
parser.add_argument("--warmup", type=int, default=3, help="untimed steps at the start of each measurement")
parser.add_argument("--float16", action="store_true", help="also time mixed_float16 (with loss scaling)")


def main(argv=None) -> int:
    args = parser.parse_args(argv)
    prepared, tokenizer = _common.load_prepared(args.data_dir, 8000, 128)
    config = get_preset("small", vocab_size=tokenizer.vocab_size)
    n = args.warmup + args.steps
    batches = _common.as_numpy(make_dataset(prepared, batch_tokens=config.batch_tokens, seed=1), limit=n)
    policies = ["float32", "mixed_bfloat16"] + (["mixed_float16"] if args.float16 else [])
    models = {}
    for policy in policies:
        training.set_precision(policy)
        keras.utils.set_random_seed(0)
        models[policy] = training.build_model(config)
        training.compile_model(models[policy], config, jit_compile=False)
    training.set_precision("float32")
    for policy in policies:  # trace every train function once
        _common.timed_fit(models[policy], batches[: args.warmup], warm=0)
    totals = {p: dict(seconds=0.0, tokens=0) for p in policies}
    for r in range(args.rounds):
        for policy in policies:
            run = _common.timed_fit(models[policy], batches, warm=args.warmup)
            totals[policy]["seconds"] += run["seconds"]
            totals[policy]["tokens"] += run["target_tokens"]
            print(f"  round {r + 1} {policy:15s} {run['tokens_per_second']:9,.0f} target tokens/s "
                  f"({run['steps']} steps, {run['seconds']:.1f} s)", flush=True)
    rate = {p: totals[p]["tokens"] / totals[p]["seconds"] for p in policies}
    print(f"\n{'policy':15s} {'tok/s':>9s} {'x float32':>10s}")
    for policy in policies:
        print(f"{policy:15s} {rate[policy]:9,.0f} {rate[policy] / rate['float32']:9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
