"""Session-wide test assets for decoding, export and serving tests.

Loaded by :func:`load` as ONE module object per session (registered in
``sys.modules``), so the SentencePiece model is trained once and the SavedModel
is exported once however many test files use them. Under pytest-xdist they are
made once per session, not once per worker: the first worker that needs one
makes it in a folder of the session that all workers share, under a file lock
(:func:`_made_once`, pytest-xdist's recipe for session fixtures), and the
others wait for it and read it.

What is shared is on disk (the ``.model`` file, the export folders); every
test module builds its own tokenizer / model / loaded SavedModel objects,
because ``tf.random.set_seed`` in any other test clears the eager kernel cache
that owns tensorflow_text's SentencePiece resource. The model has random
weights from a fixed seed, so every module gets the same weights.
"""

import contextlib
import importlib.util
import itertools
import os
import shutil
import sys

MODULE_NAME = "keras_transformer_tests_shared"
SEED = 1234
MODEL_MAX_LENGTH = 32
#: Translator settings shared by the export tests (version 1 plain, 2 XLA).
EXPORT_KWARGS = dict(max_length=20, extra_decode_length=5, beam_size=2, length_penalty=0.6)
WARMUP_SENTENCES = ["A dog runs.", "Zwei Männer spielen Fußball im Park."]

_cache = {}


def load():
    """This module, imported once per session under :data:`MODULE_NAME`."""
    if MODULE_NAME in sys.modules:
        return sys.modules[MODULE_NAME]
    spec = importlib.util.spec_from_file_location(MODULE_NAME, os.path.abspath(__file__))
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


def _read_lines(path, n):
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in itertools.islice(f, n)]


def _made_once(tmp_path_factory, name, make):
    """The folder ``name`` after ``make(folder)`` ran in it once in this test session.

    Under pytest-xdist the folder is in the session's folder that holds every
    worker's temporary folder (``getbasetemp().parent``): the first worker runs
    ``make`` while holding a file lock, the others wait on the lock and find it
    made (a ``.made`` file, written last). Without xdist it is in this session's
    own temporary folder.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from filelock import FileLock

        root = tmp_path_factory.getbasetemp().parent
        lock = FileLock(str(root / f"{name}.lock"))
    else:
        root = tmp_path_factory.getbasetemp()
        lock = contextlib.nullcontext()
    folder = root / name
    with lock:
        if not (folder / ".made").is_file():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
            folder.mkdir()
            make(folder)
            (folder / ".made").write_text("")
    return folder


def spm_path(multi30k_dir, tmp_path_factory):
    """Path of a 300-piece SentencePiece model trained once on 1000 + 1000 Multi30k lines."""
    if "spm" not in _cache:
        from keras_transformer.data.tokenizer import train_sentencepiece

        def make(folder):
            lines = _read_lines(multi30k_dir / "train.en", 1000) + _read_lines(multi30k_dir / "train.de", 1000)
            train_sentencepiece(lines, folder, vocab_size=300)

        _cache["spm"] = str(_made_once(tmp_path_factory, "shared_spm", make) / "spm.model")
    return _cache["spm"]


def model_and_tokenizer(path):
    """A fresh (model, tokenizer): tiny preset (2 layers, d_model 32), fixed-seed random weights."""
    import keras
    import tensorflow as tf

    from keras_transformer.config import get_preset
    from keras_transformer.data.tokenizer import SubwordTokenizer
    from keras_transformer.model import Transformer

    vocab_size = SubwordTokenizer(path).vocab_size
    keras.utils.set_random_seed(SEED)
    config = get_preset("tiny", vocab_size=vocab_size, max_length=MODEL_MAX_LENGTH)
    model = Transformer(**config.model_kwargs())
    model((tf.constant([[5, 6, 3]]), tf.constant([[2, 7]])))
    # Create the tokenizer AFTER seeding (the seed clears its SentencePiece resource).
    return model, SubwordTokenizer(path)


def model_folder(folder, model, spm_path):
    """A model folder (model.keras, spm.model, config.json) for ``model`` with the vocabulary at ``spm_path``."""
    import shutil

    from keras_transformer.config import TransformerConfig
    from keras_transformer.data.tokenizer import SubwordTokenizer
    from keras_transformer.run_folder import RunFolder, RunRecord

    run = RunFolder(folder)
    run.path.mkdir(parents=True)
    shutil.copyfile(spm_path, run.vocabulary)
    names = set(TransformerConfig.__dataclass_fields__)
    config = TransformerConfig(**{k: v for k, v in model.get_config().items() if k in names})
    run.write_record(RunRecord("tiny", config, SubwordTokenizer(str(run.vocabulary)).vocab_sha256))
    model.save(run.model_path)
    return run.path


def exported(model, tokenizer, tmp_path_factory):
    """``(base, {1: plain path, 2: XLA path})``, exported once per session.

    Version 1 is ``Translator(**EXPORT_KWARGS)`` with a warmup file when
    tensorflow-serving-api is installed; version 2 the same with
    ``jit_compile=True``.
    """
    if "export" not in _cache:
        from keras_transformer.decoding import Translator
        from keras_transformer.export import export_saved_model

        def make(folder):
            try:
                import tensorflow_serving.apis  # noqa: F401

                warmup = WARMUP_SENTENCES
            except ImportError:
                warmup = None
            # Every worker's model has the same weights (the fixed seed), so one export serves them all.
            export_saved_model(Translator(model, tokenizer, **EXPORT_KWARGS), folder / "translator", version=1,
                               warmup_sentences=warmup)
            export_saved_model(Translator(model, tokenizer, jit_compile=True, **EXPORT_KWARGS),
                               folder / "translator", version=2)

        base = _made_once(tmp_path_factory, "shared_export", make) / "translator"
        _cache["export"] = (base, {version: os.path.join(base, str(version)) for version in (1, 2)})
    return _cache["export"]
