"""DecoderLayer and the Decoder stack (Section 3.1)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import DecoderLayer
from keras_transformer.model import Decoder


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _inputs(seed=0, t=4, s=7):
    rng = np.random.RandomState(seed)
    return rng.randn(2, t, 16).astype("float32"), rng.randn(2, s, 16).astype("float32")


def test_shape_and_causality():
    layer = DecoderLayer(d_model=16, num_heads=2, dff=32, dropout_rate=0.0)
    y, enc = _inputs()
    out = _np(layer(y, enc))
    assert out.shape == (2, 4, 16)
    changed = y.copy()
    changed[:, 2:] += 5.0  # change positions 2 and 3
    out2 = _np(layer(changed, enc))
    np.testing.assert_allclose(out2[:, :2], out[:, :2], rtol=1e-6, atol=1e-6)
    assert not np.allclose(out2[:, 2:], out[:, 2:])


def test_cross_attention_ignores_padded_source():
    layer = DecoderLayer(d_model=16, num_heads=2, dff=32, dropout_rate=0.0)
    y, enc = _inputs(1, t=3, s=7)
    src_mask = np.array([[1, 1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0, 0]], bool)
    out, weights = layer(y, enc, encoder_padding_mask=src_mask, return_attention_scores=True)
    w = _np(weights)
    assert w.shape == (2, 2, 3, 7)
    assert np.all(w[0, :, :, 5:] == 0.0) and np.all(w[1, :, :, 2:] == 0.0)
    garbage = enc.copy()
    garbage[~src_mask] = 100.0
    out2 = layer(y, garbage, encoder_padding_mask=src_mask)
    np.testing.assert_array_equal(_np(out2), _np(out))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_cache_matches_full_decoding(norm_first):
    decoder = Decoder(num_layers=2, d_model=16, num_heads=2, dff=32, dropout_rate=0.0, norm_first=norm_first)
    y, enc = _inputs(2, t=4, s=5)
    src_mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    full = _np(decoder(y, enc, encoder_padding_mask=src_mask))
    cache = decoder.init_cache(tf.constant(enc), max_length=6)
    assert cache["layer_1"]["self_key"].shape == (2, 2, 6, 8)  # [batch, heads, max_length, depth]
    assert cache["layer_1"]["cross_value"].shape == (2, 2, 5, 8)
    grown = decoder.init_cache(tf.constant(enc))  # growing cache: no position yet
    assert grown["layer_1"]["prefix_key"].shape == (2, 2, 0, 8)
    for t in range(4):
        out, cache = decoder(y[:, t : t + 1], encoder_padding_mask=src_mask, cache=cache, cache_index=t)
        np.testing.assert_allclose(_np(out)[:, 0], full[:, t], rtol=1e-5, atol=1e-5)
        out, grown = decoder(y[:, t : t + 1], encoder_padding_mask=src_mask, cache=grown)
        assert grown["layer_0"]["prefix_value"].shape == (2, 2, t + 1, 8)
        np.testing.assert_allclose(_np(out)[:, 0], full[:, t], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="cache_index"):
        decoder(y[:, :1], encoder_padding_mask=src_mask, cache=cache)


def test_errors_and_config():
    layer = DecoderLayer(d_model=16, num_heads=2, dff=32)
    with pytest.raises(ValueError, match="encoder_outputs"):
        layer(np.zeros((1, 2, 16), "float32"))
    assert DecoderLayer.from_config(layer.get_config()).get_config() == layer.get_config()
    decoder = Decoder(num_layers=1, d_model=16, num_heads=2, dff=32)
    assert Decoder.from_config(decoder.get_config()).get_config() == decoder.get_config()
