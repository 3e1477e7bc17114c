"""Shared test setup: TensorFlow backend, quiet logs, the data folder."""

import os
import pathlib

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
#: XLA's CPU back end without LLVM's costly optimizations, in this process and in every process a test
#: starts (they inherit the environment; tests that add flags append to these). The tests check what
#: XLA computes, not how fast its code runs, and each compilation takes about half the time (a tiny
#: model's beam search: 3.6 s -> 1.9 s). Benchmarks and users keep XLA's defaults.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), TEST_XLA_FLAGS]))

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]

#: The test files that take 10 s or more, longest first (one idle run of the README's command on a 2-core
#: AMD EPYC, AVX2 only, 2026-12-07: pytest's junit times summed per file, test_cli.py 436 s ...
#: test_visualization.py 12 s). The command (`pytest -n 2 --dist loadfile --no-loadscope-reorder`) hands
#: whole files to two workers in collection order, so with the longest first and the shortest last
#: (longest-processing-time-first scheduling) the two workers finish close together. Other files keep
#: pytest's order, after these.
SLOWEST_FIRST = (
    "tests/test_cli.py",
    "tests/training/test_distributed.py",
    "tests/training/test_trainer.py",
    "tests/training/test_streaming_training.py",
    "tests/decoding/test_unknown_input.py",
    "tests/test_ctranslate2.py",
    "tests/test_serving_cpp.py",
    "tests/test_notebook.py",
    "tests/test_export.py",
    "tests/decoding/test_ensemble.py",
    "tests/decoding/test_decode_speed.py",
    "tests/training/test_shapes.py",
    "tests/training/test_validation.py",
    "tests/test_model.py",
    "tests/test_chinese.py",
    "tests/decoding/test_translator_sampling.py",
    "tests/decoding/test_step_cost.py",
    "tests/decoding/test_input_normalization.py",
    "tests/decoding/test_fast_decoding.py",
    "tests/decoding/test_translator.py",
    "tests/decoding/test_placeholders.py",
    "tests/data/test_streaming.py",
    "tests/decoding/test_stream.py",
    "tests/training/test_resume.py",
    "tests/decoding/test_mbr.py",
    "tests/decoding/test_punctuation_lines.py",
    "tests/test_serving.py",
    "tests/decoding/test_scoring.py",
    "tests/data/test_tatoeba.py",
    "tests/data/test_pipeline.py",
    "tests/decoding/test_repetition_guard.py",
    "tests/decoding/test_search.py",
    "tests/decoding/test_sampling.py",
    "tests/test_visualization.py",
)


def pytest_collection_modifyitems(config, items):
    """Moves the files of :data:`SLOWEST_FIRST` to the front, in that order (a stable sort)."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


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
