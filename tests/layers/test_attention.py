"""scaled_dot_product_attention (Eq. 1) and MultiHeadAttention (Section 3.2.2)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import MultiHeadAttention, scaled_dot_product_attention


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_scaled_dot_product_known_example():
    # One head, d_k = 4: Q K^T / 2.
    q = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 0.0]], "float32")
    k = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [2.0, 2.0, 0.0, 0.0]], "float32")
    v = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "float32")
    # Scores by hand: row 0: [2, 0, 2] / 2 = [1, 0, 1]; row 1: [0, 2, 4] / 2 = [0, 1, 2].
    w0 = np.exp([1.0, 0.0, 1.0]) / np.exp([1.0, 0.0, 1.0]).sum()
    w1 = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    out, weights = scaled_dot_product_attention(q[None, None], k[None, None], v[None, None])
    np.testing.assert_allclose(_np(weights)[0, 0], np.stack([w0, w1]), rtol=1e-6)
    np.testing.assert_allclose(_np(out)[0, 0], np.stack([w0 @ v, w1 @ v]), rtol=1e-6)
    # Masking key 2 of row 0: weights over keys 0, 1 only.
    mask = np.array([[True, True, False], [True, True, True]])
    _, weights = scaled_dot_product_attention(q[None, None], k[None, None], v[None, None], mask[None, None])
    m0 = np.exp([1.0, 0.0]) / np.exp([1.0, 0.0]).sum()
    np.testing.assert_allclose(_np(weights)[0, 0, 0], [m0[0], m0[1], 0.0], rtol=1e-6)


def test_scaled_dot_product_rejects_bad_rank():
    with pytest.raises(ValueError, match="rank 4"):
        scaled_dot_product_attention(np.zeros((2, 3, 4)), np.zeros((2, 3, 4)), np.zeros((2, 3, 4)))


def test_multi_head_matches_numpy():
    rng = np.random.RandomState(0)
    mha = MultiHeadAttention(d_model=8, num_heads=2)
    x = rng.randn(2, 3, 8).astype("float32")
    m = rng.randn(2, 5, 8).astype("float32")
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], bool)
    out, weights = mha(x, m, attention_mask=mask, return_attention_scores=True)
    wq, bq, wk, bk, wv, bv, wo, bo = (_np(w) for w in mha.weights)
    q = (x @ wq + bq).reshape(2, 3, 2, 4).transpose(0, 2, 1, 3)
    k = (m @ wk + bk).reshape(2, 5, 2, 4).transpose(0, 2, 1, 3)
    v = (m @ wv + bv).reshape(2, 5, 2, 4).transpose(0, 2, 1, 3)
    scores = q @ k.transpose(0, 1, 3, 2) / 2.0
    scores = np.where(mask[:, None, None, :], scores, -np.inf)
    w = _softmax(scores)
    heads = (w @ v).transpose(0, 2, 1, 3).reshape(2, 3, 8)
    np.testing.assert_allclose(_np(weights), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(out), heads @ wo + bo, rtol=1e-5, atol=1e-5)


def test_eight_heads_of_64_cost_one_head_of_512():
    expected = 4 * (512 * 512 + 512)  # W^Q, W^K, W^V, W^O with biases
    for heads in (8, 1):
        mha = MultiHeadAttention(d_model=512, num_heads=heads)
        mha.build((None, None, 512))
        assert mha.count_params() == expected


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_padded_key_gets_exactly_zero_weight(dtype):
    rng = np.random.RandomState(1)
    mha = MultiHeadAttention(d_model=8, num_heads=2, dtype=dtype)
    x = rng.randn(2, 4, 8).astype("float32") * 10.0
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], bool)
    out, weights = mha(x, attention_mask=mask, return_attention_scores=True)
    assert keras.backend.standardize_dtype(weights.dtype) == "float32"
    assert keras.backend.standardize_dtype(out.dtype) == dtype
    w = _np(weights)
    assert np.all(w[0, :, :, 3] == 0.0)
    assert np.all(w[1, :, :, 1:] == 0.0)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-6)
    assert np.all(np.isfinite(_np(keras.ops.cast(out, "float32"))))


def test_fully_masked_row_gives_zeros_not_nan():
    mha = MultiHeadAttention(d_model=8, num_heads=2, use_bias=False)
    x = np.random.RandomState(2).randn(1, 3, 8).astype("float32")
    full = np.ones((1, 3, 3), bool)
    full[0, 1, :] = False  # query 1 may attend nothing
    out, weights = mha(x, attention_mask=full, return_attention_scores=True)
    assert np.all(_np(weights)[0, :, 1] == 0.0)
    np.testing.assert_array_equal(_np(out)[0, 1], np.zeros(8))  # no bias: exactly zero
    assert np.all(np.isfinite(_np(out)))


def test_causal_mask_and_incremental_cache_match():
    rng = np.random.RandomState(3)
    mha = MultiHeadAttention(d_model=8, num_heads=2)
    x = rng.randn(2, 5, 8).astype("float32")
    full, weights = mha(x, use_causal_mask=True, return_attention_scores=True)
    w = _np(weights)
    assert np.all(np.triu(np.ones((5, 5)), 1)[None, None] * w == 0.0)
    # Fixed buffer written at cache_index (XLA decoding).
    cache = {"key": tf.zeros((2, 2, 7, 4)), "value": tf.zeros((2, 2, 7, 4))}
    for t in range(5):
        out, cache = mha(x[:, t : t + 1], cache=cache, cache_index=tf.constant(t))
        np.testing.assert_allclose(_np(out)[:, 0], _np(full)[:, t], rtol=1e-5, atol=1e-5)
    assert np.all(_np(cache["key"])[:, :, 5:] == 0.0)
    # Growing cache (graph-mode decoding): the same outputs, and the buffer holds exactly the
    # keys/values written into the fixed buffer.
    grown = {"key": tf.zeros((2, 2, 0, 4)), "value": tf.zeros((2, 2, 0, 4))}
    for t in range(5):
        out, grown = mha(x[:, t : t + 1], cache=grown, append_to_cache=True)
        assert grown["key"].shape == (2, 2, t + 1, 4)
        np.testing.assert_allclose(_np(out)[:, 0], _np(full)[:, t], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(grown["value"]), _np(cache["value"])[:, :, :5], rtol=1e-6, atol=1e-6)
    # A rank-2 query (one position per row, no time axis): the same outputs, shaped [batch, d_model].
    flat = {"key": tf.zeros((2, 2, 0, 4)), "value": tf.zeros((2, 2, 0, 4))}
    for t in range(5):
        out, flat = mha(x[:, t], cache=flat, append_to_cache=True)
        assert out.shape == (2, 8)
        np.testing.assert_allclose(_np(out), _np(full)[:, t], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="one query position"):
        mha(x[:, :2], cache=cache, cache_index=0)
    with pytest.raises(ValueError, match="one query position"):
        mha(x[:, :2], cache=grown, append_to_cache=True)
    with pytest.raises(ValueError, match="not both"):
        mha(x[:, :1], cache=cache, cache_index=0, append_to_cache=True)


def test_precomputed_cross_attention_cache():
    rng = np.random.RandomState(4)
    mha = MultiHeadAttention(d_model=8, num_heads=2)
    q = rng.randn(2, 3, 8).astype("float32")
    m = rng.randn(2, 6, 8).astype("float32")
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    expected = mha(q, m, attention_mask=mask)
    kv = mha.compute_key_value(m)
    assert kv["key"].shape == (2, 2, 6, 4)  # heads first
    out, same = mha(q, cache=kv, attention_mask=mask)
    np.testing.assert_array_equal(_np(same["key"]), _np(kv["key"]))
    np.testing.assert_allclose(_np(out), _np(expected), rtol=1e-6, atol=1e-6)


def test_bad_arguments_and_config():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(d_model=10, num_heads=3)
    mha = MultiHeadAttention(d_model=8, num_heads=2)
    with pytest.raises(ValueError, match="attention_mask"):
        mha(np.zeros((1, 2, 8), "float32"), attention_mask=np.ones((1, 1, 2, 2), bool))
    assert MultiHeadAttention.from_config(mha.get_config()).get_config() == mha.get_config()
