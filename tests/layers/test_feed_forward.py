"""FeedForward (Section 3.3, Eq. 2)."""

import keras
import numpy as np

from keras_transformer.layers import FeedForward


def test_values_and_parameters():
    ffn = FeedForward(d_model=6, dff=10)
    x = np.random.RandomState(0).randn(2, 3, 6).astype("float32")
    out = keras.ops.convert_to_numpy(ffn(x))
    assert out.shape == (2, 3, 6)
    w1, b1, w2, b2 = (keras.ops.convert_to_numpy(w) for w in ffn.weights)
    expected = np.maximum(0.0, x @ w1 + b1) @ w2 + b2
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert ffn.count_params() == 6 * 10 + 10 + 10 * 6 + 6
    assert FeedForward.from_config(ffn.get_config()).get_config() == ffn.get_config()
