"""keras_transformer.load_model: a saved .keras file reloads in a new process after `import keras_transformer`."""

import json
import os
import pathlib
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_transformer
from keras_transformer.config import get_preset
from keras_transformer.saving import REGISTERING_MODULES, load_model, register_keras_classes
from keras_transformer.training import build_model, compile_model

SRC = np.array([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]], "int32")
TGT = np.array([[2, 11, 12, 13], [2, 14, 15, 0]], "int32")

# A new process: only `import keras_transformer`, then the package's load_model.
RELOAD = """
import json, sys
import numpy as np
import keras_transformer as kt
model = kt.load_model(sys.argv[1])
src, tgt = (np.array(a, "int32") for a in json.loads(sys.argv[2]))
print(json.dumps({
    "logits": np.asarray(model((src, tgt), training=False), "float64").tolist(),
    "class": type(model).__module__ + "." + type(model).__name__,
    "optimizer": type(model.optimizer).__name__,
    "loss": type(model.loss).__name__,
    "modules": sorted(m for m in sys.modules if m.startswith("keras_transformer")),
}))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    config = get_preset("tiny").replace(vocab_size=32, label_smoothing=0.1)
    model = build_model(config)
    compile_model(model, config, jit_compile=False)
    path = tmp_path_factory.mktemp("saving") / "model.keras"
    model.save(path)
    return path, np.asarray(model((SRC, TGT), training=False))


def test_load_model_in_a_new_process_after_import_keras_transformer(saved):
    path, expected = saved
    out = subprocess.run([sys.executable, "-c", RELOAD, str(path), json.dumps([SRC.tolist(), TGT.tolist()])],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["class"] == "keras_transformer.model.Transformer"
    assert result["optimizer"] == "FusedAdam" and result["loss"] == "MaskedLabelSmoothedCrossEntropy"
    np.testing.assert_allclose(np.array(result["logits"]), expected, rtol=1e-5, atol=1e-5)
    # Every module that registers a Keras class was imported: a class registered in a module that
    # load_model does not import would make some other .keras file fail to load in a new process.
    assert _registering_modules() <= set(result["modules"]), sorted(_registering_modules() - set(result["modules"]))


def _registering_modules():
    package = pathlib.Path(keras_transformer.__file__).parent
    decorator = re.compile(r"^\s*@keras\.saving\.register_keras_serializable\(", re.MULTILINE)
    found = set()
    for path in package.rglob("*.py"):
        if decorator.search(path.read_text(encoding="utf-8")):
            parts = path.relative_to(package.parent).with_suffix("").parts
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_load_model_without_compile_returns_the_same_outputs(saved):
    path, expected = saved
    model = keras_transformer.load_model(path, compile=False)
    assert not model.compiled
    np.testing.assert_allclose(np.asarray(model((SRC, TGT), training=False)), expected, rtol=1e-6, atol=1e-6)


def test_load_model_names_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.keras"):
        load_model(tmp_path / "nothing.keras")


def test_the_registering_modules_are_found_and_register_the_classes():
    found = _registering_modules()
    assert {"keras_transformer.model", "keras_transformer.training.losses",
            "keras_transformer.layers.attention"} <= found
    assert "keras_transformer.saving" not in found
    register_keras_classes()
    assert set(REGISTERING_MODULES) <= set(sys.modules)
    assert {"keras_transformer>Transformer", "keras_transformer>WarmupSchedule", "keras_transformer>FusedAdam",
            "keras_transformer>MaskedLabelSmoothedCrossEntropy",
            "keras_transformer>masked_accuracy"} <= set(keras.saving.get_custom_objects())
