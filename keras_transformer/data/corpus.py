"""The named corpora (:data:`DATASETS`): a :class:`Corpus` with its train, validation and test splits and languages.

The paper trains on WMT 2014 EN-DE (4.5M pairs) and EN-FR (Section 5.1);
Multi30k (Elliott et al., 2016; :mod:`~keras_transformer.data.multi30k`) is
the small CPU-sized corpus used here, and the Tatoeba Spanish-English pairs of
manythings.org (:mod:`~keras_transformer.data.tatoeba`) a second language
pair, and its Chinese-English pairs a language written without spaces. :func:`load_corpus` opens each by name with its train/validation/test
splits and languages.
"""

from __future__ import annotations

import dataclasses
import os

from keras_transformer.data.multi30k import load_multi30k
from keras_transformer.data.parallel_text import ParallelText
from keras_transformer.data.tatoeba import load_tatoeba

__all__ = ["Corpus", "DATASETS", "load_corpus"]


@dataclasses.dataclass
class Corpus:
    """A parallel corpus with its splits and languages, as training and evaluation use it.

    Attributes:
        name: e.g. ``"multi30k"``, ``"tatoeba_spa_eng"`` (or a description
            of the files read).
        train: the training pairs.
        valid: the validation pairs, or None.
        test: the test pairs, or None.
        test_name: the test split's name in messages and file names
            (``"test2016"`` for Multi30k, ``"test"`` otherwise).
        source_lang: source language code, or None when unknown.
        target_lang: target language code, or None (it picks BLEU's
            tokenizer: :func:`keras_transformer.evaluation.bleu_tokenizer_for`).
    """

    name: str
    train: ParallelText
    valid: ParallelText | None
    test: ParallelText | None
    test_name: str = "test"
    source_lang: str | None = None
    target_lang: str | None = None


#: Corpora that :func:`load_corpus` opens by name -> (default source, default target).
DATASETS = {"multi30k": ("en", "de"), "tatoeba_spa_eng": ("es", "en"), "tatoeba_cmn_eng": ("zh", "en")}


def load_corpus(
    name: str,
    data_dir: str | os.PathLike | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    download: bool = True,
    cache_dir: str | os.PathLike | None = None,
    on_error: str = "raise",
) -> Corpus:
    """A named corpus (:data:`DATASETS`) with its train, validation and test splits.

    ``multi30k``: :func:`~keras_transformer.data.multi30k.load_multi30k` train / val / test2016, English ->
    German by default. ``tatoeba_spa_eng``: :func:`~keras_transformer.data.tatoeba.load_tatoeba` train /
    valid / test (the seed-0 split: 2,000 valid and 2,000 test pairs held
    out), Spanish -> English by default. ``tatoeba_cmn_eng``: the same for
    the Mandarin Chinese-English export (1,000 valid and 1,000 test pairs),
    Chinese -> English by default.

    Args:
        name: a key of :data:`DATASETS`.
        data_dir: the data folder (default ``$KERAS_TRANSFORMER_DATA``).
        source_lang: default: the corpus's (see :data:`DATASETS`).
        target_lang: default: the other language of the corpus.
        download: Multi30k only: download missing files.
        cache_dir: Multi30k only: where downloads go.
        on_error: ``"raise"`` or ``"skip"`` (see :mod:`~keras_transformer.data.parallel_text`).

    Returns:
        :class:`Corpus`.

    Raises:
        ValueError: for an unknown name (listing the known ones) or language.
        FileNotFoundError: when the files are missing (see the loaders).
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    languages = DATASETS[name]
    source_lang = source_lang or (next(l for l in languages if l != target_lang) if target_lang else languages[0])
    target_lang = target_lang or next((l for l in languages if l != source_lang), languages[1])
    if name == "multi30k":
        def load(split):
            return load_multi30k(split, data_dir=data_dir, source_lang=source_lang, target_lang=target_lang,
                                 download=download, cache_dir=cache_dir, on_error=on_error)

        return Corpus(name, load("train"), load("val"), load("test2016"), "test2016", source_lang, target_lang)

    def load(split):
        return load_tatoeba(split, data_dir=data_dir, source_lang=source_lang, target_lang=target_lang,
                            on_error=on_error, dataset=name)

    return Corpus(name, load("train"), load("valid"), load("test"), "test", source_lang, target_lang)
