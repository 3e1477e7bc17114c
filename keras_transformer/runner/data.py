"""The parallel text a run's :class:`~keras_transformer.settings.DataSettings` name (Section 5.1).

Two ways in:

* :func:`read_corpus`: the pairs in memory, as a
  :class:`~keras_transformer.data.Corpus` (train, validation and test splits,
  languages): a named corpus (Multi30k, Tatoeba), line-aligned files, a TSV
  file or TFDS. Corpora of Multi30k's size.
* :func:`open_prepared_corpus`: a prepared folder of token-id shards
  (:mod:`keras_transformer.data.prepare`), streamed from disk (WMT's size):
  reused when it matches, prepared (again) when it does not.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
from collections.abc import Callable

from keras_transformer.settings import DEFAULT_VOCAB_SIZE, DataSettings, RunError, VocabularySettings

__all__ = ["corpus_sources", "open_prepared_corpus", "read_corpus"]

Log = Callable[[str], None]


def _limit(corpus, data: DataSettings) -> None:
    for split, limit in (("train", data.limit_train), ("valid", data.limit_test), ("test", data.limit_test)):
        pairs = getattr(corpus, split)
        if limit and pairs is not None:
            pairs.sources, pairs.targets = pairs.sources[:limit], pairs.targets[:limit]


def read_corpus(data: DataSettings, log: Log):
    """The :class:`~keras_transformer.data.Corpus` the settings name, its splits cut by the limits.

    Args:
        data: the data settings (:meth:`~DataSettings.check` is called).
        log: where progress lines go.

    Returns:
        The corpus: ``train`` always; ``valid`` and ``test`` when the source
        has them (files: ``valid`` when given; TSV: neither).

    Raises:
        RunError: for settings that do not hold together, or TFDS data that
            is not prepared and cannot be downloaded.
        FileNotFoundError, ValueError: for missing files and bad lines
            (naming the file and line).
    """
    from keras_transformer import data as kt_data

    data.check()
    source_lang, target_lang = data.source_lang, data.target_lang
    if data.train_source:
        log(f"reading {data.train_source} / {data.train_target}")
        train = kt_data.read_parallel_files(data.train_source, data.train_target, on_error=data.on_error)
        valid = None
        if data.valid_source:
            valid = kt_data.read_parallel_files(data.valid_source, data.valid_target, on_error=data.on_error)
        corpus = kt_data.Corpus("files", train, valid, None, "test", source_lang, target_lang)
    elif data.tfds:
        log(f"reading TFDS {data.tfds} (source {source_lang or 'default'})")

        def load(split):
            return kt_data.load_tfds_translation(data.tfds, split, source_lang=source_lang, target_lang=target_lang,
                                                 data_dir=data.tfds_data_dir, on_error=data.on_error)

        try:
            corpus = kt_data.Corpus(data.tfds, load("train"), load("validation"), None, "test", source_lang,
                                    target_lang)
        except RuntimeError as error:  # not prepared and no network: the message says what to do
            raise RunError(getattr(error, "template", str(error))) from error
    elif data.tsv:
        log(f"reading {data.tsv}")
        corpus = kt_data.Corpus(data.tsv, kt_data.read_tsv_pairs(data.tsv, on_error=data.on_error), None, None,
                                "test", source_lang, target_lang)
    else:
        name = data.dataset or "multi30k"
        data_dir = data.resolved_data_dir()
        where = data_dir or ("(download cache)" if name == "multi30k" else "$KERAS_TRANSFORMER_DATA (unset)")
        log(f"reading {name} from {where}")
        corpus = kt_data.load_corpus(name, data_dir=data_dir, source_lang=source_lang, target_lang=target_lang,
                                     download=data.download, cache_dir=data.cache_dir, on_error=data.on_error)
        log(f"      {corpus.source_lang} -> {corpus.target_lang}")
    _limit(corpus, data)
    for split, pairs in (("train", corpus.train), ("valid", corpus.valid), (corpus.test_name, corpus.test)):
        if pairs is not None:
            skipped = f" ({pairs.report.summary()})" if pairs.report.skipped else ""
            log(f"      {split}: {len(pairs)} pairs{skipped}")
    return corpus


def corpus_sources(data: DataSettings):
    """``(train, valid or None)`` :class:`~keras_transformer.data.CorpusSource` of the settings, for preparing.

    Raises:
        RunError: for a named corpus other than Multi30k (its split is made
            in memory), or settings that do not hold together.
    """
    from keras_transformer.data import CorpusSource

    data.check()
    limit_train, limit_test = data.limit_train or None, data.limit_test or None
    if data.train_source:
        train = CorpusSource.files(data.train_source, data.train_target, data.on_error, limit_train)
        valid = None
        if data.valid_source:
            valid = CorpusSource.files(data.valid_source, data.valid_target, data.on_error, limit_test)
        return train, valid
    if data.tfds:
        def tfds(split, limit):
            return CorpusSource.tfds(data.tfds, split, data.source_lang, data.target_lang, data.tfds_data_dir,
                                     data.on_error, limit)

        return tfds("train", limit_train), tfds("validation", limit_test)
    if data.tsv:
        return CorpusSource.tsv(data.tsv, on_error=data.on_error, max_pairs=limit_train), None
    if data.dataset not in (None, "multi30k"):
        raise RunError(f"a prepared folder reads files, a TSV file, TFDS or Multi30k, not the dataset {data.dataset} "
                       "(its split is made in memory): train it without {data.prepared_dir}")
    multi30k = dict(data_dir=data.resolved_data_dir(), download=data.download, cache_dir=data.cache_dir,
                    on_error=data.on_error)
    return (CorpusSource.multi30k("train", max_pairs=limit_train, **multi30k),
            CorpusSource.multi30k("val", max_pairs=limit_test, **multi30k))


def prepare(folder: str | os.PathLike, data: DataSettings, vocabulary: VocabularySettings, max_length: int,
            log: Log, force: bool = False, vocabulary_path: str | os.PathLike | None = None):
    """:func:`~keras_transformer.data.prepare_corpus` of the settings' sources into ``folder``.

    Args:
        folder: the prepared folder.
        data, vocabulary: the settings.
        max_length: the longest kept sequence (the model's).
        log: where progress lines go.
        force: prepare again even when the folder matches.
        vocabulary_path: a SentencePiece model to use (default:
            ``vocabulary.model``, else the folder's or a new one).

    Returns:
        The :class:`~keras_transformer.data.PreparedCorpus`.

    Raises:
        RunError: when TFDS data is not prepared and cannot be downloaded, or
            a tokenizing process died.
    """
    train, valid = corpus_sources(data)
    return _prepare(folder, train, valid, data, vocabulary, max_length, log, force, vocabulary_path)


def _prepare(folder, train, valid, data, vocabulary, max_length, log, force=False, vocabulary_path=None):
    from keras_transformer.data import prepare_corpus

    try:
        return prepare_corpus(
            folder, train, valid, vocabulary=vocabulary_path or vocabulary.model, vocab_size=vocabulary.vocab_size,
            vocab_sample_size=vocabulary.sample_size, max_length=max_length, length_policy=data.length_policy,
            num_shards=data.num_shards, processes=data.processes, force=force, log=log,
        )
    except RuntimeError as error:  # TFDS not prepared and no network, or a tokenizing process died
        raise RunError(getattr(error, "template", str(error))) from error


def open_prepared_corpus(data: DataSettings, vocabulary: VocabularySettings, max_length: int,
                         run_vocabulary: pathlib.Path | None, in_cluster: bool, log: Log):
    """The prepared folder ``data.prepared_dir`` of a training run: reused, prepared, or prepared again.

    Without a data source and with a manifest, the folder is checked against
    the sources it was prepared from (and prepared again if they changed;
    used as it is if they are gone). Under a ``TF_CONFIG`` cluster every
    worker only reads it.

    Args:
        data, vocabulary: the settings.
        max_length: the model's longest sequence.
        run_vocabulary: the run's ``spm.model`` when it already has one.
        in_cluster: whether ``TF_CONFIG`` describes a cluster.
        log: where progress lines go.

    Returns:
        The :class:`~keras_transformer.data.PreparedCorpus`.

    Raises:
        RunError: for a folder a cluster finds unprepared, or one prepared
            with another max length, length policy or vocabulary.
    """
    from keras_transformer.data import open_prepared

    folder = pathlib.Path(data.prepared_dir)
    has_manifest = _has_manifest(folder)
    if in_cluster:
        if not has_manifest:
            raise RunError(f"{folder} is not prepared; with TF_CONFIG every worker only reads it: prepare it first "
                           "(`keras-transformer prepare` or Runner.prepare) with the same data settings")
        corpus = open_prepared(folder)
        log(f"reading the prepared data in {folder} (cluster: no re-preparation)")
    else:
        train, valid, corpus = _sources_to_prepare(folder, data, has_manifest, log)
        if train is not None:
            corpus = _prepare(folder, train, valid, data, vocabulary, max_length, log, vocabulary_path=run_vocabulary)
    _check_prepared(corpus, folder, data, max_length, run_vocabulary)
    log(f"      train: {corpus.summary('train')}")
    return corpus


def _has_manifest(folder: pathlib.Path) -> bool:
    from keras_transformer.data.prepared import MANIFEST_NAME

    return (folder / MANIFEST_NAME).is_file()


def _sources_to_prepare(folder, data: DataSettings, has_manifest: bool, log: Log):
    """``(train, valid, corpus)``: the sources to prepare from (train None: use ``corpus`` as it is)."""
    from keras_transformer.data import open_prepared

    if data.files_given or not has_manifest:
        return (*corpus_sources(data), None)
    corpus = open_prepared(folder)
    train, valid = corpus.source("train"), corpus.source("valid") if "valid" in corpus.splits else None
    missing = [p for source in (train, valid) if source is not None for p in source.paths if not os.path.isfile(p)]
    if missing:
        log(f"the sources {folder} was prepared from are not here ({', '.join(missing)}): using the prepared data "
            "as it is")
        return None, None, corpus
    log(f"checking {folder} against the sources it was prepared from")
    return train, valid, corpus


def _check_prepared(corpus, folder, data: DataSettings, max_length: int, run_vocabulary) -> None:
    problems = []
    if corpus.max_length != max_length:
        problems.append(f"max_length {corpus.max_length} (the model's is {max_length})")
    if corpus.length_policy != data.length_policy:
        problems.append(f"length policy {corpus.length_policy!r} (asked: {data.length_policy!r})")
    if run_vocabulary is not None:
        if hashlib.sha256(run_vocabulary.read_bytes()).hexdigest() != corpus.vocab_sha256:
            problems.append(f"another vocabulary than {run_vocabulary}")
    if problems:
        raise RunError(f"{folder} was prepared with {', '.join(problems)}; prepare it again with matching settings")


def default_vocab_size(vocabulary: VocabularySettings) -> int:
    """The size of a vocabulary trained for the run: ``vocabulary.vocab_size``, else :data:`DEFAULT_VOCAB_SIZE`."""
    return vocabulary.vocab_size or DEFAULT_VOCAB_SIZE
