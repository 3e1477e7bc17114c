"""Models saved by earlier versions still load, with the same outputs.

``tests/fixtures/keras_v<version>/`` holds ``.keras`` files written by that
version of the package (see its README) and their float32 logits on fixed ids.
Keras 3 stores weights by the path of tracked attributes
(``encoder/encoder_layers/.../self_attention_norm``), so a renamed or re-nested
attribute shows here as a load error or as different logits.
"""

import json
import pathlib
import zipfile

import keras
import numpy as np
import pytest

import keras_transformer.model  # noqa: F401  (registers the classes load_model looks up)
from keras_transformer.model import Transformer

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SAVED = sorted(FIXTURES.glob("keras_v*/*.keras"))


def _version(path: pathlib.Path) -> str:
    return path.parent.name[len("keras_v"):].replace("_", ".")


def _ids(path: pathlib.Path):
    record = json.loads((path.parent / "source_target.json").read_text(encoding="utf-8"))
    return np.array(record["source"], np.int32), np.array(record["target"], np.int32)


def _load(path: pathlib.Path):
    try:
        return keras.saving.load_model(path, compile=False)
    except Exception as error:  # the message must name the version that wrote the file
        pytest.fail(f"{path.name}, written by keras_transformer {_version(path)}, no longer loads: "
                    f"{type(error).__name__}: {error}")


def test_fixtures_exist():
    assert {p.name for p in SAVED} >= {"pre_ln_tied.keras", "post_ln_untied_learned.keras"}


@pytest.mark.parametrize("path", SAVED, ids=lambda p: f"v{_version(p)}-{p.stem}")
def test_old_keras_file_loads_with_the_same_logits(path):
    model = _load(path)
    assert isinstance(model, Transformer)
    assert model.attention_dropout_rate == 0.0  # the default of configs saved before the argument existed
    source, target = _ids(path)
    expected = np.load(path.with_suffix(".logits.npy"))
    logits = keras.ops.convert_to_numpy(model((source, target), training=False))
    np.testing.assert_allclose(logits, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("path", SAVED, ids=lambda p: f"v{_version(p)}-{p.stem}")
def test_old_weights_file_loads_into_a_new_model(path, tmp_path):
    """The ``.weights.h5`` inside the ``.keras`` file (the checkpoints' format) loads into a model built today."""
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))["config"]
        weights = tmp_path / "model.weights.h5"
        weights.write_bytes(archive.read("model.weights.h5"))
    model = Transformer.from_config(config)
    model.build()
    model.load_weights(weights)
    source, target = _ids(path)
    logits = keras.ops.convert_to_numpy(model((source, target), training=False))
    np.testing.assert_allclose(logits, np.load(path.with_suffix(".logits.npy")), rtol=1e-6, atol=1e-6)
