"""Transformer (Section 3): parameters, masks, caching, saving, mixed precision."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import get_preset
from keras_transformer.model import Transformer

SRC = np.array([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]], "int32")
TGT = np.array([[2, 11, 12, 13], [2, 14, 15, 0]], "int32")


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _tiny(**overrides):
    return Transformer(**get_preset("tiny", **overrides).model_kwargs())


@pytest.fixture
def restore_policy():
    policy = keras.mixed_precision.global_policy()
    yield
    keras.mixed_precision.set_global_policy(policy)


def expected_parameters(vocab, n, d, dff, tied=True, learned_max_length=0):
    attention = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O (Section 3.2.2) with biases
    ffn = d * dff + dff + dff * d + d  # Eq. 2
    norm = 2 * d
    encoder = n * (attention + ffn + 2 * norm)
    decoder = n * (2 * attention + ffn + 3 * norm)
    embeddings = vocab * d if tied else 3 * vocab * d  # tied: one matrix, Section 3.4
    positions = learned_max_length * d * (1 if tied else 2)
    return embeddings + positions + encoder + decoder


@pytest.mark.parametrize("name, n, d, dff", [("base", 6, 512, 2048), ("big", 6, 1024, 4096)])
def test_paper_parameter_counts(name, n, d, dff):
    model = Transformer(**get_preset(name).model_kwargs())
    model.build()
    expected = expected_parameters(37_000, n, d, dff)
    assert model.count_params() == expected
    # About 63M (base) and 214M (big); the paper reports 65M / 213M.
    assert abs(expected - {"base": 63e6, "big": 214e6}[name]) < 1e6


@pytest.mark.parametrize("name, n, d, dff, millions", [("compact", 4, 128, 256, 2.35), ("small", 3, 256, 1024, 7.58)])
def test_cpu_preset_parameter_counts(name, n, d, dff, millions):
    # Pre-LN (norm_first) adds a final LayerNorm to the encoder and to the decoder.
    model = Transformer(**get_preset(name).model_kwargs())
    model.build()
    expected = expected_parameters(8000, n, d, dff) + 2 * (2 * d)
    assert model.count_params() == expected
    assert round(expected / 1e6, 2) == millions  # Transformer-Tiny's size for compact (Wu et al., 2021)


def test_untied_and_learned_positions_parameter_counts():
    untied = _tiny(tie_embeddings=False)
    untied.build()
    assert untied.count_params() == expected_parameters(64, 2, 32, 64, tied=False)
    learned = _tiny(learned_positions=True)
    learned.build()
    assert learned.count_params() == expected_parameters(64, 2, 32, 64, learned_max_length=32)
    with pytest.raises(ValueError, match="max_length"):
        learned.init_cache(learned.encode(SRC), SRC, max_length=33)


def test_tied_weights_are_one_variable():
    model = _tiny()
    model((SRC, TGT))
    embeddings = [w for w in model.weights if "embedding" in w.path]
    assert len(embeddings) == 1 and embeddings[0].shape == (64, 32)
    x = np.random.RandomState(0).randn(1, 2, 32).astype("float32")
    np.testing.assert_allclose(_np(model._logits(x)), x @ _np(embeddings[0]).T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_call_shape_dtype_and_no_mask_on_logits(tie_embeddings):
    model = _tiny(tie_embeddings=tie_embeddings)
    logits = model((SRC, TGT))
    assert logits.shape == (2, 4, 64)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    # Padding is masked by the loss (ignore_class / pad id), not by a Keras
    # mask that keras.losses.Loss would apply a second time.
    assert getattr(logits, "_keras_mask", None) is None


def test_padding_invariance_eager_graph_and_xla():
    model = _tiny()
    src = np.array([[5, 6, 7, 3]], "int32")
    tgt = np.array([[2, 8, 9]], "int32")
    src_pad = np.pad(src, ((0, 0), (0, 20)))
    tgt_pad = np.pad(tgt, ((0, 0), (0, 20)))
    reference = _np(model((src, tgt)))
    graph = tf.function(lambda s, t: model((s, t)))
    xla = tf.function(lambda s, t: model((s, t)), jit_compile=True)
    eager = lambda s, t: model((s, t))  # noqa: E731
    for run, cases in (
        (eager, ((src, tgt), (src_pad, tgt), (src, tgt_pad), (src_pad, tgt_pad))),
        (graph, ((src, tgt), (src_pad, tgt_pad))),
        (xla, ((src, tgt), (src_pad, tgt_pad))),
    ):
        for s, t in cases:
            np.testing.assert_allclose(_np(run(s, t))[:, :3], reference, rtol=1e-4, atol=1e-4)


def test_decoder_causality():
    model = _tiny()
    logits = _np(model((SRC, TGT)))
    changed = TGT.copy()
    changed[0, 2] = 40
    logits2 = _np(model((SRC, changed)))
    np.testing.assert_allclose(logits2[0, :2], logits[0, :2], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logits2[1], logits[1], rtol=1e-5, atol=1e-5)
    assert not np.allclose(logits2[0, 2:], logits[0, 2:])


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True, "tie_embeddings": False, "learned_positions": True}])
def test_cached_decode_step_matches_decode(overrides):
    model = _tiny(**overrides)
    tgt = np.array([[2, 11, 12, 13, 14], [2, 14, 15, 16, 17]], "int32")
    encoder_outputs = model.encode(SRC)
    full = _np(model.decode(tgt, encoder_outputs, SRC))

    def run(step_fn):
        cache = model.init_cache(encoder_outputs, SRC, max_length=8)
        for t in range(5):
            logits, cache = step_fn(tf.constant(tgt[:, t]), tf.constant(t, tf.int32), cache)
            assert keras.backend.standardize_dtype(logits.dtype) == "float32"
            np.testing.assert_allclose(_np(logits), full[:, t], rtol=1e-4, atol=1e-4)

    run(model.decode_step)
    run(tf.function(model.decode_step, jit_compile=True))
    # A growing cache (graph-mode decoding) gives the same logits and holds exactly t + 1 positions.
    cache = model.init_cache(encoder_outputs, SRC)
    for t in range(5):
        logits, cache = model.decode_step(tf.constant(tgt[:, t]), tf.constant(t, tf.int32), cache)
        assert cache["layer_0"]["prefix_key"].shape[2] == t + 1
        np.testing.assert_allclose(_np(logits), full[:, t], rtol=1e-4, atol=1e-4)


def test_get_config_and_keras_round_trip(tmp_path):
    model = _tiny(dropout_rate=0.1)
    expected = _np(model((SRC, TGT)))
    clone = Transformer.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, Transformer)
    np.testing.assert_allclose(_np(loaded((SRC, TGT))), expected, rtol=1e-6, atol=1e-6)
    untied = _tiny(tie_embeddings=False)
    expected = _np(untied((SRC, TGT)))
    untied.save(path)
    np.testing.assert_allclose(
        _np(keras.saving.load_model(path, safe_mode=True)((SRC, TGT))), expected, rtol=1e-6, atol=1e-6
    )



def _attention_dropout_rates(model):
    encoder = [layer.self_attention.dropout.rate for layer in model.encoder.encoder_layers]
    decoder = [rate for layer in model.decoder.decoder_layers
               for rate in (layer.self_attention.dropout.rate, layer.cross_attention.dropout.rate)]
    return encoder + decoder


def test_attention_dropout_rate_changes_training_outputs_only():
    keras.utils.set_random_seed(0)
    model = _tiny(attention_dropout_rate=0.3)  # tiny: dropout_rate 0, so attention dropout is the only noise
    assert _attention_dropout_rates(model) == [0.3] * 6
    assert _attention_dropout_rates(_tiny()) == [0.0] * 6
    plain = _tiny()
    model.build()
    plain.build()
    plain.set_weights(model.get_weights())
    inference = _np(plain((SRC, TGT), training=False))
    np.testing.assert_array_equal(_np(model((SRC, TGT), training=False)), inference)
    np.testing.assert_array_equal(_np(plain((SRC, TGT), training=True)), inference)
    trained = _np(model((SRC, TGT), training=True))
    assert np.abs(trained - inference).max() > 1e-3
    assert np.abs(_np(model((SRC, TGT), training=True)) - trained).max() > 1e-3  # a new mask each call


def test_attention_dropout_rate_round_trips(tmp_path):
    model = _tiny(attention_dropout_rate=0.25)
    config = model.get_config()
    assert config["attention_dropout_rate"] == 0.25
    assert _attention_dropout_rates(Transformer.from_config(config)) == [0.25] * 6
    expected = _np(model((SRC, TGT), training=False))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True, compile=False)
    assert loaded.attention_dropout_rate == 0.25 and _attention_dropout_rates(loaded) == [0.25] * 6
    np.testing.assert_allclose(_np(loaded((SRC, TGT), training=False)), expected, rtol=1e-6, atol=1e-6)
    old = {k: v for k, v in config.items() if k != "attention_dropout_rate"}  # a config saved before the argument
    assert Transformer.from_config(old).attention_dropout_rate == 0.0
    for stack in (model.encoder, model.decoder):
        assert stack.get_config()["attention_dropout_rate"] == 0.25
        assert type(stack).from_config(stack.get_config()).get_config() == stack.get_config()
    kwargs = get_preset("tiny").model_kwargs()
    with pytest.raises(ValueError, match=r"Transformer: attention_dropout_rate must be in \[0, 1\), got 1.0"):
        Transformer(**{**kwargs, "attention_dropout_rate": 1.0})
    with pytest.raises(ValueError, match=r"Decoder: attention_dropout_rate must be in \[0, 1\), got -0.1"):
        type(model.decoder)(num_layers=1, d_model=8, num_heads=2, dff=8, attention_dropout_rate=-0.1)

def _train(model, steps):
    # Plain SGD and no XLA: cheap to trace on a loaded 2-core CPU.
    model.compile(
        jit_compile=False,
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
    )
    target_out = np.array([[11, 12, 13, 3], [14, 15, 3, 0]], "int32")
    history = model.fit((SRC, TGT), target_out, batch_size=2, epochs=steps, verbose=0)
    return history.history["loss"]


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_trains_and_decodes(policy, restore_policy):
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(0)
    model = _tiny()
    assert model.compute_dtype == policy.split("_")[1]
    losses = _train(model, 6)
    assert {keras.backend.standardize_dtype(w.dtype) for w in model.weights} == {"float32"}
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0], losses
    encoder_outputs = model.encode(SRC)
    cache = model.init_cache(encoder_outputs, SRC, max_length=4)
    logits, cache = model.decode_step(tf.constant([2, 2]), tf.constant(0), cache)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert np.all(np.isfinite(_np(logits)))


def test_with_dtype_policy_copies_weights_into_float32(restore_policy):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    model = _tiny()
    model((SRC, TGT))
    keras.mixed_precision.set_global_policy("float32")
    copy = model.with_dtype_policy("float32")
    assert model.compute_dtype == "bfloat16" and copy.compute_dtype == "float32"
    assert copy is not model and copy.with_dtype_policy("float32") is copy
    for a, b in zip(model.get_weights(), copy.get_weights()):
        np.testing.assert_array_equal(a, b)
    # The same function, computed in float32 instead of bfloat16 (8 bits of mantissa).
    expected = _np(model((SRC, TGT)))
    got = _np(copy((SRC, TGT)))
    assert np.abs(got - expected).max() < 0.1 * np.abs(expected).max()
    reference = _np(_tiny().with_dtype_policy("float32")((SRC, TGT)))  # another model: far away
    assert np.abs(got - expected).max() < np.abs(reference - expected).max()


def test_bad_hyper_parameters():
    with pytest.raises(ValueError, match="divisible"):
        Transformer(vocab_size=10, num_layers=1, d_model=10, num_heads=3, dff=8, dropout_rate=0.0, max_length=8)
    with pytest.raises(ValueError, match="vocab_size"):
        Transformer(vocab_size=0)
