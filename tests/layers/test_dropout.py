"""Dropout with 16-bit draws (Section 5.4)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import Dropout
from keras_transformer.layers.dropout import dropout_threshold


def test_threshold_and_scale_are_exact_to_one_in_65536():
    assert dropout_threshold(0.2) == (13107, 65536 / 52429)
    assert dropout_threshold(0.0) == (0, 1.0)
    assert dropout_threshold(0.5) == (32768, 2.0)
    for rate in (0.1, 0.3, 0.999999):
        threshold, scale = dropout_threshold(rate)
        assert abs(threshold / 65536 - rate) <= 1 / 65536 and scale == 65536 / (65536 - threshold)


@pytest.mark.parametrize("rate", [1.0, -0.1])
def test_rejects_a_bad_rate(rate):
    with pytest.raises(ValueError, match="rate must be in"):
        Dropout(rate)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_drops_at_the_rate_and_keeps_the_expectation(dtype):
    layer = Dropout(0.2, seed=3, dtype=dtype)
    x = tf.cast(tf.fill([64, 37, 129], 3.0), dtype)  # an odd number of elements
    y = tf.cast(layer(x, training=True), tf.float32).numpy()
    kept = y != 0
    n = y.size
    # Binomial(n, 0.8): 5 standard deviations.
    assert abs(kept.mean() - 0.8) < 5 * np.sqrt(0.2 * 0.8 / n)
    want = np.float32(tf.cast(tf.cast(3.0 * 65536 / 52429, dtype), tf.float32).numpy())
    np.testing.assert_allclose(y[kept], want, rtol=1e-2 if dtype == "bfloat16" else 1e-6)
    assert abs(y.mean() / 3.0 - 1.0) < 0.01


def test_each_call_draws_anew_and_inference_is_the_identity():
    layer = Dropout(0.5, seed=1)
    x = tf.ones([8, 16])
    a, b = layer(x, training=True).numpy(), layer(x, training=True).numpy()
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(Dropout(0.0)(x, training=True).numpy(), x.numpy())


def test_the_same_seed_gives_the_same_mask_and_a_graph_gives_it_too():
    x = tf.ones([5, 7, 9])
    first = Dropout(0.3, seed=11)(x, training=True).numpy()
    second = Dropout(0.3, seed=11)(x, training=True).numpy()
    np.testing.assert_array_equal(first, second)
    layer = Dropout(0.3, seed=11)
    graph = tf.function(lambda t: layer(t, training=True))(x).numpy()
    np.testing.assert_array_equal(graph, first)


def test_gradient_is_the_mask_times_the_scale():
    layer = Dropout(0.25, seed=2)
    x = tf.random.normal([6, 10])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        total = tf.reduce_sum(y)
    grad = tape.gradient(total, x).numpy()
    mask = (y.numpy() != 0) | (x.numpy() == 0)
    np.testing.assert_allclose(grad, np.where(mask, 65536 / (65536 - 16384), 0.0), rtol=1e-6)


def test_serializes_as_keras_dropout_does():
    layer = Dropout(0.2, seed=4, name="drop")
    clone = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(clone) is Dropout and clone.rate == 0.2 and clone.name == "drop"
