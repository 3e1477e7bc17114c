"""Training efficiency: achieved model FLOP/s of the train step against this machine's matmul peak.

For each preset and precision, on real Multi30k token batches (shared 8k
SentencePiece vocabulary, ``make_dataset(batch_tokens=...)`` as ``run`` uses):

* **achieved**: model FLOPs per step / step time, with model FLOPs counted the
  usual way for a Transformer's forward + backward pass: ``6 x parameters
  touched x real tokens`` (Kaplan et al., 2020), where a source token touches
  the encoder's weight matrices and a target token the decoder's and the
  pre-softmax projection (``d_model x vocab``); embeddings lookups and
  LayerNorm parameters are not matrix products and are not counted. Attention
  scores (``QK^T``, ``AV``) add ``12 x layers x length x d_model`` per token,
  under 3% at Multi30k's lengths; they are reported apart.
* **peak**: the FLOP/s TensorFlow's ``tf.matmul`` reaches on this machine, in
  the same run and the same compute dtype, at the step's own shapes (``[real
  tokens of a batch, in] x [in, out]`` for every weight matrix, forward and
  the two backward products), combined as the step would need them: total
  matmul FLOPs / total matmul time at those rates. A step cannot beat it
  without faster matmuls.
* **ratio** achieved / peak, and with ``--profile`` the step's time by op type
  (TensorFlow profiler) to see where the rest goes.

Run it on an otherwise idle machine:

    KERAS_TRANSFORMER_DATA=../shared/data python scripts/bench/train_efficiency.py \\
        --presets small --precisions float32,mixed_bfloat16 --steps 20 --profile
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402  (sets sys.path to the repository)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import training  # noqa: E402
from keras_transformer.config import get_preset  # noqa: E402
from keras_transformer.data import make_dataset  # noqa: E402
from keras_transformer.training.precision import cpu_bfloat16_flags  # noqa: E402


def weight_shapes(config):
    """``(encoder [(in, out)], decoder [(in, out)])``: every weight matrix a token passes through."""
    d, f = config.d_model, config.dff
    encoder = config.num_layers * ([(d, d)] * 4 + [(d, f), (f, d)])  # Q, K, V, O; FFN (Eq. 2)
    # Self-attention Q, K, V, O; cross-attention Q and O (its K, V run on the encoder's tokens); FFN.
    decoder = config.num_layers * ([(d, d)] * 6 + [(d, f), (f, d)]) + [(d, config.vocab_size)]
    cross_kv = config.num_layers * [(d, d)] * 2  # on source tokens
    return encoder + cross_kv, decoder


def model_flops(config, source_tokens: int, target_tokens: int) -> float:
    """``6 x parameters touched x real tokens`` of one training step (forward + backward)."""
    encoder, decoder = weight_shapes(config)
    return 6.0 * (sum(a * b for a, b in encoder) * source_tokens + sum(a * b for a, b in decoder) * target_tokens)


def attention_flops(config, batches) -> float:
    """Forward + backward FLOPs of attention scores and weighted sums (not in the 6N count), per step."""
    total = 0.0
    for (source, target_in), _ in batches:
        s, t = source.shape[1], target_in.shape[1]
        b = source.shape[0]
        per_layer = 2 * b * config.d_model * (s * s + t * t + t * s) * 2  # QK^T and AV, forward
        total += 3 * config.num_layers * per_layer  # forward + backward
    return total / len(batches)


def matmul_rate(m: int, k: int, n: int, dtype, seconds: float = 0.3) -> float:
    """FLOP/s of ``[m, k] x [k, n]`` in ``dtype`` (a loop of matmuls in one tf.function, best of 3)."""
    a = tf.cast(tf.random.normal([m, k]), dtype)
    b = tf.cast(tf.random.normal([k, n]), dtype)
    repeats = max(1, int(seconds * 2e11 / (2 * m * k * n)))

    @tf.function
    def run(a, b):
        def body(i, acc):
            return i + 1, acc + tf.reduce_sum(tf.cast(tf.matmul(a + tf.cast(i, dtype), b)[:1, :1], tf.float32))
        return tf.while_loop(lambda i, _: i < repeats, body, (0, 0.0))[1]

    run(a, b)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        run(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * m * k * n * repeats / best


def peak_rate(config, source_tokens: int, target_tokens: int, dtype) -> tuple[float, dict]:
    """The step's matmul FLOPs / their time at the rates ``tf.matmul`` reaches at the step's shapes."""
    encoder, decoder = weight_shapes(config)
    work = collections.Counter()
    for tokens, shapes in ((source_tokens, encoder), (target_tokens, decoder)):
        for k, n in shapes:
            # forward [T,k]x[k,n]; input gradient [T,n]x[n,k]; weight gradient [k,T]x[T,n]
            for shape in ((tokens, k, n), (tokens, n, k), (k, tokens, n)):
                work[shape] += 1
    total_flops, total_seconds, rates = 0.0, 0.0, {}
    for (m, k, n), count in work.items():
        rate = matmul_rate(m, k, n, dtype)
        rates[f"{m}x{k}x{n}"] = rate
        flops = 2.0 * m * k * n * count
        total_flops += flops
        total_seconds += flops / rate
    return total_flops / total_seconds, rates


def profile_step(model, batches, directory: str, steps: int = 5) -> list[tuple[str, float, int]]:
    """``[(op type, ms per step, calls per step)]`` of ``steps`` training steps, by the TensorFlow profiler."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

    data = _common.list_dataset(batches[:steps])
    tf.profiler.experimental.start(directory)
    model.fit(data, epochs=1, verbose=0)
    tf.profiler.experimental.stop()
    path = sorted(glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True))[-1]
    raw, _ = plugin.xspace_to_tools_data([path], "framework_op_stats")
    table = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    table = table[0] if isinstance(table, list) else table
    cols = [c["id"] for c in table["cols"]]
    kind, self_time, count = cols.index("type"), cols.index("total_self_time"), cols.index("occurrences")
    by_type, calls = collections.Counter(), collections.Counter()
    for row in table["rows"]:
        values = [c["v"] if c else None for c in row["c"]]
        if values[kind] != "IDLE":
            by_type[values[kind]] += values[self_time]
            calls[values[kind]] += values[count]
    return [(name, us / 1000 / steps, int(calls[name] // steps)) for name, us in by_type.most_common()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("KERAS_TRANSFORMER_DATA"))
    parser.add_argument("--presets", default="small")
    parser.add_argument("--precisions", default="float32,mixed_bfloat16")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="also profile 5 steps and print the time by op type")
    parser.add_argument("--top", type=int, default=15, help="op types shown per profile")
    parser.add_argument("--batch-tokens", type=int, default=None,
                        help="tokens per batch (default: each preset's own; the CPU recipe uses 4096)")
    args = parser.parse_args(argv)

    prepared, tokenizer = _common.load_prepared(args.data_dir, 8000, 128)
    print(f"{os.cpu_count()} CPUs; tensorflow {tf.__version__}, keras {keras.__version__}; {_common.ONEDNN}", flush=True)
    rows = []
    for preset in args.presets.split(","):
        config = get_preset(preset, vocab_size=tokenizer.vocab_size)
        if args.batch_tokens:
            config = config.replace(batch_tokens=args.batch_tokens)
        batches = _common.as_numpy(make_dataset(prepared, batch_tokens=config.batch_tokens, seed=1),
                                   limit=args.warmup + args.steps)
        timed = batches[args.warmup:]
        source_tokens = sum(int(np.count_nonzero(x[0])) for x, _ in timed) / len(timed)
        target_tokens = sum(int(np.count_nonzero(y)) for _, y in timed) / len(timed)
        flops = model_flops(config, source_tokens, target_tokens)
        attention = attention_flops(config, timed)
        for precision in args.precisions.split(","):
            training.set_precision(precision)
            keras.utils.set_random_seed(0)
            model = training.build_model(config)
            training.compile_model(model, config, jit_compile=False)
            run = _common.timed_fit(model, batches, warm=args.warmup)
            step = run["seconds"] / run["steps"]
            dtype = tf.bfloat16 if "bfloat16" in precision else (tf.float16 if "float16" in precision else tf.float32)
            peak, rates = peak_rate(config, int(source_tokens), int(target_tokens), dtype)
            achieved = flops / step
            rows.append((preset, precision, step, achieved, peak, attention / step))
            print(f"\n{preset} {precision}: {step * 1000:.0f} ms/step, {source_tokens:.0f} + {target_tokens:.0f} real "
                  f"tokens/step, {flops / 1e9:.1f} GFLOP/step (6N) + {attention / 1e9:.2f} attention; matmul rates at "
                  "the step's shapes: " + ", ".join(f"{s} {r / 1e9:.0f}" for s, r in sorted(rates.items())) + " GFLOP/s",
                  flush=True)
            if args.profile:
                with tempfile.TemporaryDirectory() as directory:
                    ops = profile_step(model, batches, directory)
                total = sum(ms for _, ms, _ in ops)
                print(f"  profile (op self time, {total:.0f} ms per step in ops over both threads):")
                for name, ms, calls in ops[: args.top]:
                    print(f"    {name:32s} {ms:8.1f} ms {100 * ms / total:5.1f}%  {calls:5d} calls")
            training.set_precision("float32")

    print(f"\n{'preset':8s} {'precision':16s} {'ms/step':>8s} {'achieved':>10s} {'peak':>10s} {'ratio':>6s}  "
          "(GFLOP/s of 6N; attention adds the last column)")
    for preset, precision, step, achieved, peak, attention in rows:
        print(f"{preset:8s} {precision:16s} {step * 1000:8.0f} {achieved / 1e9:10.1f} {peak / 1e9:10.1f} "
              f"{achieved / peak:6.2f}  +{attention / 1e9:.1f}")
    if any("bfloat16" in precision for _, precision, *_ in rows) and not cpu_bfloat16_flags():
        print("\nThis CPU has no native bfloat16 instructions (AVX512_BF16, AMX): its bfloat16 products are "
              "emulated, and --precision auto trains in float32 here; the bfloat16 row measures the emulation.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
