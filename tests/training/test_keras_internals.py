"""The private Keras attributes the package uses: one module, a supported Keras range, and that they still work.

keras_transformer/training/keras_internals.py is the only place that reaches into
Keras' private attributes; its SUPPORTED_KERAS and pyproject.toml's keras
requirement must agree, and the installed Keras must be inside that range.
"""

import pathlib
import re
import tomllib

import keras
import numpy as np
import pytest
import tensorflow as tf
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from keras_transformer.training import keras_internals
from keras_transformer.training.keras_internals import SUPPORTED_KERAS, check_keras_version

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = REPO / "keras_transformer"
#: The private Keras attributes keras_internals.py wraps (a use elsewhere belongs there).
PRIVATE = ("_loss_tracker", "_symbolic_build", "_maybe_symbolic_build", "_distribute_strategy", "_learning_rate",
           "_momentums", "_velocities", "_get_variable_index")


def test_installed_keras_is_in_the_supported_range():
    try:
        check_keras_version()
    except RuntimeError as error:
        pytest.fail(str(error))


def test_pyproject_and_keras_internals_give_the_same_range():
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    keras_requirements = [Requirement(d) for d in dependencies if Requirement(d).name == "keras"]
    assert len(keras_requirements) == 1, dependencies
    declared = keras_requirements[0].specifier
    assert declared == SpecifierSet(SUPPORTED_KERAS), (
        f"pyproject.toml says keras{declared}, keras_transformer/training/keras_internals.py says "
        f"keras{SUPPORTED_KERAS}: change both together"
    )


def test_check_keras_version_names_the_range_outside_it():
    assert check_keras_version("3.15.0") == "3.15.0"
    assert check_keras_version("3.15.1") == "3.15.1"
    for version in ("3.14.2", "3.16.0", "4.0.0"):
        with pytest.raises(RuntimeError, match=re.escape(f"Keras {version} is outside the supported range keras>=3.15,<3.16")):
            check_keras_version(version)


def test_no_private_keras_attribute_outside_keras_internals():
    pattern = re.compile(r"\bkeras\.src\b|\.(" + "|".join(PRIVATE) + r")\b|[\"'](" + "|".join(PRIVATE) + r")[\"']")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "keras_internals.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code) and "``" not in code:  # docstrings may name them in ``...``
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "private Keras attributes belong in keras_internals.py:\n" + "\n".join(found)


def test_adam_slots_and_learning_rate_as_given():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    optimizer = keras.optimizers.Adam(schedule)
    variables = [keras.Variable(np.ones((2, 3), "float32")), keras.Variable(np.zeros((4,), "float32"))]
    optimizer.build(variables)
    assert keras_internals.learning_rate_as_given(optimizer) is schedule
    for variable in variables:
        momentum, velocity = keras_internals.adam_slots(optimizer, variable)
        assert tuple(momentum.shape) == tuple(velocity.shape) == tuple(variable.shape)
        assert any(momentum is v for v in optimizer.variables) and any(velocity is v for v in optimizer.variables)
    optimizer.apply_gradients([(tf.ones((2, 3)), variables[0]), (tf.ones((4,)), variables[1])])
    momentum, velocity = keras_internals.adam_slots(optimizer, variables[0])
    np.testing.assert_allclose(momentum.numpy(), 0.1)  # (1 - beta_1) * g
    np.testing.assert_allclose(velocity.numpy(), 0.001)  # (1 - beta_2) * g^2


def test_loss_tracker_symbolic_build_and_own_strategy():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    assert not keras_internals.has_own_strategy(model)
    keras_internals.symbolic_build(model, (tf.zeros((2, 3)), tf.zeros((2, 1))))
    assert model.optimizer.built
    keras_internals.update_loss_tracker(model, tf.constant(2.0))
    keras_internals.update_loss_tracker(model, tf.constant(4.0))
    assert float(model.metrics[0].result()) == pytest.approx(3.0)
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        inputs = keras.Input((3,))
        scoped = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    assert keras_internals.has_own_strategy(scoped)
    calls = []
    keras_internals.replace_maybe_symbolic_build(scoped, lambda iterator=None, data_batch=None: calls.append(data_batch))
    scoped.compile(optimizer="sgd", loss="mse")
    scoped.train_on_batch(np.zeros((2, 3), "float32"), np.zeros((2, 1), "float32"))
    assert len(calls) == 1
