"""Trainer: global-token loss normalization, padding invariance, accumulation, precision, shapes."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import training
from keras_transformer.config import get_preset

CONFIG = get_preset("tiny", warmup_steps=2)


def _model(jit_compile=False, **kwargs):
    keras.utils.set_random_seed(3)
    model = training.build_model(CONFIG)
    return training.compile_model(model, CONFIG, jit_compile=jit_compile, **kwargs)


def _batch(rng, batch=4, src_len=6, tgt_len=7, real=None):
    src = rng.integers(4, CONFIG.vocab_size, (batch, src_len)).astype("int32")
    tout = rng.integers(4, CONFIG.vocab_size, (batch, tgt_len)).astype("int32")
    lengths = real if real is not None else rng.integers(2, tgt_len + 1, batch)
    for i, n in enumerate(lengths):
        tout[i, n:] = 0
        src[i, max(n - 1, 1):] = 0
    tin = np.concatenate([np.full((batch, 1), 2, "int32"), tout[:, :-1]], axis=1)
    tin[tout == 0] = 0
    return (src, tin), tout


def _numpy_loss(logits, target, eps):
    """Label-smoothed CE over real tokens / number of real tokens, in numpy (float64)."""
    logits = logits.astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, target[..., None], -1)[..., 0]
    per_token = (1 - eps) * nll + eps * -logp.mean(-1)
    mask = target != 0
    return per_token[mask].sum() / mask.sum()


def test_train_step_loss_is_label_smoothed_ce_over_real_tokens():
    model = _model()
    x, y = _batch(np.random.default_rng(0))
    logits = model(x, training=False).numpy()
    expected = _numpy_loss(logits, y, CONFIG.label_smoothing)
    count = tf.constant(float(np.sum(y != 0)))
    loss, grads, _ = model.replica_gradients(tuple(map(tf.constant, x)), tf.constant(y), count)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert len(grads) == len(model.trainable_variables)


def test_loss_and_gradients_do_not_depend_on_padding():
    model = _model()
    (src, tin), tout = _batch(np.random.default_rng(1))
    pad = lambda a, n: np.pad(a, [[0, 0], [0, n]])  # noqa: E731
    extra = [(pad(src, 5), pad(tin, 9)), pad(tout, 9)]
    # Two more all-padding rows as well.
    extra_rows = [tuple(np.pad(a, [[0, 2], [0, 0]]) for a in extra[0]), np.pad(extra[1], [[0, 2], [0, 0]])]
    count = tf.constant(float(np.sum(tout != 0)))
    results = []
    for (s, t), y in [((src, tin), tout), extra, extra_rows]:
        loss, grads, _ = model.replica_gradients((tf.constant(s), tf.constant(t)), tf.constant(y), count)
        results.append((float(loss), [g.numpy() for g in grads]))
    for loss, grads in results[1:]:
        assert loss == pytest.approx(results[0][0], rel=1e-5)
        for g, g0 in zip(grads, results[0][1]):
            np.testing.assert_allclose(g, g0, rtol=1e-4, atol=1e-6)


def test_split_batch_sums_to_global_loss_and_gradients():
    """Two 'replicas' holding 2 and 14 real target tokens: partial sums / global count add up to one device."""
    model = _model()
    x, y = _batch(np.random.default_rng(2), real=[1, 1, 7, 7])
    count = tf.constant(float(np.sum(y != 0)))
    full_loss, full_grads, _ = model.replica_gradients(tuple(map(tf.constant, x)), tf.constant(y), count)
    parts = [model.replica_gradients((tf.constant(x[0][s]), tf.constant(x[1][s])), tf.constant(y[s]), count)
             for s in (slice(0, 2), slice(2, 4))]
    assert float(parts[0][0] + parts[1][0]) == pytest.approx(float(full_loss), rel=1e-5)
    for g, g0, g1 in zip(full_grads, parts[0][1], parts[1][1]):
        np.testing.assert_allclose((g0 + g1).numpy(), g.numpy(), rtol=1e-4, atol=1e-6)


def test_fit_reports_global_token_loss_and_evaluate_matches():
    model = _model()
    x, y = _batch(np.random.default_rng(4))
    logits = model(x, training=False).numpy()
    expected = _numpy_loss(logits, y, CONFIG.label_smoothing)
    data = tf.data.Dataset.from_tensors((x, y))
    assert model.evaluate(data, verbose=0, return_dict=True)["loss"] == pytest.approx(expected, rel=1e-5)
    history = model.fit(data, epochs=1, verbose=0)
    assert history.history["loss"][0] == pytest.approx(expected, rel=1e-5)
    assert int(model.optimizer.iterations) == 1


def test_optimizer_and_metrics_are_built_before_fit_so_the_step_is_traced_once():
    """Variables made inside a trace make tf.function trace again: compile_model makes them first."""
    model = _model()
    assert model.optimizer.built and len(model.optimizer.variables) > 2 * len(model.trainable_variables)
    rng = np.random.default_rng(5)
    batches = [_batch(rng, batch=b, src_len=s, tgt_len=t) for b, s, t in [(4, 6, 7), (2, 9, 5), (3, 4, 8)]]
    data = tf.data.Dataset.from_tensors(batches[0])
    for batch in batches[1:]:
        data = data.concatenate(tf.data.Dataset.from_tensors(batch))  # element shapes [None, None]
    traces, train_step = [], model.train_step
    model.train_step = lambda batch: (traces.append(1), train_step(batch))[1]  # Python runs once per trace
    model.make_train_function(force=True)
    model.fit(data, epochs=2, verbose=0)
    assert int(model.optimizer.iterations) == 6
    assert len(traces) == 1 and model.replica_gradients.experimental_get_tracing_count() == 1


def test_gradient_accumulation_equals_one_big_batch():
    rng = np.random.default_rng(5)
    a = _batch(rng, real=[3, 5, 7, 7])
    b = _batch(rng, real=[7, 7, 4, 4])  # same number of real target tokens (22) as a
    assert np.sum(a[1] != 0) == np.sum(b[1] != 0)
    big = tuple(np.concatenate([p, q]) for p, q in zip(a[0], b[0])), np.concatenate([a[1], b[1]])
    accumulated = _model(gradient_accumulation_steps=2)
    accumulated.fit(tf.data.Dataset.from_tensors(a).concatenate(tf.data.Dataset.from_tensors(b)), verbose=0)
    single = _model()
    single.fit(tf.data.Dataset.from_tensors(big), verbose=0)
    assert int(accumulated.optimizer.iterations) == 1
    assert int(single.optimizer.iterations) == 1
    # Compare the functions, not raw weights: attention key biases get an exactly
    # zero gradient, which Adam (epsilon 1e-9) turns from float noise into +-lr.
    np.testing.assert_allclose(accumulated(big[0]).numpy(), single(big[0]).numpy(), rtol=1e-4, atol=1e-4)
    changed = max(float(np.max(np.abs(w.numpy()))) for w in single.trainable_weights)
    assert changed > 0


def test_xla_step_matches_non_xla_step():
    x, y = _batch(np.random.default_rng(6))
    data = tf.data.Dataset.from_tensors((x, y)).repeat(2)
    plain, xla = _model(jit_compile=False), _model(jit_compile=True)
    h1 = plain.fit(data, verbose=0).history["loss"][0]
    h2 = xla.fit(data, verbose=0).history["loss"][0]
    assert h2 == pytest.approx(h1, rel=1e-5)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_each_precision_trains_with_float32_logits_and_a_falling_loss(policy):
    try:
        assert training.set_precision(policy) == (policy, "asked for")
        keras.utils.set_random_seed(3)
        model = _model()
        assert model.compute_dtype == {"float32": "float32", "mixed_bfloat16": "bfloat16",
                                       "mixed_float16": "float16"}[policy]
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer) == (policy == "mixed_float16")
        x, y = _batch(np.random.default_rng(7))
        assert model(x).dtype == tf.float32
        losses = model.fit(tf.data.Dataset.from_tensors((x, y)).repeat(1), epochs=12, verbose=0).history["loss"]
        assert np.all(np.isfinite(losses))
        assert losses[-1] < 0.8 * losses[0], losses
        assert int(model.optimizer.iterations) == 12
    finally:
        training.set_precision("float32")


def test_fixed_shape_batches_pads_to_one_shape_per_width():
    src = np.ones((3, 5), "int32")
    tin = np.ones((3, 8), "int32")
    tout = np.ones((3, 8), "int32")
    data = training.fixed_shape_batches(tf.data.Dataset.from_tensors(((src, tin), tout)), 40, [4, 8, 12], num_replicas=2)
    (s, t), y = next(iter(data))
    # width 8 (the longer side), rows = 40 // 8 = 5 rounded up to a multiple of 2 = 6
    assert s.shape == (6, 8) and t.shape == (6, 8) and y.shape == (6, 8)
    assert int(tf.reduce_sum(s)) == 15 and int(tf.reduce_sum(y)) == 24
    with pytest.raises(ValueError, match="batch_tokens"):
        training.fixed_shape_batches(data, 4, [4, 8])


def test_fixed_shape_batches_gives_one_shape_per_width_over_bucketed_batches():
    """Batches of a bucketing pipeline come in more shapes than buckets; fixed_shape_batches leaves one per width.

    (That the per-replica XLA step then compiles once per shape is checked on a real epoch in test_shapes.py.)
    """
    widths, batch_tokens = [8, 10, 12, 15, 18, 22], 88
    rng = np.random.default_rng(1)
    pairs = [(rng.integers(4, CONFIG.vocab_size, int(rng.integers(1, widths[-1]))),
              rng.integers(4, CONFIG.vocab_size, int(rng.integers(1, widths[-1])))) for _ in range(300)]
    # Bucket like a pipeline: by the longer side, batch_tokens // width pairs, each side padded to the
    # smallest width fitting its own batch, partial last batches.
    buckets = {}
    for s, t in pairs:
        buckets.setdefault(next(w for w in widths if w >= max(len(s), len(t) + 1)), []).append((s, t))
    raw = []
    for w, items in sorted(buckets.items()):
        for i in range(0, len(items), batch_tokens // w):
            chunk = items[i : i + batch_tokens // w]
            sw = next(x for x in widths if x >= max(len(s) for s, _ in chunk))
            tw = next(x for x in widths if x >= max(len(t) + 1 for _, t in chunk))
            src, tin, tout = np.zeros((len(chunk), sw), "int32"), np.zeros((len(chunk), tw), "int32"), \
                np.zeros((len(chunk), tw), "int32")
            for j, (s, t) in enumerate(chunk):
                src[j, : len(s)] = s
                tin[j, : len(t) + 1] = np.concatenate([[2], t])
                tout[j, : len(t) + 1] = np.concatenate([t, [3]])
            raw.append(((src, tin), tout))
    assert len({(a.shape, b.shape) for (a, b), _ in raw}) > len(widths)

    def gen():
        yield from raw

    spec = ((tf.TensorSpec([None, None], tf.int32),) * 2, tf.TensorSpec([None, None], tf.int32))
    fixed = list(training.fixed_shape_batches(tf.data.Dataset.from_generator(gen, output_signature=spec),
                                             batch_tokens, widths))
    shapes = {(tuple(s.shape), tuple(t.shape), tuple(y.shape)) for (s, t), y in fixed}
    assert 1 < len(shapes) <= len(widths)
    for s, t, y in shapes:  # [batch_tokens // w, w] on both sides
        assert s == t == y and s[0] == batch_tokens // s[1] and s[1] in widths
    # Nothing lost: every real token of every batch is still there.
    assert len(fixed) == len(raw)
    assert sum(int(np.count_nonzero(y)) for _, y in fixed) == sum(int(np.count_nonzero(y)) for _, y in raw)
    assert sum(int(np.count_nonzero(s)) for (s, _), _ in fixed) == sum(int(np.count_nonzero(s)) for (s, _), _ in raw)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown strategy"):
        training.get_strategy("nope")
    with pytest.raises(ValueError, match="precision policy"):
        training.set_precision("float8")
    model = training.build_model(CONFIG)
    with pytest.raises(ValueError, match="jit_compile"):
        training.compile_model(model, CONFIG, jit_compile="yes")
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        training.compile_model(model, CONFIG, gradient_accumulation_steps=0)
    model.compile(optimizer="adam", loss="mse")
    with pytest.raises(ValueError, match="MaskedLabelSmoothedCrossEntropy"):
        training.install_train_step(model)


def test_is_chief(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert training.is_chief()
    cluster = {"worker": ["localhost:1", "localhost:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    assert not training.is_chief()
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    assert training.is_chief()


def test_in_cluster(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert not training.in_cluster()
    one = {"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(one))
    assert not training.in_cluster()
    two = {"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"]}, "task": {"type": "chief", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(two))
    assert training.in_cluster()


def test_accumulation_schedule_counts_updates():
    from keras_transformer.training.accumulation import PerUpdateSchedule
    from keras_transformer.training.schedule import WarmupSchedule

    inner = WarmupSchedule(d_model=32, warmup_steps=2)
    schedule = PerUpdateSchedule(inner, 4)
    # batches 0..3 are update 0, batches 4..7 update 1 (Eq. 3 at step 1 and 2)
    assert float(schedule(3)) == pytest.approx(32**-0.5 * 2**-1.5)
    assert float(schedule(4)) == pytest.approx(32**-0.5 * 2 * 2**-1.5)
    restored = PerUpdateSchedule.from_config(schedule.get_config())
    assert float(restored(7)) == pytest.approx(float(schedule(7)))
    with pytest.raises(ValueError, match="accumulation_steps"):
        PerUpdateSchedule(inner, 0)


def test_trained_model_exports_as_saved_model(tmp_path):
    # The installed train step must not leave anything on the model that
    # tf.saved_model.save would try to export (it captures dropout seeds).
    model = _model()
    x, y = _batch(np.random.default_rng(5))
    model.fit(tf.data.Dataset.from_tensors((x, y)), epochs=1, verbose=0)
    module = tf.Module()
    module.model = model
    module.encode = tf.function(lambda ids: model.encode(ids), input_signature=[tf.TensorSpec([None, None], tf.int32)])
    tf.saved_model.save(module, str(tmp_path / "sm"))
    reloaded = tf.saved_model.load(str(tmp_path / "sm"))
    np.testing.assert_allclose(reloaded.encode(tf.constant(x[0])).numpy(), model.encode(x[0]).numpy(), atol=1e-5)


def test_fit_with_unknown_length_validation_data_warns_nothing_and_steps_once_per_batch(tmp_path, recwarn):
    """Datasets of unknown length (as make_dataset's) get a counted length, so Keras neither warns
    "ran out of data" after validation nor takes a phantom optimizer step at the end of an epoch."""
    model = _model()
    rng = np.random.default_rng(6)
    batches = [_batch(rng) for _ in range(3)]

    def unknown_length(items):
        ds = tf.data.Dataset.from_generator(
            lambda: iter(items),
            output_signature=(
                (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32)),
                tf.TensorSpec([None, None], tf.int32),
            ),
        )
        assert int(ds.cardinality()) == tf.data.UNKNOWN_CARDINALITY
        return ds

    history = training.fit(
        model, unknown_length(batches), model_dir=tmp_path, epochs=2, validation_data=unknown_length(batches[:2]),
        tensorboard=False, verbose=0,
    )
    assert len(history.history["val_loss"]) == 2
    assert int(model.optimizer.iterations) == 6
    assert not [w for w in recwarn if "ran out of data" in str(w.message)]


def test_a_cooldown_at_the_end_of_the_budget_trains_with_the_learning_rate_it_reached(tmp_path):
    # A budget of 0 s with a cooldown over all of it: the factor is 0 from the start, so the one batch that
    # trains leaves the weights as they were (Adam's step is the learning rate times m / sqrt(v)).
    rng = np.random.default_rng(7)
    data = tf.data.Dataset.from_tensor_slices(_batch(rng)).batch(4)
    for cooldown, moved in ((False, True), (True, False)):
        model = _model(cooldown=cooldown)
        before = [w.copy() for w in model.get_weights()]
        training.fit(model, data.repeat(3), model_dir=tmp_path / str(cooldown), epochs=2, max_train_seconds=0.0,
                     cooldown_fraction=1.0 if cooldown else 0.0, tensorboard=False, verbose=0)
        assert int(model.optimizer.iterations) == 1
        assert any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights())) is moved
    with pytest.raises(ValueError, match="cooldown_fraction needs max_train_seconds"):
        training.fit(_model(cooldown=True), data, model_dir=tmp_path / "x", epochs=1, cooldown_fraction=0.3)


def test_time_budget_stops_after_the_batch_it_runs_out_in_and_says_where(tmp_path, capsys):
    model = _model()
    rng = np.random.default_rng(7)
    batches = [_batch(rng) for _ in range(3)]
    data = tf.data.Dataset.from_generator(
        lambda: iter(batches),
        output_signature=(
            (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32)),
            tf.TensorSpec([None, None], tf.int32),
        ),
    )
    training.fit(model, data, model_dir=tmp_path, epochs=2, max_train_seconds=0.0, tensorboard=False, verbose=0)
    assert int(model.optimizer.iterations) == 1
    out = capsys.readouterr().out
    assert "time budget of 0 min reached after batch 1 of epoch 1" in out
    state = json.loads((tmp_path / "checkpoints" / "state.json").read_text())
    assert (state["epoch"], state["batch"], state["epoch_complete"]) == (1, 1, False)  # "batch 1 of epoch 1"
