"""PositionalEmbedding and sinusoidal_encoding (Sections 3.4-3.5)."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import PositionalEmbedding, sinusoidal_encoding


def test_sinusoid_values_by_hand():
    d_model = 16
    positions = [0, 1, 5, 37]
    pe = keras.ops.convert_to_numpy(sinusoidal_encoding(np.array(positions), d_model))
    assert pe.shape == (4, d_model)
    for row, pos in enumerate(positions):
        for dim in (0, 1, 2, 3, 6, 7, 14, 15):
            i = dim // 2
            angle = pos / 10000 ** (2 * i / d_model)
            expected = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
            assert pe[row, dim] == pytest.approx(expected, abs=1e-5), (pos, dim)


def test_sinusoid_rejects_odd_width():
    with pytest.raises(ValueError, match="even"):
        sinusoidal_encoding(np.arange(3), 7)


def test_output_is_scaled_embedding_plus_sinusoid():
    layer = PositionalEmbedding(vocab_size=20, d_model=8)
    ids = np.array([[4, 9, 3, 0, 0]])
    x = keras.ops.convert_to_numpy(layer(ids))
    table = keras.ops.convert_to_numpy(layer.embeddings)
    expected = table[ids[0]] * math.sqrt(8)
    for pos in range(5):
        for dim in range(8):
            angle = pos / 10000 ** (2 * (dim // 2) / 8)
            expected[pos, dim] += math.sin(angle) if dim % 2 == 0 else math.cos(angle)
    np.testing.assert_allclose(x[0], expected, atol=1e-5)
    mask = keras.ops.convert_to_numpy(layer.compute_mask(ids))
    np.testing.assert_array_equal(mask, [[True, True, True, False, False]])


def test_sinusoids_are_not_limited_by_max_length():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=4)
    assert layer(np.ones((2, 50), "int32")).shape == (2, 50, 8)


def test_start_index_matches_full_sequence():
    layer = PositionalEmbedding(vocab_size=20, d_model=8)
    ids = np.array([[4, 9, 3, 7, 5]])
    full = keras.ops.convert_to_numpy(layer(ids))
    one = keras.ops.convert_to_numpy(layer(ids[:, 3:4], start_index=tf.constant(3)))
    np.testing.assert_allclose(one[:, 0], full[:, 3], atol=1e-6)


def test_logits_use_the_same_matrix():
    layer = PositionalEmbedding(vocab_size=11, d_model=4)
    layer.build()
    x = np.random.RandomState(0).randn(2, 3, 4).astype("float32")
    expected = x @ keras.ops.convert_to_numpy(layer.embeddings).T
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.logits(x)), expected, rtol=1e-5, atol=1e-5)


def test_learned_positions_table_and_errors():
    layer = PositionalEmbedding(vocab_size=20, d_model=6, max_length=5, learned_positions=True)
    ids = np.array([[4, 9, 3]])
    x = keras.ops.convert_to_numpy(layer(ids))
    expected = keras.ops.convert_to_numpy(layer.embeddings)[ids[0]] * math.sqrt(6) + keras.ops.convert_to_numpy(
        layer.position_embeddings
    )[:3]
    np.testing.assert_allclose(x[0], expected, atol=1e-5)
    with pytest.raises(ValueError, match="max_length"):
        layer(np.ones((1, 6), "int32"))

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def dynamic(ids):
        return layer(ids)

    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length"):
        dynamic(tf.ones((1, 6), tf.int32))
    with pytest.raises(ValueError, match="max_length"):
        PositionalEmbedding(vocab_size=20, d_model=6, learned_positions=True)


def test_bad_arguments():
    with pytest.raises(ValueError, match="vocab_size"):
        PositionalEmbedding(vocab_size=0, d_model=8)
    with pytest.raises(ValueError, match="dropout_rate"):
        PositionalEmbedding(vocab_size=5, d_model=8, dropout_rate=1.5)


def test_config_round_trip():
    layer = PositionalEmbedding(vocab_size=20, d_model=6, max_length=5, learned_positions=True, dropout_rate=0.1)
    clone = PositionalEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
