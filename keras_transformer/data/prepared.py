"""Reading a prepared folder: :func:`open_prepared`, the checks of its manifest and shards, :class:`PreparedCorpus`.

A folder written by :func:`~keras_transformer.data.prepare.prepare_corpus`
holds ``manifest.json``, the shared vocabulary ``spm.model`` and the TFRecord
shards of each split (the layout: :mod:`~keras_transformer.data.prepare`).
:func:`open_prepared` refuses a folder without a manifest, a manifest that is
unreadable, of another :data:`FORMAT` or incomplete, a vocabulary whose
sha256 differs and a shard that is missing or of another size, with a
:class:`PreparedDataError` naming the file. The :class:`PreparedCorpus` then
gives the streaming pipeline (:mod:`~keras_transformer.data.streaming`) its
shards and exact counts, and reads a small split into memory.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from keras_transformer.data.corpus_source import CorpusSource, file_fingerprint
from keras_transformer.data.parallel_text import ReadReport

from keras_transformer.settings import RunError

__all__ = ["FORMAT", "MANIFEST_NAME", "PreparedCorpus", "PreparedDataError", "open_prepared"]

#: Format of the prepared folder (manifest and records); another value is refused.
FORMAT = "keras_transformer.prepared/1"
MANIFEST_NAME = "manifest.json"


class PreparedDataError(RunError):
    """A prepared folder that cannot be used as it is: the message names the file and what is wrong."""


class PreparedCorpus:
    """A prepared folder: the manifest, the vocabulary and the shards of each split.

    Open it with :func:`open_prepared` (or get it from :func:`~keras_transformer.data.prepare.prepare_corpus`).

    Args:
        directory: the prepared folder.
        manifest: its parsed ``manifest.json``.
    """

    def __init__(self, directory: str | os.PathLike, manifest: dict[str, Any]):
        self.directory = os.path.abspath(directory)
        self.manifest = manifest

    # -- what is in it -----------------------------------------------------------------
    @property
    def vocabulary_path(self) -> str:
        """Path of the shared SentencePiece model (``spm.model``)."""
        return os.path.join(self.directory, self.manifest["vocabulary"]["file"])

    @property
    def vocab_sha256(self) -> str:
        """sha256 of the vocabulary the ids were made with."""
        return self.manifest["vocabulary"]["sha256"]

    @property
    def max_length(self) -> int:
        """The ``max_length`` the pairs were cut or dropped at (tokens, EOS included)."""
        return int(self.manifest["max_length"])

    @property
    def length_policy(self) -> str:
        """``"drop"`` or ``"truncate"``."""
        return self.manifest["length_policy"]

    @property
    def splits(self) -> list[str]:
        """The prepared splits, e.g. ``["train", "valid"]``."""
        return list(self.manifest["splits"])

    def split(self, name: str) -> dict[str, Any]:
        """The manifest entry of split ``name``.

        Raises:
            KeyError: naming the split and the ones there are.
        """
        try:
            return self.manifest["splits"][name]
        except KeyError:
            raise KeyError(f"{self.directory} has no split {name!r} (it has {self.splits})") from None

    def files(self, split: str = "train") -> list[str]:
        """The shard paths of ``split``, in shard order."""
        return [os.path.join(self.directory, shard["file"]) for shard in self.split(split)["shards"]]

    def num_pairs(self, split: str = "train") -> int:
        """Kept pairs of ``split`` (over all shards)."""
        return sum(int(shard["pairs"]) for shard in self.split(split)["shards"])

    def length_report(self, split: str = "train"):
        """The exact :class:`~keras_transformer.data.pipeline.LengthReport` of ``split``'s preparation."""
        from keras_transformer.data.pipeline import LengthReport

        return LengthReport(**self.split(split)["lengths"])

    def read_report(self, split: str = "train") -> ReadReport:
        """The :class:`~keras_transformer.data.parallel_text.ReadReport` of ``split``'s reading."""
        record = dict(self.split(split)["read"])
        record.pop("skipped", None)
        return ReadReport(**record)

    def source(self, split: str = "train") -> CorpusSource:
        """The :class:`~keras_transformer.data.corpus_source.CorpusSource` ``split`` was prepared from."""
        return CorpusSource.from_dict(self.split(split)["source"])

    # -- checks ------------------------------------------------------------------------
    def verify(self, level: str = "size") -> None:
        """Checks the shards against the manifest.

        Args:
            level: ``"size"`` (every shard exists with the manifest's size:
                catches missing and truncated files at the cost of a
                ``stat``), ``"sha256"`` (also hashes every shard), or
                ``"records"`` (sizes, then reads every record of every
                shard, which checks TFRecord's CRC-32C and the pair count).

        Raises:
            PreparedDataError: naming the first bad file and what is wrong.
            ValueError: for an unknown ``level``.
        """
        if level not in ("size", "sha256", "records"):
            raise ValueError(f"level must be 'size', 'sha256' or 'records', got {level!r}")
        for split in self.splits:
            for shard in self.split(split)["shards"]:
                path = os.path.join(self.directory, shard["file"])
                if not os.path.isfile(path):
                    raise PreparedDataError(f"prepared shard missing: {path} (listed in {self.manifest_path})")
                size = os.path.getsize(path)
                if size != int(shard["bytes"]):
                    raise PreparedDataError(
                        f"prepared shard damaged: {path} has {size} bytes, {self.manifest_path} says "
                        f"{shard['bytes']} ({'truncated' if size < int(shard['bytes']) else 'grown'}); "
                        "prepare the folder again (delete it, or prepare with {argument.force})"
                    )
                if level == "sha256" and file_fingerprint(path)["sha256"] != shard["sha256"]:
                    raise PreparedDataError(
                        f"prepared shard damaged: {path} does not have the sha256 {self.manifest_path} records; "
                        "prepare the folder again"
                    )
                if level == "records":
                    self.check_records(path, int(shard["pairs"]))

    def check_records(self, path: str, pairs: int | None = None) -> None:
        """Reads every record of one shard: TFRecord's CRC-32C, the record layout and the pair count.

        Args:
            path: a shard file.
            pairs: the expected number of records (``None``: not checked).

        Raises:
            PreparedDataError: naming ``path`` and the first problem.
        """
        import tensorflow as tf

        count = 0
        try:
            for record in tf.data.TFRecordDataset(path).batch(4096):
                count += int(tf.size(record))
        except tf.errors.DataLossError as error:
            raise PreparedDataError(
                f"prepared shard damaged: {path}: {error.message.split('[Op:')[0].strip()} after {count} good "
                "records (TFRecord checksum); prepare the folder again"
            ) from None
        if pairs is not None and count != pairs:
            raise PreparedDataError(
                f"prepared shard {path} holds {count} records, {self.manifest_path} says {pairs}; prepare the "
                "folder again"
            )

    def find_damaged_shard(self, split: str = "train") -> None:
        """After a ``DataLossError`` while streaming: reads ``split``'s shards one by one and names the bad one.

        Raises:
            PreparedDataError: naming the first damaged shard (nothing is
                raised when every shard reads back whole).
        """
        for shard in self.split(split)["shards"]:
            self.check_records(os.path.join(self.directory, shard["file"]), int(shard["pairs"]))

    @property
    def manifest_path(self) -> str:
        """Path of ``manifest.json``."""
        return os.path.join(self.directory, MANIFEST_NAME)

    # -- reading -----------------------------------------------------------------------
    def read_pairs(self, split: str = "valid"):
        """All pairs of ``split`` in memory, in shard order (for a small validation split, one shard: corpus order).

        Returns:
            :class:`~keras_transformer.data.pipeline.PreparedPairs` (ragged
            ``int32`` ids, pieces + EOS) with the split's
            :class:`~keras_transformer.data.pipeline.LengthReport`.

        Raises:
            PreparedDataError: for a damaged shard (named).
        """
        import tensorflow as tf

        from keras_transformer.data.pipeline import PreparedPairs
        from keras_transformer.data.streaming import decode_record

        source_rows, target_rows = [], []
        try:
            dataset = tf.data.TFRecordDataset(self.files(split)).map(decode_record).batch(1)
            for source, target in dataset.unbatch().as_numpy_iterator():
                source_rows.append(source)
                target_rows.append(target)
        except tf.errors.DataLossError:
            self.find_damaged_shard(split)
            raise

        def ragged(rows):
            lengths = np.array([len(r) for r in rows], np.int64)
            values = np.concatenate(rows).astype(np.int32) if rows else np.zeros([0], np.int32)
            return tf.RaggedTensor.from_row_lengths(tf.constant(values), tf.constant(lengths))

        return PreparedPairs(ragged(source_rows), ragged(target_rows), self.length_report(split))

    def epoch_batches(self, **kwargs):
        """:func:`keras_transformer.data.streaming.make_streaming_batches` over this folder (same arguments)."""
        from keras_transformer.data.streaming import make_streaming_batches

        return make_streaming_batches(self, **kwargs)

    def summary(self, split: str = "train") -> str:
        """One line for logs: pairs, shards, tokens and the length report."""
        entry = self.split(split)
        tokens = sum(int(s["source_tokens"]) + int(s["target_tokens"]) for s in entry["shards"])
        return (f"{self.num_pairs(split)} pairs in {len(entry['shards'])} shard(s) ({tokens} tokens); "
                f"{self.length_report(split).summary()}")


def _read_manifest(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, MANIFEST_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except json.JSONDecodeError as error:
        raise PreparedDataError(f"{path} is not valid JSON ({error}); prepare the folder again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise PreparedDataError(f"{path} has format {found!r}, this version reads {FORMAT!r}; prepare the folder again")
    for key in ("vocabulary", "splits", "max_length", "length_policy"):
        if key not in manifest:
            raise PreparedDataError(f"{path} has no {key!r} entry; prepare the folder again")
    for name, entry in manifest["splits"].items():
        shards = entry.get("shards")
        if not shards or any(not {"file", "pairs", "bytes", "longest_histogram"} <= set(s) for s in shards):
            raise PreparedDataError(f"{path}: split {name!r} lists no shards or incomplete shard entries")
        if len(shards) != entry.get("num_shards"):
            raise PreparedDataError(f"{path}: split {name!r} lists {len(shards)} shards but num_shards is "
                                    f"{entry.get('num_shards')}")
    return manifest


def open_prepared(directory: str | os.PathLike, verify: str = "size") -> PreparedCorpus:
    """Opens a prepared folder and checks its shards.

    Args:
        directory: a folder written by :func:`~keras_transformer.data.prepare.prepare_corpus`.
        verify: :meth:`PreparedCorpus.verify`'s ``level``.

    Returns:
        The :class:`PreparedCorpus`.

    Raises:
        PreparedDataError: naming the manifest or shard at fault (missing,
            unreadable, another format, a shard of the wrong size, ...).
    """
    directory = os.path.abspath(directory)
    if not os.path.isfile(os.path.join(directory, MANIFEST_NAME)):
        raise PreparedDataError(f"{directory} is not a prepared folder: {os.path.join(directory, MANIFEST_NAME)} "
                                "is missing")
    corpus = PreparedCorpus(directory, _read_manifest(directory))
    vocabulary = corpus.vocabulary_path
    if not os.path.isfile(vocabulary):
        raise PreparedDataError(f"prepared vocabulary missing: {vocabulary} (listed in {corpus.manifest_path})")
    with open(vocabulary, "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != corpus.vocab_sha256:
            raise PreparedDataError(f"{vocabulary} is not the vocabulary {corpus.manifest_path} records (sha256 "
                                    "differs); prepare the folder again")
    corpus.verify(verify)
    return corpus
