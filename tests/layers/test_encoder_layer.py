"""EncoderLayer and the Encoder stack (Section 3.1)."""

import keras
import numpy as np
import pytest

from keras_transformer.layers import EncoderLayer
from keras_transformer.model import Encoder


def _np(x):
    return keras.ops.convert_to_numpy(x)


def test_post_ln_output_is_normalized_per_position():
    layer = EncoderLayer(d_model=16, num_heads=2, dff=32, dropout_rate=0.0)
    x = np.random.RandomState(0).randn(2, 5, 16).astype("float32") * 3.0 + 1.0
    out = _np(layer(x))
    assert out.shape == (2, 5, 16)
    # Post-LN (paper): the last op is LayerNorm with gamma=1, beta=0 at init.
    np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.std(-1), 1.0, atol=1e-3)


def test_pre_ln_adds_residuals_to_the_raw_input():
    layer = EncoderLayer(d_model=16, num_heads=2, dff=32, dropout_rate=0.0, norm_first=True)
    x = np.random.RandomState(0).randn(2, 5, 16).astype("float32") * 3.0 + 1.0
    out = _np(layer(x))
    # Pre-LN: x + attn(LN(x)) + ffn(LN(.)); recompute with the sub-layers.
    h = x + _np(layer.self_attention(layer.self_attention_norm(x)))
    expected = h + _np(layer.feed_forward(layer.feed_forward_norm(h)))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_padding_does_not_change_real_positions():
    layer = EncoderLayer(d_model=16, num_heads=2, dff=32, dropout_rate=0.0)
    rng = np.random.RandomState(1)
    x = rng.randn(1, 4, 16).astype("float32")
    padded = np.concatenate([x, rng.randn(1, 6, 16).astype("float32")], axis=1)
    mask = np.array([[True] * 4 + [False] * 6])
    np.testing.assert_allclose(_np(layer(padded, mask=mask))[:, :4], _np(layer(x)), rtol=1e-5, atol=1e-5)


def test_encoder_without_positions_is_permutation_equivariant():
    encoder = Encoder(num_layers=2, d_model=16, num_heads=2, dff=32, dropout_rate=0.0)
    rng = np.random.RandomState(2)
    x = rng.randn(2, 6, 16).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], bool)
    perm = np.array([3, 0, 5, 1, 4, 2])
    out = _np(encoder(x, mask=mask))
    out_perm = _np(encoder(x[:, perm], mask=mask[:, perm]))
    np.testing.assert_allclose(out_perm, out[:, perm], rtol=1e-5, atol=1e-5)


def test_encoder_pre_ln_has_final_norm_and_config():
    encoder = Encoder(num_layers=2, d_model=16, num_heads=2, dff=32, norm_first=True)
    out = _np(encoder(np.random.RandomState(3).randn(1, 3, 16).astype("float32")))
    np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-5)
    assert Encoder.from_config(encoder.get_config()).get_config() == encoder.get_config()
    layer = encoder.encoder_layers[0]
    assert EncoderLayer.from_config(layer.get_config()).get_config() == layer.get_config()
    with pytest.raises(ValueError, match="divisible"):
        Encoder(num_layers=1, d_model=10, num_heads=3, dff=8)
