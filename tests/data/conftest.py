"""Fixtures of the data tests: real Multi30k files and a small shared tokenizer."""

from __future__ import annotations

import pathlib
import random

import pytest

def _read(path: pathlib.Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="session")
def multi30k_val(multi30k_dir) -> tuple[list[str], list[str]]:
    """(English, German) validation lines, read here independently of the library."""
    return _read(multi30k_dir / "val.en"), _read(multi30k_dir / "val.de")


@pytest.fixture(scope="session")
def tokenizer_model(multi30k_dir, tmp_path_factory) -> str:
    """A unigram SentencePiece model (vocab 1000) trained on 5,000 real training lines of both languages."""
    from keras_transformer.data.tokenizer import train_sentencepiece

    lines = _read(multi30k_dir / "train.en") + _read(multi30k_dir / "train.de")
    random.Random(0).shuffle(lines)
    directory = tmp_path_factory.mktemp("spm")
    return train_sentencepiece(
        lines[:5000], directory, vocab_size=1000, model_type="unigram", character_coverage=1.0, byte_fallback=True
    )


@pytest.fixture(scope="session")
def tokenizer(tokenizer_model):
    """SubwordTokenizer of :func:`tokenizer_model`."""
    from keras_transformer.data.tokenizer import SubwordTokenizer

    return SubwordTokenizer(tokenizer_model)
