"""Fixtures of the decoding tests: the session's tiny SentencePiece model and a fixed-seed tiny Transformer."""

import importlib.util
import os

import pytest


def _shared():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shared.py")
    spec = importlib.util.spec_from_file_location("_keras_transformer_shared_loader", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load()


shared = _shared()


@pytest.fixture(scope="module")
def model_and_tokenizer(multi30k_dir, tmp_path_factory):
    """(model, tokenizer), fresh per module, same weights and vocabulary in every module."""
    return shared.model_and_tokenizer(shared.spm_path(multi30k_dir, tmp_path_factory))


@pytest.fixture(scope="module")
def model(model_and_tokenizer):
    return model_and_tokenizer[0]


@pytest.fixture(scope="module")
def tokenizer(model_and_tokenizer):
    return model_and_tokenizer[1]


@pytest.fixture(scope="module")
def make_model_folder():
    """``make(folder, model, spm_path)``: a model folder (model.keras, spm.model, config.json) of ``model``."""
    return shared.model_folder


@pytest.fixture(scope="module")
def model_dir(model, multi30k_dir, tmp_path_factory):
    """A model folder of the module's tiny model and the session's vocabulary."""
    folder = tmp_path_factory.mktemp("model_dir") / "model"
    return shared.model_folder(folder, model, shared.spm_path(multi30k_dir, tmp_path_factory))
