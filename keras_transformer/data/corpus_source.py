"""What a prepared folder is prepared from: a :class:`CorpusSource`, how its pairs are read and its fingerprint.

A :class:`CorpusSource` names a split's sentence pairs (two aligned text
files, a TSV file, a TFDS dataset, or the files of a Multi30k split) and how
to read them; it streams them with the readers of
:mod:`~keras_transformer.data.parallel_text` and
:mod:`~keras_transformer.data.tfds`, and records itself in the manifest of
:func:`~keras_transformer.data.prepare.prepare_corpus`.

Fingerprints of the sources: a text file is identified by its size and the
sha256 of its bytes (as stored, so a ``.gz`` file is hashed compressed;
about 1-2 s per GB). A TFDS dataset by its name, version, split, language
keys, the sha256 of its ``dataset_info.json`` (which lists every shard's
length and size) and the size of each of its files: TFDS versions are
immutable and a re-generated dataset gets a new ``dataset_info.json``, so
the files are not hashed (WMT14 is ~1.5 GB).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterator
from typing import Any

from keras_transformer.data.multi30k import multi30k_files
from keras_transformer.data.parallel_text import ReadReport, iter_parallel_files, iter_tsv_pairs
from keras_transformer.data.tfds import iter_tfds_pairs, tfds_translation_builder

__all__ = ["CorpusSource", "file_fingerprint"]


def file_fingerprint(path: str | os.PathLike, block_size: int = 1 << 20) -> dict[str, Any]:
    """Size and sha256 of a file's bytes (as stored: a ``.gz`` file is hashed compressed).

    Args:
        path: the file.
        block_size: bytes read at a time.

    Returns:
        ``{"size": int, "sha256": str}``.

    Raises:
        FileNotFoundError: naming a missing file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"parallel data file not found: {path}")
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(block_size), b""):
            digest.update(block)
    return {"size": os.path.getsize(path), "sha256": digest.hexdigest()}


@dataclasses.dataclass(frozen=True)
class CorpusSource:
    """Where a split's sentence pairs come from, and how to read them.

    Build it with :meth:`files`, :meth:`tsv`, :meth:`tfds` or
    :meth:`multi30k`.

    Attributes:
        kind: ``"files"`` (two aligned text files), ``"tsv"`` or ``"tfds"``.
        paths: ``(source, target)`` files, or ``(tsv,)``; absolute.
        source_column: TSV column of the source.
        target_column: TSV column of the target.
        delimiter: TSV field separator.
        name: TFDS dataset name with config, e.g. ``"wmt14_translate/de-en"``.
        split: TFDS split.
        source_lang: TFDS source feature key (``None``: TFDS's default order).
        target_lang: TFDS target feature key.
        data_dir: TFDS data directory.
        max_pairs: read only the first this many pairs (``None``: all).
        on_error: ``"raise"`` or ``"skip"`` for bad lines (see
            :mod:`keras_transformer.data.parallel_text`).
    """

    kind: str
    paths: tuple[str, ...] = ()
    source_column: int = 0
    target_column: int = 1
    delimiter: str = "\t"
    name: str | None = None
    split: str | None = None
    source_lang: str | None = None
    target_lang: str | None = None
    data_dir: str | None = None
    max_pairs: int | None = None
    on_error: str = "raise"

    @classmethod
    def files(cls, source: str | os.PathLike, target: str | os.PathLike, on_error: str = "raise",
              max_pairs: int | None = None) -> "CorpusSource":
        """Two line-aligned UTF-8 files (plain or ``.gz``)."""
        return cls("files", (os.path.abspath(source), os.path.abspath(target)), on_error=on_error, max_pairs=max_pairs)

    @classmethod
    def tsv(cls, path: str | os.PathLike, source_column: int = 0, target_column: int = 1, delimiter: str = "\t",
            on_error: str = "raise", max_pairs: int | None = None) -> "CorpusSource":
        """A delimited file of pairs (e.g. Tatoeba ``spa.txt``)."""
        return cls("tsv", (os.path.abspath(path),), source_column=source_column, target_column=target_column,
                   delimiter=delimiter, on_error=on_error, max_pairs=max_pairs)

    @classmethod
    def tfds(cls, name: str, split: str = "train", source_lang: str | None = None, target_lang: str | None = None,
             data_dir: str | os.PathLike | None = None, on_error: str = "raise",
             max_pairs: int | None = None) -> "CorpusSource":
        """A prepared TFDS translation dataset (e.g. ``wmt14_translate/de-en``)."""
        return cls("tfds", name=name, split=split, source_lang=source_lang, target_lang=target_lang,
                   data_dir=os.path.abspath(data_dir) if data_dir else None, on_error=on_error, max_pairs=max_pairs)

    @classmethod
    def multi30k(cls, split: str = "train", data_dir: str | os.PathLike | None = None, source_lang: str = "en",
                 target_lang: str = "de", download: bool = True, cache_dir: str | os.PathLike | None = None,
                 on_error: str = "raise", max_pairs: int | None = None) -> "CorpusSource":
        """The two files of a Multi30k split (found or downloaded by :func:`~keras_transformer.data.multi30k.multi30k_files`)."""
        source, target = multi30k_files(split, data_dir, source_lang, target_lang, download, cache_dir)
        return cls.files(source, target, on_error=on_error, max_pairs=max_pairs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict (:meth:`from_dict` inverts it)."""
        return dict(dataclasses.asdict(self), paths=list(self.paths))

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> "CorpusSource":
        """The source recorded by :meth:`to_dict`."""
        return cls(**dict(record, paths=tuple(record.get("paths", ()))))

    def describe(self) -> str:
        """One line for logs, e.g. ``"train.en | train.de"``."""
        if self.kind == "tfds":
            return f"tfds:{self.name}[{self.split}]"
        return " | ".join(self.paths)

    def _tfds_builder(self):
        return tfds_translation_builder(self.name, self.source_lang, self.target_lang, self.data_dir, download=True)

    def fingerprint(self) -> dict[str, Any]:
        """The identity of the content and of how it is read (what decides whether prepared data is still valid).

        Paths are not part of it: moving a corpus keeps its prepared data.

        Returns:
            A JSON-serializable dict (see the module docstring).

        Raises:
            FileNotFoundError: naming a missing file.
        """
        how = {"kind": self.kind, "max_pairs": self.max_pairs, "on_error": self.on_error}
        if self.kind == "files":
            return dict(how, content=[file_fingerprint(p) for p in self.paths])
        if self.kind == "tsv":
            return dict(how, columns=[self.source_column, self.target_column], delimiter=self.delimiter,
                        content=[file_fingerprint(p) for p in self.paths])
        if self.kind == "tfds":
            builder, source_lang, target_lang = self._tfds_builder()
            directory = os.fspath(builder.data_dir)
            info = os.path.join(directory, "dataset_info.json")
            files = sorted(f for f in os.listdir(directory) if f != "dataset_info.json")
            return dict(how, name=self.name, version=str(builder.info.version), split=self.split,
                        languages=[source_lang, target_lang], dataset_info=file_fingerprint(info),
                        files={f: os.path.getsize(os.path.join(directory, f)) for f in files})
        raise ValueError(f"unknown corpus source kind {self.kind!r}")

    def pairs(self, report: ReadReport) -> Iterator[tuple[str, str]]:
        """Streams the ``(source, target)`` pairs, updating ``report``.

        Raises:
            FileNotFoundError, ValueError, RuntimeError: as the readers of
            :mod:`keras_transformer.data.parallel_text` and
            :mod:`keras_transformer.data.tfds`.
        """
        if self.kind == "files":
            return iter_parallel_files(self.paths[0], self.paths[1], report, self.on_error, self.max_pairs)
        if self.kind == "tsv":
            return iter_tsv_pairs(self.paths[0], report, self.source_column, self.target_column, self.on_error,
                                  self.delimiter, self.max_pairs)
        if self.kind == "tfds":
            builder, source_lang, target_lang = self._tfds_builder()
            return iter_tfds_pairs(builder, self.split, source_lang, target_lang, report, self.on_error,
                                   self.max_pairs)
        raise ValueError(f"unknown corpus source kind {self.kind!r}")
