"""Bounded shapes with the real pipeline: XLA compiles at most once per bucket (issue 5).

``make_dataset(..., padding="fixed")`` gives every batch of bucket ``w`` the
shape ``[batch_tokens // w, w]`` on both sides, so an epoch of real Multi30k
pairs of varied lengths has one batch shape per non-empty bucket, and the
per-replica XLA step (``training.compile_model(jit_compile=True)``) compiles once
per shape. Compilations are counted from the HLO modules XLA dumps
(``XLA_FLAGS=--xla_dump_to=DIR``, one ``*replica_gradients*.before_optimizations.txt``
per compilation) in a subprocess: this file, run as a script, trains the model.
Padding rows are all 0 and leave the token-normalized loss and gradients unchanged.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

NUM_PAIRS = 300
BATCH_TOKENS = 256
MAX_LENGTH = 64


def _prepare(data_dir, workdir):
    """The first NUM_PAIRS Multi30k train pairs, a 200-piece tokenizer trained on them, the tiny config."""
    from keras_transformer.config import get_preset
    from keras_transformer.data.multi30k import load_multi30k
    from keras_transformer.data.pipeline import bucket_widths, prepare_pairs
    from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece

    pairs = load_multi30k("train", data_dir=data_dir, download=False)
    sources, targets = pairs.sources[:NUM_PAIRS], pairs.targets[:NUM_PAIRS]
    tokenizer = SubwordTokenizer(train_sentencepiece([sources, targets], workdir, vocab_size=200))
    prepared = prepare_pairs(sources, targets, tokenizer, max_length=MAX_LENGTH)
    longest = int(max(prepared.source_ids.row_lengths().numpy().max(), prepared.target_ids.row_lengths().numpy().max()))
    widths = bucket_widths(longest, min_width=8, growth=1.3)
    config = get_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=MAX_LENGTH, batch_tokens=BATCH_TOKENS)
    return prepared, widths, config


def _epoch_shapes(dataset):
    return sorted({(tuple(s.shape), tuple(ti.shape), tuple(to.shape)) for (s, ti), to in dataset})


def _child(out_path, data_dir):
    """Subprocess: one epoch of XLA training on fixed-shape batches; writes counts to ``out_path``."""
    import keras
    import numpy as np

    from keras_transformer.data.pipeline import make_dataset
    from keras_transformer import training

    with tempfile.TemporaryDirectory() as workdir:
        prepared, widths, config = _prepare(data_dir, workdir)
    longest = np.maximum(prepared.source_ids.row_lengths().numpy(), prepared.target_ids.row_lengths().numpy())
    buckets = sorted({next(w for w in widths if w >= n) for n in longest.tolist()})
    dataset = make_dataset(prepared, batch_tokens=BATCH_TOKENS, widths=widths, padding="fixed", seed=0)
    keras.utils.set_random_seed(0)
    model = training.build_model(config)
    training.compile_model(model, config, jit_compile=True)
    shapes = {}
    seen = []  # one epoch of the same dataset (every epoch has the same shapes: one per non-empty bucket)
    for (s, ti), to in dataset:
        seen.append((tuple(s.shape), tuple(ti.shape), tuple(to.shape), int(np.sum(to.numpy() != 0))))
    history = model.fit(training.with_known_length(dataset), epochs=1, verbose=0)
    shapes["fixed"] = sorted({x[:3] for x in seen})
    for mode in ("bucket", "batch"):
        shapes[mode] = _epoch_shapes(make_dataset(prepared, batch_tokens=BATCH_TOKENS, widths=widths, padding=mode, seed=0))
    result = {
        "widths": widths,
        "non_empty_buckets": buckets,
        "shapes": shapes,
        "batches": len(seen),
        "target_tokens": sum(x[3] for x in seen),
        "expected_target_tokens": int(prepared.report.target_tokens),
        "traces": model.replica_gradients.experimental_get_tracing_count(),
        "loss": float(history.history["loss"][-1]),
    }
    pathlib.Path(out_path).write_text(json.dumps(result))


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    _child(sys.argv[1], sys.argv[2])
    sys.exit(0)

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def test_xla_compiles_once_per_bucket_over_a_real_epoch(tmp_path, data_root, multi30k_dir):
    dump = tmp_path / "xla"
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump}"  # after conftest's TEST_XLA_FLAGS
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", XLA_FLAGS=flags)
    proc = subprocess.run([sys.executable, __file__, str(tmp_path / "out.json"), str(data_root)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "out.json").read_text())
    compilations = [p for p in os.listdir(dump)
                    if "_replica_gradients_" in p and p.endswith(".before_optimizations.txt")]
    fixed = result["shapes"]["fixed"]
    # One shape per non-empty bucket: [batch_tokens // w, w] on both sides.
    assert sorted(tuple(map(tuple, s)) for s in fixed) == sorted(
        ((BATCH_TOKENS // w, w),) * 3 for w in result["non_empty_buckets"]
    )
    assert len(result["non_empty_buckets"]) >= 4  # the epoch really has varied lengths
    # One XLA compilation per distinct shape, bounded by the number of buckets.
    assert len(compilations) == len(fixed) <= len(result["widths"])
    assert 1 <= result["traces"] <= len(compilations)
    # The other paddings give more shapes over the same epoch.
    assert len(result["shapes"]["bucket"]) > len(fixed)
    assert len(result["shapes"]["batch"]) > len(fixed)
    # Every real target token was in the epoch, and training ran.
    assert result["target_tokens"] == result["expected_target_tokens"]
    assert np.isfinite(result["loss"])


def test_padding_rows_and_columns_carry_no_loss(tmp_path, data_root, multi30k_dir):
    """Loss and gradients of a fixed-shape batch equal those of its real rows, padded to their longest."""
    import keras
    import tensorflow as tf

    from keras_transformer.data.pipeline import make_dataset
    from keras_transformer import training

    prepared, widths, config = _prepare(data_root, tmp_path)
    dataset = make_dataset(prepared, batch_tokens=BATCH_TOKENS, widths=widths, padding="fixed", seed=1)
    keras.utils.set_random_seed(0)
    model = training.build_model(config)  # tiny: dropout 0, so training=True is deterministic
    training.compile_model(model, config, jit_compile=False)
    checked = 0
    for (source, target_in), target_out in dataset:
        real = np.flatnonzero((target_out.numpy() != 0).any(axis=1))
        if len(real) == source.shape[0]:
            continue  # a full batch: nothing to strip
        s, ti, to = (t.numpy()[real] for t in (source, target_in, target_out))
        s = s[:, : int((s != 0).sum(axis=1).max())]
        t_len = int((to != 0).sum(axis=1).max())
        ti, to = ti[:, :t_len], to[:, :t_len]
        count = float((to != 0).sum())  # real target tokens, counted by numpy
        loss_fixed, grads_fixed, _ = model.replica_gradients((source, target_in), target_out, tf.constant(count))
        loss_real, grads_real, _ = model.replica_gradients((tf.constant(s), tf.constant(ti)), tf.constant(to),
                                                           tf.constant(count))
        assert source.shape[0] > len(real) and source.shape[1] >= s.shape[1]
        assert float(loss_fixed) == pytest.approx(float(loss_real), rel=1e-5)
        for a, b in zip(grads_fixed, grads_real):
            a = tf.convert_to_tensor(a).numpy()
            b = tf.convert_to_tensor(b).numpy()
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
        checked += 1
        if checked == 2:
            break
    assert checked == 2
