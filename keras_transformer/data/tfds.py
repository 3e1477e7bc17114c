"""TFDS translation datasets (e.g. ``wmt14_translate/de-en``, the WMT 2014 of Section 5.1) as parallel text.

The prepared dataset in the TFDS data folder comes first; it is downloaded
and prepared only when it is missing and the network is reachable, and when
it cannot be, the message says how to use local files instead.
``tensorflow_datasets`` is imported only when a dataset is opened. Empty
sentences follow the ``on_error`` policy of
:mod:`~keras_transformer.data.parallel_text`.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Iterator

from keras_transformer.data.parallel_text import ParallelText, ReadReport, _check_on_error, _collect, _skip_or_raise

from keras_transformer.settings import SettingsMessage

__all__ = ["iter_tfds_pairs", "load_tfds_translation", "tfds_translation_builder"]



class TFDSNotPrepared(SettingsMessage, RuntimeError):
    """A TFDS dataset that is not prepared and cannot be downloaded here; the message says what to do instead."""

def _network_available(url: str = "https://storage.googleapis.com", timeout: float = 5.0) -> bool:
    """True when ``url`` answers within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True  # the server answered
    except (urllib.error.URLError, OSError, ValueError):
        return False


def tfds_translation_builder(
    name: str,
    source_lang: str | None = None,
    target_lang: str | None = None,
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
):
    """The prepared TFDS builder of a translation dataset and its language keys.

    Uses the prepared dataset in ``data_dir`` when there is one; otherwise
    downloads and prepares it if ``download`` is true and the network is
    reachable (WMT14 is several GB).

    Args:
        name: TFDS name with config, e.g. ``"wmt14_translate/de-en"``.
        source_lang: feature key of the source (default: the config's first
            language, e.g. ``de`` for ``de-en``, ``pt`` for ``pt_to_en``).
        target_lang: feature key of the target (default: the other language).
        data_dir: TFDS data directory (default: TFDS's own).
        download: allow download_and_prepare when the data is not prepared.

    Returns:
        ``(builder, source_lang, target_lang)``.

    Raises:
        ImportError: when ``tensorflow_datasets`` is not installed.
        RuntimeError: when the dataset is not prepared and cannot be
            downloaded; the message says how to use local files instead.
        ValueError: for unknown language keys.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:  # pragma: no cover - tfds is installed in the venv
        raise ImportError("load_tfds_translation needs tensorflow_datasets (pip install tensorflow-datasets)") from e
    data_dir = os.fspath(data_dir) if data_dir is not None else None
    builder = tfds.builder(name, data_dir=data_dir)
    keys = list(builder.info.features.keys())
    if source_lang is None or target_lang is None:
        config = name.split("/", 1)[1] if "/" in name else ""
        order = [k for k in config.replace("_to_", "-").split("-") if k in keys] or keys
        source_lang = source_lang or order[0]
        target_lang = target_lang or next(k for k in order + keys if k != source_lang)
    for lang in (source_lang, target_lang):
        if lang not in keys:
            raise ValueError(f"{name} has language features {keys}, not {lang!r}")

    prepared = os.path.exists(os.path.join(os.fspath(builder.data_dir), "dataset_info.json"))
    if not prepared:
        how = (
            "To train without TFDS, use local parallel files: read_parallel_files(source_path, target_path) "
            "(in a run: {data.train_source}/{data.train_target}), read_tsv_pairs(path) or load_multi30k(data_dir=...); or prepare "
            f"the dataset on a machine with network (`tfds build {name} --data_dir DIR`) and pass data_dir=DIR."
        )
        if not download:
            raise TFDSNotPrepared(f"TFDS dataset {name} is not prepared in {builder.data_dir} and download=False. "
                                  f"{how}")
        if not _network_available():
            raise TFDSNotPrepared(
                f"TFDS dataset {name} is not prepared in {builder.data_dir} and the network is unreachable, "
                f"so it cannot be downloaded. {how}"
            )
        try:
            builder.download_and_prepare()
        except Exception as e:  # TFDS raises many kinds
            raise TFDSNotPrepared(f"TFDS download_and_prepare({name}) failed: {e}. {how}") from e
    return builder, source_lang, target_lang


def iter_tfds_pairs(
    builder,
    split: str,
    source_lang: str,
    target_lang: str,
    report: ReadReport,
    on_error: str = "raise",
    max_pairs: int | None = None,
) -> Iterator[tuple[str, str]]:
    """Streams the pairs of a prepared TFDS translation split (the rules of :func:`load_tfds_translation`).

    Args:
        builder: from :func:`tfds_translation_builder`.
        split: TFDS split (``"train"``, ``"validation"``, ``"test"``, slices).
        source_lang: feature key of the source.
        target_lang: feature key of the target.
        report: the :class:`~keras_transformer.data.parallel_text.ReadReport` to update.
        on_error: ``"raise"`` or ``"skip"`` for empty sentences.
        max_pairs: read at most this many pairs.

    Yields:
        ``(source, target)`` sentences, stripped.

    Raises:
        ValueError: for empty sentences with ``on_error="raise"``, naming the
            example.
    """
    _check_on_error(on_error)
    name = builder.info.full_name  # e.g. wmt14_translate/de-en/1.0.0
    dataset = builder.as_dataset(split=split, shuffle_files=False)
    if max_pairs is not None:
        dataset = dataset.take(max_pairs)
    for number, example in enumerate(dataset.as_numpy_iterator(), start=1):
        report.pairs_read += 1
        texts = []
        for lang in (source_lang, target_lang):
            value = example[lang]
            texts.append((value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)).strip())
        if not texts[0] or not texts[1]:
            _skip_or_raise(report, on_error, "skipped_empty", f"tfds:{name}[{split}] example {number}: empty sentence")
            continue
        report.pairs_kept += 1
        yield texts[0], texts[1]


def load_tfds_translation(
    name: str,
    split: str = "train",
    source_lang: str | None = None,
    target_lang: str | None = None,
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
    on_error: str = "raise",
    max_pairs: int | None = None,
) -> ParallelText:
    """A TFDS translation dataset, e.g. ``wmt14_translate/de-en`` (Section 5.1).

    Uses the prepared dataset in ``data_dir`` when there is one; otherwise
    downloads and prepares it if ``download`` is true and the network is
    reachable (WMT14 is several GB).

    Args:
        name: TFDS name with config, e.g. ``"wmt14_translate/de-en"`` or
            ``"ted_hrlr_translate/pt_to_en"``.
        split: TFDS split (``"train"``, ``"validation"``, ``"test"``, slices).
        source_lang: feature key of the source (default: the config's first
            language, e.g. ``de`` for ``de-en``, ``pt`` for ``pt_to_en``).
        target_lang: feature key of the target (default: the other language).
        data_dir: TFDS data directory (default: TFDS's own).
        download: allow download_and_prepare when the data is not prepared.
        on_error: ``"raise"`` or ``"skip"`` for empty sentences.
        max_pairs: read at most this many pairs.

    Returns:
        :class:`~keras_transformer.data.parallel_text.ParallelText`.

    Raises:
        ImportError: when ``tensorflow_datasets`` is not installed.
        RuntimeError: when the dataset is not prepared and cannot be
            downloaded; the message says how to use local files instead.
        ValueError: for unknown language keys, or empty sentences with
            ``on_error="raise"``.
    """
    _check_on_error(on_error)
    builder, source_lang, target_lang = tfds_translation_builder(name, source_lang, target_lang, data_dir, download)
    report = ReadReport(source=f"tfds:{name}[{split}] {source_lang}->{target_lang}")
    pairs = iter_tfds_pairs(builder, split, source_lang, target_lang, report, on_error, max_pairs)
    return _collect(report, pairs)
