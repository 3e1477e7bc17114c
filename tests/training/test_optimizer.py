"""FusedAdam: Keras Adam's update in one ResourceApplyAdam kernel per variable (Section 5.3)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.training.optimizer import FusedAdam
from keras_transformer.training.schedule import WarmupSchedule, paper_optimizer

SHAPES = [(7, 5), (5,), (3, 4, 2)]


def _run(optimizer, steps=6, seed=0, graph=True):
    """Variables and slots after ``steps`` updates with fixed random gradients (magnitudes ~1, never ~0)."""
    rng = np.random.default_rng(seed)
    variables = [keras.Variable(rng.normal(size=s).astype("float32"), name=f"w{i}") for i, s in enumerate(SHAPES)]
    grads = [[(rng.normal(size=s) + np.sign(rng.normal(size=s))).astype("float32") for s in SHAPES]
             for _ in range(steps)]
    apply = optimizer.apply_gradients
    if graph:
        apply = tf.function(lambda g: optimizer.apply_gradients(zip(g, variables)), autograph=False)
    for step_grads in grads:
        if graph:
            apply([tf.constant(g) for g in step_grads])
        else:
            optimizer.apply_gradients(zip([tf.constant(g) for g in step_grads], variables))
    return [v.numpy() for v in variables], [v.numpy() for v in optimizer.variables]


@pytest.mark.parametrize("graph", [True, False], ids=["tf.function", "eager"])
def test_same_update_as_keras_adam(graph):
    def make(cls):
        return cls(WarmupSchedule(d_model=16, warmup_steps=3, scale=50.0), beta_1=0.9, beta_2=0.98, epsilon=1e-9)

    fused_vars, fused_slots = _run(make(FusedAdam), graph=graph)
    keras_vars, keras_slots = _run(make(keras.optimizers.Adam), graph=graph)
    start, _ = _run(make(keras.optimizers.Adam), steps=0)
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(keras_vars, start)) > 0.05  # the weights really moved
    for a, b in zip(fused_vars, keras_vars):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert len(fused_slots) == len(keras_slots) == 1 + 2 * len(SHAPES)  # iterations, then m and v
    for a, b in zip(fused_slots, keras_slots):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_one_kernel_per_variable_in_the_traced_update():
    def op_types(optimizer):
        variables = [keras.Variable(np.ones(s, "float32")) for s in SHAPES]
        optimizer.build(variables)
        fn = tf.function(lambda g: optimizer.apply_gradients(zip(g, variables)), autograph=False)
        graph = fn.get_concrete_function([tf.TensorSpec(s, tf.float32) for s in SHAPES]).graph
        return [op.type for op in graph.get_operations()]

    fused, plain = op_types(FusedAdam(1e-3)), op_types(keras.optimizers.Adam(1e-3))
    assert fused.count("ResourceApplyAdam") == len(SHAPES) and "ResourceApplyAdam" not in plain
    assert len(fused) < len(plain) / 2, (len(fused), len(plain))


def test_amsgrad_falls_back_to_keras_update():
    fused, _ = _run(FusedAdam(0.01, amsgrad=True))
    plain, _ = _run(keras.optimizers.Adam(0.01, amsgrad=True))
    for a, b in zip(fused, plain):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_paper_optimizer_is_fused_and_serializes():
    optimizer = paper_optimizer(d_model=512, warmup_steps=4000)
    assert type(optimizer) is FusedAdam
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is FusedAdam and restored.get_config() == optimizer.get_config()


def test_checkpoints_move_between_keras_adam_and_fused_adam(tmp_path):
    """A .weights.h5 written with Keras' Adam restores FusedAdam's moments and step, and the reverse."""

    def model(optimizer):
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
        m.compile(optimizer=optimizer, loss="mse")
        return m

    x, y = np.random.default_rng(0).normal(size=(8, 4)).astype("float32"), np.ones((8, 2), "float32")
    for source, target in ((keras.optimizers.Adam, FusedAdam), (FusedAdam, keras.optimizers.Adam)):
        trained = model(source(0.01))
        trained.fit(x, y, epochs=3, verbose=0)
        trained.save_weights(tmp_path / "w.weights.h5")
        fresh = model(target(0.01))
        fresh.optimizer.build(fresh.trainable_variables)
        fresh.load_weights(tmp_path / "w.weights.h5")
        assert int(fresh.optimizer.iterations) == 3
        for a, b in zip(fresh.optimizer.variables, trained.optimizer.variables):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
