"""The cheaper forms a decoding step uses give the same values as the layers' own.

* ``layer_norm_rows`` (9 ops) equals Keras' ``LayerNormalization`` on ``[batch, d_model]`` rows;
* an additive source bias equals the boolean source mask in attention;
* a Translator with its own ``[d_model, vocab]`` copy of the output projection
  (``cache_output_matrix``) translates exactly as one without, and an export
  carries that copy.
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import Translator
from keras_transformer.export import export_saved_model
from keras_transformer.layers.attention import MASK_VALUE, attention_weights, mask_to_bias
from keras_transformer.layers.residual import layer_norm_rows

MAX_LENGTH = 20
SENTENCES = ["A dog runs in the park.", "Two men are playing soccer near a tree.", "", "A woman sings."]


def _norm(width, seed):
    norm = keras.layers.LayerNormalization(epsilon=1e-6)
    norm.build((None, width))
    rng = np.random.default_rng(seed)
    norm.gamma.assign(rng.normal(1.0, 0.5, width).astype("float32"))
    norm.beta.assign(rng.normal(0.0, 0.5, width).astype("float32"))
    return norm


def test_layer_norm_rows_equals_keras_layer_norm():
    norm = _norm(48, 0)
    x = tf.constant(np.random.default_rng(1).normal(3.0, 2.0, (5, 48)).astype("float32"))
    got = layer_norm_rows(norm, x).numpy()
    np.testing.assert_allclose(got, norm(x).numpy(), rtol=1e-5, atol=1e-5)
    # Each row: mean beta-weighted, and the normalized part has unit variance.
    normalized = (got - norm.beta.numpy()) / norm.gamma.numpy()
    np.testing.assert_allclose(normalized.mean(axis=-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(normalized.var(axis=-1), 1.0, rtol=1e-4)


def test_layer_norm_rows_leaves_other_inputs_to_the_layer():
    norm = _norm(8, 2)
    x3 = tf.random.normal([2, 3, 8])  # a sequence, not a step's rows
    np.testing.assert_array_equal(layer_norm_rows(norm, x3).numpy(), norm(x3).numpy())
    x16 = tf.cast(tf.random.normal([2, 8]), tf.bfloat16)
    np.testing.assert_array_equal(layer_norm_rows(norm, x16).numpy(), norm(x16).numpy())


def test_attention_bias_equals_the_mask():
    rng = np.random.default_rng(3)
    query = tf.constant(rng.normal(size=(2, 4, 1, 8)).astype("float32"))
    key = tf.constant(rng.normal(size=(2, 4, 6, 8)).astype("float32"))
    mask = tf.constant([[True] * 4 + [False] * 2, [True] * 6])[:, None, None, :]
    bias = mask_to_bias(mask)
    assert bias.dtype == tf.float32
    np.testing.assert_array_equal(bias.numpy()[0, 0, 0], [0, 0, 0, 0, MASK_VALUE, MASK_VALUE])
    by_bias = attention_weights(query, key, bias=bias).numpy()
    np.testing.assert_allclose(by_bias, attention_weights(query, key, mask).numpy(), rtol=1e-6, atol=1e-7)
    assert (by_bias[0, :, :, 4:] == 0).all()  # masked keys get exactly 0 weight
    np.testing.assert_allclose(by_bias.sum(axis=-1), 1.0, rtol=1e-6)


def test_cached_output_matrix_translates_the_same(model, tokenizer):
    plain = Translator(model, tokenizer, max_length=MAX_LENGTH, beam_size=3)
    cached = plain.with_settings(cache_output_matrix=True)
    assert plain.output_matrix is None and cached.get_config()["cache_output_matrix"] is True
    np.testing.assert_array_equal(cached.output_matrix.numpy(), model.embedding.embeddings.numpy().T)
    assert {k: v for k, v in cached.get_config().items() if k != "cache_output_matrix"} == \
        {k: v for k, v in plain.get_config().items() if k != "cache_output_matrix"}
    sentences = tf.constant(SENTENCES)
    for fn in ("translate", "translate_greedy", "translate_ids"):
        a, b = getattr(plain, fn)(sentences), getattr(cached, fn)(sentences)
        for name in a:
            np.testing.assert_array_equal(a[name].numpy(), b[name].numpy(), err_msg=f"{fn} {name}")
    translations = plain.translate(sentences)["translations"].numpy()
    assert len({t for t in translations if t}) == 3  # a real test: the sentences translate differently


def test_with_settings_rejects_unknown_names(model, tokenizer):
    translator = Translator(model, tokenizer, max_length=MAX_LENGTH)
    with pytest.raises(ValueError, match="unknown argument.*beams"):
        translator.with_settings(beams=2)
    with pytest.raises(ValueError, match="beam_size"):
        translator.with_settings(beam_size=0)


def test_export_carries_the_output_matrix(model, tokenizer, tmp_path):
    translator = Translator(model, tokenizer, max_length=MAX_LENGTH, beam_size=3)
    path = export_saved_model(translator, tmp_path / "export", version=1)
    with open(os.path.join(path, "assets.extra", "export_config.json"), encoding="utf-8") as f:
        assert json.load(f)["decoding"]["cache_output_matrix"] is True
    loaded = tf.saved_model.load(path)
    assert tuple(loaded.output_matrix.shape) == (model.d_model, model.vocab_size)
    np.testing.assert_array_equal(loaded.output_matrix.numpy(), model.embedding.embeddings.numpy().T)
    out = loaded.signatures["serving_default"](sentences=tf.constant(SENTENCES))
    np.testing.assert_array_equal(out["translations"].numpy(), translator.translate(tf.constant(SENTENCES))
                                  ["translations"].numpy())
