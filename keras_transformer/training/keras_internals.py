"""Every use of Keras' private attributes, in one place, behind small functions.

The train step (:mod:`keras_transformer.training.train_step`), the compiled
optimizer (:mod:`keras_transformer.training.compile`) and :class:`FusedAdam`
(:mod:`keras_transformer.training.optimizer`) need a few things Keras 3 has
no public API for. Each function below names the private attribute it
reaches into, why, and the Keras versions it was checked on; nothing else in
the package touches a private Keras attribute or imports ``keras.src``.

The Keras source these functions depend on (``keras/src/trainers/trainer.py``,
``keras/src/backend/tensorflow/trainer.py``,
``keras/src/optimizers/base_optimizer.py``, ``keras/src/optimizers/adam.py``)
is the same in Keras 3.15.0 and 3.15.1; the tests run on 3.15.1. A new Keras
minor version may rename any of them: :data:`SUPPORTED_KERAS` is the range
``pyproject.toml`` allows, and ``tests/training/test_keras_internals.py``
fails, naming the range, when the installed Keras is outside it.
"""

from __future__ import annotations

from typing import Any, Callable

import keras

__all__ = [
    "SUPPORTED_KERAS",
    "adam_slots",
    "check_keras_version",
    "finalize_progbar_at_seen",
    "has_own_strategy",
    "learning_rate_as_given",
    "replace_maybe_symbolic_build",
    "symbolic_build",
    "update_loss_tracker",
]

#: The Keras versions this module was checked on (a PEP 440 specifier; ``pyproject.toml`` says the same).
SUPPORTED_KERAS = ">=3.15,<3.16"


def check_keras_version(version: str | None = None) -> str:
    """Checks that a Keras version is in :data:`SUPPORTED_KERAS`.

    Args:
        version: a version string; default the installed ``keras.version()``.

    Returns:
        ``version``.

    Raises:
        RuntimeError: naming the version and the supported range, when it is
            outside (the private attributes used here are unchecked there).
    """
    from packaging.specifiers import SpecifierSet

    version = keras.version() if version is None else version
    if version not in SpecifierSet(SUPPORTED_KERAS):
        raise RuntimeError(
            f"Keras {version} is outside the supported range keras{SUPPORTED_KERAS}: "
            "keras_transformer/training/keras_internals.py reaches into private Keras attributes "
            "that were checked on that range only; check each function there against this Keras, "
            "then widen SUPPORTED_KERAS and pyproject.toml together"
        )
    return version


def update_loss_tracker(model: keras.Model, value) -> None:
    """Adds ``value`` (a scalar float tensor, the step's loss) to the ``loss`` metric that ``fit`` reports.

    Reaches into ``model._loss_tracker`` (the ``keras.metrics.Mean`` named
    ``"loss"`` that ``Trainer.compile`` creates and ``model.metrics`` lists
    first). Why: the installed train step computes its own, globally
    token-normalized loss instead of ``model.compute_loss`` (which would
    update this metric itself), and must still report it as ``loss``.
    Checked on Keras 3.15.0 and 3.15.1.

    Args:
        model: a compiled Keras model.
        value: scalar float tensor.
    """
    model._loss_tracker.update_state(value)


def symbolic_build(model: keras.Model, data_batch) -> None:
    """Builds the model, its compiled loss and metrics and the optimizer's slots from one batch.

    Calls ``model._symbolic_build(data_batch=data_batch)`` (``Trainer`` in
    ``keras/src/trainers/trainer.py``: symbolic tensors shaped like the batch
    go through ``compute_output_spec``, then the compiled metrics and
    ``optimizer.build`` run). Why: the public path (``fit`` building lazily)
    creates the optimizer's variables while the train step is being traced,
    which lifts them out of the graph one by one and makes ``tf.function``
    trace the step twice; building them first, eagerly, avoids both. Checked
    on Keras 3.15.0 and 3.15.1.

    Args:
        model: a compiled Keras model.
        data_batch: ``(x, y)`` or ``(x, y, sample_weight)`` of tensors (only
            shapes and dtypes are used).
    """
    model._symbolic_build(data_batch=data_batch)


def has_own_strategy(model: keras.Model) -> bool:
    """Whether the model was created under a ``tf.distribute`` strategy's scope.

    Reads ``model._distribute_strategy`` (set in ``keras/src/backend/tensorflow/trainer.py``
    when the model is created inside ``strategy.scope()``; the public
    ``model.distribute_strategy`` falls back to the default strategy and
    cannot tell the two apart). Keras calls ``model._maybe_symbolic_build``
    only for such models. Checked on Keras 3.15.0 and 3.15.1.

    Args:
        model: a Keras model (TensorFlow backend).

    Returns:
        True when the model has its own strategy.
    """
    return getattr(model, "_distribute_strategy", None) is not None


def replace_maybe_symbolic_build(model: keras.Model, function: Callable[..., None]) -> None:
    """Makes ``fit``/``evaluate`` call ``function(iterator=None, data_batch=None)`` to build the model.

    Sets ``model._maybe_symbolic_build`` (``keras/src/backend/tensorflow/trainer.py``:
    called by ``fit``, ``evaluate``, ``train_on_batch`` and ``test_on_batch``
    before the first step, for a model with its own strategy). Why: Keras'
    version reduces the first distributed batch with ``strategy.reduce("MEAN")``,
    which raises for int32 ids under ``MultiWorkerMirroredStrategy``; the
    replacement takes the first local replica's batch instead (see
    :func:`keras_transformer.training.train_step.install_train_step`).
    Checked on Keras 3.15.0 and 3.15.1.

    Args:
        model: a Keras model with its own strategy (:func:`has_own_strategy`).
        function: the replacement, called with the same keyword arguments.
    """
    model._maybe_symbolic_build = function


def learning_rate_as_given(optimizer: keras.optimizers.Optimizer) -> Any:
    """The optimizer's learning rate as it was given: a ``LearningRateSchedule``, a variable or a callable.

    Reads ``optimizer._learning_rate`` (``keras/src/optimizers/base_optimizer.py``).
    Why: the public ``optimizer.learning_rate`` returns the *current value*
    (a schedule evaluated at the current step), and wrapping the schedule
    (``PerUpdateSchedule`` under gradient accumulation) needs the schedule
    itself. Checked on Keras 3.15.0 and 3.15.1.

    Args:
        optimizer: a Keras optimizer.

    Returns:
        What was passed as ``learning_rate`` (a float is stored as a variable).
    """
    return optimizer._learning_rate


def adam_slots(optimizer: keras.optimizers.Adam, variable) -> tuple[keras.Variable, keras.Variable]:
    """The first and second moment slots (``m``, ``v``) of ``variable`` in a built Keras ``Adam``.

    Reads ``optimizer._momentums`` and ``optimizer._velocities`` at
    ``optimizer._get_variable_index(variable)`` (``keras/src/optimizers/adam.py``
    and ``base_optimizer.py``; the index of the variable among the trainable
    variables the optimizer was built with). Why: :class:`FusedAdam` applies
    the update with one ``ResourceApplyAdam`` kernel, which takes the slots'
    resource handles; Keras exposes them only as the flat
    ``optimizer.variables`` list. Checked on Keras 3.15.0 and 3.15.1.

    Args:
        optimizer: a built ``keras.optimizers.Adam`` (or subclass).
        variable: one of the variables it was built for (inside
            ``apply_gradients``: the variable ``update_step`` receives).

    Returns:
        ``(momentum, velocity)``, Keras variables shaped like ``variable``.

    Raises:
        KeyError: for a variable the optimizer was not built with.
    """
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


def finalize_progbar_at_seen(logger: keras.callbacks.ProgbarLogger, logs) -> bool:
    """Ends a ``ProgbarLogger``'s epoch line at the batches it saw, when the epoch stopped early.

    Keras' ``ProgbarLogger._finalize_progbar`` prints the epoch's full step
    count (``260/260``) and divides the time by it, even when training
    stopped after 179 batches (a time budget). This prints ``179/260`` and
    the time per batch actually run. Private: ``ProgbarLogger.seen``,
    ``.target``, ``.progbar`` (a ``keras.utils.Progbar``); checked on Keras
    3.15.0 and 3.15.1.

    Args:
        logger: the epoch's ``ProgbarLogger``.
        logs: the epoch logs.

    Returns:
        True when it printed the line (the epoch was cut); False: the caller
        finalizes as Keras does.
    """
    seen, target, progbar = getattr(logger, "seen", 0), getattr(logger, "target", None), getattr(logger, "progbar", None)
    if progbar is None or target is None or not 0 < seen < target:
        return False
    progbar.update(seen, list((logs or {}).items()), finalize=True)
    return True
