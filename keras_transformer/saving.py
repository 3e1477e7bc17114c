"""Loading a ``.keras`` file that keras_transformer wrote, in any process.

Keras finds a custom class of a ``.keras`` file by its registered name
(``"keras_transformer>Transformer"``), and that name exists only once the
module defining the class has run its ``@keras.saving.register_keras_serializable``
decorator. ``import keras_transformer`` loads none of them (its exports are
imported on first use, so that the command line starts without TensorFlow),
and Keras imports a class's module by itself only for its own packages
(keras, keras_hub). :func:`load_model` imports every module that registers a
class, then calls ``keras.saving.load_model``::

    import keras_transformer as kt
    model = kt.load_model("runs/multi30k/model.keras")
"""

from __future__ import annotations

import importlib
import os

__all__ = ["REGISTERING_MODULES", "load_model", "register_keras_classes"]

# Every module with a @keras.saving.register_keras_serializable(package="keras_transformer"):
# the layers (Section 3), the model, and what a compiled model's compile_config names
# (the optimizer, the Eq. 3 schedule and its variants, the Section 5.4 loss and accuracy).
REGISTERING_MODULES = (
    "keras_transformer.layers",
    "keras_transformer.model",
    "keras_transformer.training.accumulation",
    "keras_transformer.training.losses",
    "keras_transformer.training.optimizer",
    "keras_transformer.training.schedule",
)


def register_keras_classes() -> None:
    """Imports :data:`REGISTERING_MODULES`, registering every keras_transformer class with Keras.

    Afterwards ``keras.saving.load_model`` (and ``keras.saving.deserialize_keras_object``)
    find the layers, the model, the schedule, the optimizer and the loss by name.
    Loads TensorFlow and Keras; idempotent.
    """
    for module in REGISTERING_MODULES:
        importlib.import_module(module)


def load_model(filepath: str | os.PathLike, compile: bool = True, safe_mode: bool = True):
    """Loads a ``.keras`` file written by keras_transformer (``model.keras`` of a run folder).

    ``keras.saving.load_model`` with keras_transformer's classes registered first
    (:func:`register_keras_classes`), so that it works in a new process after
    ``import keras_transformer``.

    Args:
        filepath: path of the ``.keras`` file.
        compile: also restore the optimizer (Adam with the Eq. 3 schedule,
            Section 5.3), the label-smoothed loss (Section 5.4) and the metrics,
            as ``keras.saving.load_model`` does; ``False`` for inference only.
        safe_mode: refuse ``lambda`` deserialization (Keras' default).

    Returns:
        The :class:`keras_transformer.model.Transformer` (a ``keras.Model``):
        called on ``(source_ids, target_ids)``, int32 ``[batch, source_length]``
        and ``[batch, target_length]`` with 0 as padding, it returns float32
        logits ``[batch, target_length, vocab_size]``.

    Raises:
        FileNotFoundError: ``filepath`` does not exist.
        ValueError: ``filepath`` is not a ``.keras`` file (from Keras).
    """
    import keras

    if not os.path.isfile(filepath):
        raise FileNotFoundError(f"Keras model file not found: {os.fspath(filepath)}")
    register_keras_classes()
    return keras.saving.load_model(filepath, compile=compile, safe_mode=safe_mode)
