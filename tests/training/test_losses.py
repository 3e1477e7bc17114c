"""The label-smoothed masked loss (Section 5.4)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.training import MaskedLabelSmoothedCrossEntropy, masked_accuracy, token_losses


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def reference_loss(y, logits, eps):
    # Szegedy et al. (2016): q' = (1 - eps) * onehot + eps / V; loss = -sum q' log p over real tokens.
    logp = log_softmax(logits.astype(np.float64))
    vocab = logits.shape[-1]
    total, count = 0.0, 0
    for b in range(y.shape[0]):
        for t in range(y.shape[1]):
            if y[b, t] == 0:
                continue
            q = np.full(vocab, eps / vocab)
            q[y[b, t]] += 1 - eps
            total += -(q * logp[b, t]).sum()
            count += 1
    return total / count


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_matches_reference(eps):
    rng = np.random.default_rng(0)
    y = np.array([[5, 3, 0, 0], [1, 2, 6, 3]], np.int32)
    logits = rng.normal(size=(2, 4, 7)).astype(np.float32)
    loss = MaskedLabelSmoothedCrossEntropy(label_smoothing=eps)(y, logits)
    assert float(loss) == pytest.approx(reference_loss(y, logits, eps), rel=1e-5)


def test_ignores_padding():
    rng = np.random.default_rng(1)
    y = np.array([[5, 3, 0, 0, 0]], np.int32)
    logits = rng.normal(size=(1, 5, 7)).astype(np.float32)
    other = logits.copy()
    other[:, 2:] = rng.normal(size=(1, 3, 7)) * 100  # garbage at padded positions
    loss_fn = MaskedLabelSmoothedCrossEntropy(label_smoothing=0.1)
    assert float(loss_fn(y, logits)) == pytest.approx(float(loss_fn(y, other)), rel=1e-6)
    # Same real tokens, less padding: same value.
    assert float(loss_fn(y[:, :2], logits[:, :2])) == pytest.approx(float(loss_fn(y, logits)), rel=1e-6)


def test_all_padding_is_zero_not_nan():
    loss = MaskedLabelSmoothedCrossEntropy()(np.zeros((2, 3), np.int32), np.ones((2, 3, 5), np.float32))
    assert float(loss) == 0.0


def test_token_losses_float16_logits_are_computed_in_float32():
    logits = tf.constant(np.random.default_rng(2).normal(size=(1, 2, 9)) * 20, tf.float16)
    out = token_losses(tf.constant([[1, 2]]), logits, 0.1)
    assert out.dtype == tf.float32 and np.all(np.isfinite(out.numpy()))


def test_rejects_bad_smoothing():
    with pytest.raises(ValueError, match="label_smoothing"):
        MaskedLabelSmoothedCrossEntropy(label_smoothing=1.0)


def test_masked_accuracy():
    y = np.array([[1, 2, 0]], np.int32)
    logits = np.zeros((1, 3, 4), np.float32)
    logits[0, 0, 1] = 1  # right
    logits[0, 1, 3] = 1  # wrong
    logits[0, 2, 0] = 1  # padding: ignored although "right"
    assert float(masked_accuracy(y, logits)) == pytest.approx(0.5)


def reference_gradient(y, logits, eps):
    """d(mean loss over real tokens) / d logits, by hand: (softmax - q') / count at real tokens, 0 at padding."""
    z = logits.astype(np.float64)
    p = np.exp(log_softmax(z))
    vocab = logits.shape[-1]
    grad = np.zeros_like(z)
    count = int((y != 0).sum())
    for b in range(y.shape[0]):
        for t in range(y.shape[1]):
            if y[b, t] == 0:
                continue
            q = np.full(vocab, eps / vocab)
            q[y[b, t]] += 1 - eps
            grad[b, t] = (p[b, t] - q) / count
    return grad


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradient_matches_the_formula(eps):
    """The hand-written gradient is softmax - q' (per real token, over their count); padding gets 0."""
    rng = np.random.default_rng(3)
    y = np.array([[5, 3, 0, 0], [1, 2, 6, 3]], np.int32)
    logits = tf.constant(rng.normal(size=(2, 4, 7)).astype(np.float32) * 3)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = MaskedLabelSmoothedCrossEntropy(label_smoothing=eps)(y, logits)
    got = tape.gradient(loss, logits).numpy()
    want = reference_gradient(y, logits.numpy(), eps)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert np.all(got[0, 2:] == 0.0)


def test_gradient_in_the_logits_dtype_and_under_tf_function():
    """bfloat16 logits get a bfloat16 gradient equal to the float32 one up to bfloat16 rounding, in graph mode too."""
    rng = np.random.default_rng(4)
    y = tf.constant([[4, 9, 1, 0]], tf.int32)
    base = rng.normal(size=(1, 4, 11)).astype(np.float32)

    @tf.function
    def grad(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = MaskedLabelSmoothedCrossEntropy(label_smoothing=0.1)(y, logits)
        return tape.gradient(loss, logits)

    full = grad(tf.constant(base)).numpy()
    half = grad(tf.cast(tf.constant(base), tf.bfloat16))
    assert half.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(half, tf.float32).numpy(), full, atol=2e-3)
    np.testing.assert_allclose(full, reference_gradient(y.numpy(), base.astype(np.float32), 0.1), atol=1e-6)


def test_token_losses_gradient_with_any_upstream_and_large_logits():
    """d(sum_t w_t loss_t)/dz_t = w_t (softmax(z_t) - q'_t) for weights of either sign, and logits in the hundreds."""
    rng = np.random.default_rng(5)
    y = tf.constant([[2, 0, 5], [1, 4, 3]], tf.int32)
    logits = tf.constant(rng.normal(size=(2, 3, 6)).astype(np.float32) * 300)
    weights = tf.constant([[0.5, -2.0, 1.5], [0.0, 3.0, -0.25]], tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        losses = token_losses(y, logits, 0.1)
        weighted = tf.reduce_sum(losses * weights)
    got = tape.gradient(weighted, logits).numpy()
    z = logits.numpy().astype(np.float64)
    p = np.exp(log_softmax(z))
    q = np.full(z.shape, 0.1 / 6)
    for b in range(2):
        for t in range(3):
            q[b, t, y.numpy()[b, t]] += 0.9
    np.testing.assert_allclose(got, weights.numpy()[..., None] * (p - q), rtol=1e-5, atol=1e-6)
    want_losses = -(q * log_softmax(z)).sum(-1)
    np.testing.assert_allclose(losses.numpy(), want_losses, rtol=1e-5)
