"""Shared test setup: TensorFlow backend, quiet logs, the data folder."""

import os
import pathlib

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]


def data_dir() -> pathlib.Path:
    """The real-data folder: $KERAS_TRANSFORMER_DATA, else ../shared/data beside the repo."""
    return pathlib.Path(os.environ.get("KERAS_TRANSFORMER_DATA", REPO.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def data_root() -> pathlib.Path:
    """The real-data folder (see :func:`data_dir`)."""
    return data_dir()


@pytest.fixture(scope="session")
def multi30k_dir(data_root) -> pathlib.Path:
    """The Multi30k folder; the test is skipped with the reason when it is absent."""
    path = data_root / "multi30k"
    needed = [f"{s}.{l}" for s in ("train", "val", "test2016") for l in ("en", "de")]
    if not all((path / name).is_file() for name in needed):
        pytest.skip(f"Multi30k not found at {path}; set KERAS_TRANSFORMER_DATA to the folder holding multi30k/")
    return path


@pytest.fixture(scope="session")
def tatoeba_dir(data_root) -> pathlib.Path:
    """The Tatoeba Spanish-English folder (spa.txt); the test is skipped with the reason when it is absent."""
    path = data_root / "tatoeba_spa_eng"
    if not (path / "spa.txt").is_file():
        pytest.skip(f"Tatoeba spa.txt not found at {path}; set KERAS_TRANSFORMER_DATA to the folder holding tatoeba_spa_eng/")
    return path
