"""The optimizer update alone: Keras' Adam against FusedAdam on a preset's weights, in one run.

For each preset, the model's trainable weights get random float32 gradients and
``optimizer.apply_gradients`` runs in a ``tf.function`` (as in the train step):

* **trace**: seconds to trace and run the first update (graph construction;
  paid at every training start);
* **update**: milliseconds per update after that (best of 3 rounds of
  ``--steps`` updates);
* the op count of the traced update, and FusedAdam / Keras Adam ratios.

The two optimizers alternate (Keras, fused, Keras, fused, ...) and each gets its
own fresh weights, so both see the same machine state. Run it on an idle machine:

    python scripts/bench/optimizer_update.py --presets tiny,small --steps 50
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402  (sets sys.path to the repository; oneDNN as the command line sets it)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import training  # noqa: E402
from keras_transformer.config import get_preset  # noqa: E402
from keras_transformer.training.optimizer import FusedAdam  # noqa: E402
from keras_transformer.training.schedule import WarmupSchedule  # noqa: E402


def measure(cls, config, steps: int) -> dict:
    """Trace time, op count and best ms per update of ``cls`` on a fresh model of ``config``."""
    keras.utils.set_random_seed(0)
    model = training.build_model(config)
    variables = model.trainable_variables
    optimizer = cls(WarmupSchedule(config.d_model, config.warmup_steps), beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    optimizer.build(variables)
    rng = np.random.default_rng(0)
    grads = [tf.constant(rng.normal(size=v.shape).astype("float32")) for v in variables]

    @tf.function(autograph=False)
    def update(grads):
        optimizer.apply_gradients(zip(grads, variables))

    start = time.perf_counter()
    update(grads)
    trace = time.perf_counter() - start
    ops = len(update.get_concrete_function(grads).graph.get_operations())
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(steps):
            update(grads)
        float(optimizer.iterations)  # wait for the last update
        best = min(best, (time.perf_counter() - start) / steps)
    return {"trace": trace, "ops": ops, "update": best, "variables": len(variables),
            "parameters": sum(int(np.prod(v.shape)) for v in variables)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,small")
    parser.add_argument("--steps", type=int, default=50, help="timed updates per round")
    parser.add_argument("--rounds", type=int, default=2, help="alternating Keras/fused rounds per preset")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} CPUs; tensorflow {tf.__version__}, keras {keras.__version__}; {_common.ONEDNN}")
    print(f"{'preset':8s} {'optimizer':10s} {'variables':>9s} {'parameters':>11s} {'graph ops':>9s} "
          f"{'trace s':>8s} {'ms/update':>10s}")
    summary = []
    for preset in args.presets.split(","):
        config = get_preset(preset)
        results = {"keras": [], "fused": []}
        for _ in range(args.rounds):
            for name, cls in (("keras", keras.optimizers.Adam), ("fused", FusedAdam)):
                r = measure(cls, config, args.steps)
                results[name].append(r)
                print(f"{preset:8s} {name:10s} {r['variables']:9d} {r['parameters']:11,d} {r['ops']:9d} "
                      f"{r['trace']:8.2f} {r['update'] * 1000:10.2f}", flush=True)
        best = {name: {key: min(r[key] for r in rs) for key in ("trace", "update", "ops")} for name, rs in results.items()}
        summary.append((preset, best))
    print("\nFusedAdam / Keras Adam (best of the rounds; below 1 is faster or fewer):")
    for preset, best in summary:
        print(f"  {preset:8s} trace {best['fused']['trace'] / best['keras']['trace']:.2f}   "
              f"update {best['fused']['update'] / best['keras']['update']:.2f}   "
              f"graph ops {best['fused']['ops'] / best['keras']['ops']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
