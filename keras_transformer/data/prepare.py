"""Prepare once, stream always: a corpus tokenized once into id shards on disk, with a manifest.

At WMT's size (Section 5.1: 4.5M English-German pairs) tokenizing the whole
corpus into memory at every start of ``train`` costs minutes and gigabytes on
every worker. :func:`prepare_corpus` does it once:

1. **Vocabulary**: reuses the given SentencePiece model, or trains the shared
   one (Section 3.4) on a seeded uniform sample of at most
   ``vocab_sample_size`` sentences of both sides (what SentencePiece's
   ``input_sentence_size`` does; the sample is drawn while streaming, so the
   corpus is never held in memory).
2. **Tokenization** in parallel worker processes (``processes``, default:
   the CPU cores): chunks of ``chunk_pairs`` pairs are streamed from the
   source (plain or gzip text files, a TSV file, a TFDS dataset: a
   :class:`~keras_transformer.data.corpus_source.CorpusSource`), tokenized,
   given EOS and put through the ``max_length`` policy with exact counts (the
   :class:`~keras_transformer.data.pipeline.LengthReport` contract of
   ``prepare_pairs``: nothing is dropped or truncated unreported).
3. **Shards**: chunk ``c`` goes to shard ``c mod num_shards`` (so every
   shard holds a similar mix of the corpus), written as TFRecord files
   ``train-00000-of-00032.tfrecord``; one record per pair, int32
   little-endian ``[S, source ids (S of them, EOS last), target ids (EOS
   last)]``; TFRecord's CRC-32C checksums catch a damaged record.
4. **Manifest** ``manifest.json``: format version, per shard its pairs,
   tokens, bytes, sha256 and the histogram of pair lengths (from which the
   streaming pipeline counts its batches exactly), the vocabulary's sha256
   and how it was trained, the length policy and ``max_length`` with the
   exact report, and the sources with their fingerprints
   (:mod:`~keras_transformer.data.corpus_source`). The folder is read back
   by :func:`~keras_transformer.data.prepared.open_prepared`.

Called again with the same sources and settings, :func:`prepare_corpus`
returns the prepared folder at once (what ``train --prepared-dir`` does at
every start); it re-prepares when a source's content, the vocabulary (or
how to train it), ``max_length``, the length policy or the number of shards
changed, and says which. It stops with a
:class:`~keras_transformer.data.prepared.PreparedDataError` naming the file
when a shard is missing or has another size than the manifest says, when
the manifest is unreadable or of another format, or when the folder is not
a prepared folder at all. Work happens in a sibling temporary
folder that replaces the old one only when complete, so a killed
preparation leaves the previous folder as it was.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from keras_transformer.config import TransformerConfig
from keras_transformer.data.corpus_source import CorpusSource, file_fingerprint
from keras_transformer.data.parallel_text import ReadReport
from keras_transformer.data.prepared import (
    FORMAT,
    MANIFEST_NAME,
    PreparedCorpus,
    PreparedDataError,
    _read_manifest,
    open_prepared,
)
from keras_transformer.settings import DEFAULT_NUM_SHARDS, DEFAULT_VOCAB_SAMPLE_SIZE, DEFAULT_VOCAB_SIZE

__all__ = ["prepare_corpus"]

logger = logging.getLogger(__name__)

RECORD_FORMAT = "TFRecord; one record per pair: int32 little-endian [S, source ids (S, EOS last), target ids (EOS last)]"
VOCABULARY_NAME = "spm"


def _shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def _vocab_request(vocab_size, vocab_sample_size, vocab_seed, model_type, train_key) -> dict[str, Any]:
    return {"vocab_size": vocab_size, "input_sentence_size": vocab_sample_size, "seed": vocab_seed,
            "model_type": model_type, "trained_on": train_key}


def _changes(manifest: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """Why an existing manifest does not fit ``want`` (empty: it fits)."""
    reasons = []
    splits = manifest.get("splits", {})
    for split in ("train", "valid"):
        have = splits.get(split, {}).get("fingerprint")
        need = want["fingerprints"].get(split)
        if have != need:
            if need is None:
                reasons.append(f"no {split} split is asked for now")
            elif have is None:
                reasons.append(f"a {split} split is asked for now")
            else:
                reasons.append(f"the {split} source changed ({_describe_change(have, need)})")
    vocabulary = manifest.get("vocabulary", {})
    if want["vocabulary_sha256"] is not None:
        if vocabulary.get("sha256") != want["vocabulary_sha256"]:
            reasons.append("another vocabulary is given")
    elif want["vocab_request"] is not None and vocabulary.get("trained") != want["vocab_request"]:
        reasons.append("the vocabulary is to be trained differently")
    for key in ("max_length", "length_policy"):
        if manifest.get(key) != want[key]:
            reasons.append(f"{key} changed ({manifest.get(key)!r} -> {want[key]!r})")
    if want["num_shards"] is not None and splits.get("train", {}).get("num_shards") != want["num_shards"]:
        reasons.append(f"num_shards changed ({splits.get('train', {}).get('num_shards')} -> {want['num_shards']})")
    return reasons


def _describe_change(have: dict[str, Any], need: dict[str, Any]) -> str:
    for key in need:
        if have.get(key) != need.get(key):
            if key == "content":
                for old, new in zip(have.get("content") or [], need["content"]):
                    if old != new:
                        return f"size {old.get('size')} -> {new.get('size')} bytes, sha256 differs" if \
                            old.get("size") != new.get("size") else "same size, sha256 differs"
            return f"{key}: {have.get(key)!r} -> {need.get(key)!r}"
    return "fingerprint differs"


def _reservoir_pairs(source: CorpusSource, size: int, seed: int) -> list[str]:
    """A uniform seeded sample of at most ``size`` sentences of both sides (SentencePiece's ``input_sentence_size``)."""
    from keras_transformer.data.tokenizer import _sample_sentences

    report = ReadReport(source=source.describe())
    sentences = (sentence for pair in source.pairs(report) for sentence in pair)
    return _sample_sentences(sentences, size, seed)


def _chunks(pairs: Iterator[tuple[str, str]], size: int) -> Iterator[tuple[list[str], list[str]]]:
    while True:
        chunk = list(itertools.islice(pairs, size))
        if not chunk:
            return
        yield [a for a, _ in chunk], [b for _, b in chunk]


def _write_split(directory: str, split: str, source: CorpusSource, model_bytes: bytes, max_length: int,
                 length_policy: str, num_shards: int, processes: int, chunk_pairs: int,
                 log: Callable[[str], None]) -> dict[str, Any]:
    """Tokenizes ``source`` into ``num_shards`` shards of ``directory``; returns the split's manifest entry."""
    import tensorflow as tf

    from keras_transformer.data import _tokenize

    report = ReadReport(source=source.describe())
    names = [_shard_name(split, i, num_shards) for i in range(num_shards)]
    writers = [tf.io.TFRecordWriter(os.path.join(directory, name)) for name in names]
    shards = [dict(file=name, pairs=0, source_tokens=0, target_tokens=0,
                   longest_histogram=np.zeros([max_length + 1], np.int64)) for name in names]
    totals = dict(pairs=0, kept=0, dropped=0, truncated=0, truncated_source=0, truncated_target=0,
                  source_tokens=0, target_tokens=0, longest_source=0, longest_target=0)
    start = time.monotonic()
    last_log = start

    def consume(index: int, result: dict) -> None:
        nonlocal last_log
        shard = shards[index % num_shards]
        writer = writers[index % num_shards]
        records, offsets = result["records"], result["offsets"]
        for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
            writer.write(records[a:b])
        shard["pairs"] += result["kept"]
        shard["source_tokens"] += result["source_tokens"]
        shard["target_tokens"] += result["target_tokens"]
        shard["longest_histogram"] += result["longest_histogram"]
        for key in ("pairs", "kept", "dropped", "truncated", "truncated_source", "truncated_target",
                    "source_tokens", "target_tokens"):
            totals[key] += result[key]
        for key in ("longest_source", "longest_target"):
            totals[key] = max(totals[key], result[key])
        now = time.monotonic()
        if now - last_log >= 30:
            last_log = now
            log(f"      {split}: {totals['pairs']:,} pairs tokenized ({totals['pairs'] / (now - start):,.0f}/s)")

    chunks = _chunks(source.pairs(report), chunk_pairs)
    try:
        if processes <= 1:
            _tokenize.init_worker(model_bytes)
            for index, (sources, targets) in enumerate(chunks):
                consume(index, _tokenize.tokenize_chunk(sources, targets, max_length, length_policy))
        else:
            context = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(processes, mp_context=context,
                                                        initializer=_tokenize.init_worker,
                                                        initargs=(model_bytes,)) as pool:
                pending: list[concurrent.futures.Future] = []
                index = 0
                for sources, targets in chunks:  # at most 2 chunks per process in flight: memory stays bounded
                    pending.append(pool.submit(_tokenize.tokenize_chunk, sources, targets, max_length, length_policy))
                    if len(pending) >= 2 * processes:
                        consume(index, pending.pop(0).result())
                        index += 1
                for future in pending:
                    consume(index, future.result())
                    index += 1
    except concurrent.futures.process.BrokenProcessPool as error:
        raise RuntimeError(
            "a tokenizing process of prepare_corpus died. Worker processes are started with multiprocessing's "
            "'spawn', which imports the main module again: in a script, call prepare_corpus under "
            "`if __name__ == '__main__':`, or pass processes=1"
        ) from error
    finally:
        for writer in writers:
            writer.close()
    for shard in shards:
        path = os.path.join(directory, shard["file"])
        shard.update(file_fingerprint(path))
        shard["bytes"] = shard.pop("size")
        shard["longest_histogram"] = shard["longest_histogram"].tolist()
    from keras_transformer.data.pipeline import LengthReport

    lengths = LengthReport(max_length=max_length, length_policy=length_policy, **totals)
    return {"source": source.to_dict(), "read": report.to_dict(), "lengths": lengths.to_dict(),
            "num_shards": num_shards, "chunk_pairs": chunk_pairs, "shards": shards,
            "seconds": round(time.monotonic() - start, 2)}


def prepare_corpus(
    directory: str | os.PathLike,
    train: CorpusSource,
    valid: CorpusSource | None = None,
    *,
    vocabulary: str | os.PathLike | None = None,
    vocab_size: int | None = None,
    vocab_sample_size: int | None = None,
    vocab_seed: int | None = None,
    model_type: str | None = None,
    vocab_threads: int = 1,
    max_length: int = TransformerConfig.max_length,
    length_policy: str = "drop",
    num_shards: int | None = None,
    processes: int | None = None,
    chunk_pairs: int = 256,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> PreparedCorpus:
    """Prepares ``directory`` from the sources once; returns it as it is when it already matches.

    See the module docstring for the steps, the format and the rules of
    reuse.

    Args:
        directory: the prepared folder (created; an existing prepared folder
            is reused or replaced).
        train: the training pairs.
        valid: the validation pairs (one shard), or ``None``.
        vocabulary: an existing SentencePiece model to use (with pad/unk/
            bos/eos = 0/1/2/3), or ``None`` to reuse the folder's or train one.
        vocab_size: size of a trained vocabulary. This and the next three
            options default (``None``) to how the folder's vocabulary was
            made (a vocabulary given to an earlier call is kept when all four
            are ``None``), else to 8000 pieces, 1,000,000 sentences, seed 0,
            unigram.
        vocab_sample_size: most sentences (of both sides) the vocabulary is
            trained on: a seeded uniform sample (SentencePiece's
            ``input_sentence_size``).
        vocab_seed: seed of that sample.
        model_type: ``"unigram"`` or ``"bpe"``.
        vocab_threads: SentencePiece trainer threads (1: bit-for-bit
            reproducible).
        max_length: longest kept sequence in tokens, EOS included.
        length_policy: ``"drop"`` or ``"truncate"`` the longer pairs (counted
            exactly either way).
        num_shards: training shards (``None``: the folder's existing number,
            else 32). Write a multiple of the number of workers that will
            read them (see :mod:`keras_transformer.data.streaming`).
        processes: tokenizing processes (``None``: the CPU cores; 1: in this
            process). They are started with ``multiprocessing``'s ``spawn``
            (TensorFlow runs in this process, so no ``fork``), which imports
            the main module again: in a script, call this under
            ``if __name__ == "__main__":`` (the CLI and notebooks need
            nothing).
        chunk_pairs: pairs per chunk (the unit of work and of the round-robin
            assignment to shards).
        force: prepare again even when the folder matches.
        log: where progress lines go (default: this module's logger).

    Returns:
        The :class:`~keras_transformer.data.prepared.PreparedCorpus`.

    Raises:
        PreparedDataError: when ``directory`` exists but is not a prepared
            folder, or a reused folder's manifest or shards are damaged
            (named).
        ValueError: for bad settings or bad input lines (named by the
            readers), or an unusable vocabulary.
        FileNotFoundError: naming a missing source file.
        RuntimeError: when a tokenizing process dies (the message says why
            it usually does).
    """
    from keras_transformer.data.pipeline import LENGTH_POLICIES

    if log is None:
        def log(line: str) -> None:  # dropped or truncated pairs are worth a warning (prepare_pairs' rule)
            warn = " dropped" in line and not (" 0 dropped and 0 truncated" in line)
            logger.log(logging.WARNING if warn else logging.INFO, "prepare_corpus: %s", line)
    if length_policy not in LENGTH_POLICIES:
        raise ValueError(f"length_policy must be one of {LENGTH_POLICIES}, got {length_policy!r}")
    if not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"max_length must be an integer >= 2 (one piece + EOS), got {max_length!r}")
    if num_shards is not None and (not isinstance(num_shards, int) or num_shards < 1):
        raise ValueError(f"num_shards must be a positive integer, got {num_shards!r}")
    if chunk_pairs < 1 or (vocab_sample_size is not None and vocab_sample_size < 1):
        raise ValueError(f"chunk_pairs and vocab_sample_size must be positive, got {chunk_pairs}, {vocab_sample_size}")
    processes = processes or os.cpu_count() or 1
    directory = os.path.abspath(directory)
    manifest = None
    if os.path.isdir(directory) and os.listdir(directory):
        if not os.path.isfile(os.path.join(directory, MANIFEST_NAME)):
            raise PreparedDataError(
                f"{directory} exists and is not a prepared folder (no {MANIFEST_NAME}); give a new or empty folder"
            )
        manifest = _read_manifest(directory)

    start = time.monotonic()
    log(f"fingerprinting the sources ({train.describe()}{', ' + valid.describe() if valid else ''})")
    fingerprints = {"train": train.fingerprint()}
    if valid is not None:
        fingerprints["valid"] = valid.fingerprint()
    old_vocab = (manifest or {}).get("vocabulary") or {}
    given_bytes = None
    if vocabulary is not None:
        with open(os.fspath(vocabulary), "rb") as f:
            given_bytes = f.read()
    elif (vocab_size, vocab_sample_size, vocab_seed, model_type) == (None,) * 4 and old_vocab.get("sha256") \
            and old_vocab.get("trained") is None:
        old_path = os.path.join(directory, old_vocab.get("file", VOCABULARY_NAME + ".model"))
        if os.path.isfile(old_path):  # the folder's vocabulary was given to it: keep it
            with open(old_path, "rb") as f:
                given_bytes = f.read()
    given_sha = hashlib.sha256(given_bytes).hexdigest() if given_bytes is not None else None
    request = None
    if given_sha is None:
        base = old_vocab.get("trained") or {}

        def pick(value, key, default):
            return value if value is not None else base.get(key, default)

        request = _vocab_request(pick(vocab_size, "vocab_size", DEFAULT_VOCAB_SIZE),
                                 pick(vocab_sample_size, "input_sentence_size", DEFAULT_VOCAB_SAMPLE_SIZE),
                                 pick(vocab_seed, "seed", 0), pick(model_type, "model_type", "unigram"),
                                 fingerprints["train"])
    if num_shards is None:
        num_shards = int((manifest or {}).get("splits", {}).get("train", {}).get("num_shards") or DEFAULT_NUM_SHARDS)
    want = dict(fingerprints=fingerprints, vocabulary_sha256=given_sha, vocab_request=request,
                max_length=max_length, length_policy=length_policy, num_shards=num_shards)
    if manifest is not None and not force:
        reasons = _changes(manifest, want)
        if not reasons:
            corpus = open_prepared(directory)
            log(f"reusing the prepared data in {directory}: sources, vocabulary, max_length {max_length} and "
                f"length policy {length_policy!r} match ({time.monotonic() - start:.1f} s)")
            return corpus
        log(f"preparing {directory} again: {'; '.join(reasons)}")

    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    work = os.path.join(parent, f".{os.path.basename(directory)}.tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        vocab_record = _prepare_vocabulary(work, directory, manifest, train, given_sha, given_bytes, request,
                                           vocab_threads, log)
        with open(os.path.join(work, vocab_record["file"]), "rb") as f:
            model_bytes = f.read()
        splits = {}
        for split, source, shards in (("train", train, num_shards), ("valid", valid, 1)):
            if source is None:
                continue
            used = processes if split == "train" else 1
            log(f"tokenizing {split} ({source.describe()}) into {shards} shard(s) with {used} process(es)")
            entry = _write_split(work, split, source, model_bytes, max_length, length_policy, shards, used,
                                 chunk_pairs, log)
            entry["fingerprint"] = fingerprints[split]
            splits[split] = entry
            read = entry["read"]
            if read["skipped"]:
                log(f"      {split}: {read['pairs_read']} read, {read['skipped']} skipped as bad lines "
                    f"(first: {'; '.join(read['examples'][:3])})")
            log(f"      {split}: {_length_summary(entry['lengths'])}")
        manifest = {
            "format": FORMAT,
            "record_format": RECORD_FORMAT,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "max_length": max_length,
            "length_policy": length_policy,
            "vocabulary": vocab_record,
            "splits": splits,
            "seconds": round(time.monotonic() - start, 2),
        }
        with open(os.path.join(work, MANIFEST_NAME), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
        _replace_directory(work, directory)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    corpus = open_prepared(directory)
    log(f"prepared {directory} in {time.monotonic() - start:.1f} s: {corpus.summary()}")
    return corpus


def _length_summary(lengths: dict[str, Any]) -> str:
    from keras_transformer.data.pipeline import LengthReport

    return LengthReport(**lengths).summary()


def _prepare_vocabulary(work, directory, manifest, train, given_sha, given_bytes, request, threads, log):
    """Writes ``spm.model`` (+ ``.json``) into ``work``; returns the manifest's vocabulary entry."""
    from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece

    name = VOCABULARY_NAME + ".model"
    target = os.path.join(work, name)
    if given_bytes is not None:
        SubwordTokenizer(given_bytes)  # refuses a model with other special ids
        with open(target, "wb") as f:
            f.write(given_bytes)
        log(f"using the given vocabulary (sha256 {given_sha[:12]}...)")
        return {"file": name, "sha256": given_sha, "vocab_size": SubwordTokenizer(given_bytes).vocab_size,
                "trained": None}
    old = (manifest or {}).get("vocabulary", {})
    old_path = os.path.join(directory, old.get("file", name))
    if old.get("trained") == request and os.path.isfile(old_path):
        with open(old_path, "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() == old.get("sha256"):
            shutil.copyfile(old_path, target)
            old_json = old_path[: -len(".model")] + ".json"
            if os.path.isfile(old_json):
                shutil.copyfile(old_json, target[: -len(".model")] + ".json")
            log(f"reusing the vocabulary of {directory} (same sources and training options)")
            return dict(old)
    log(f"sampling at most {request['input_sentence_size']:,} sentences of both sides (seed {request['seed']}) "
        f"and training a shared {request['model_type']} SentencePiece vocabulary of {request['vocab_size']} pieces")
    began = time.monotonic()
    sample = _reservoir_pairs(train, request["input_sentence_size"], request["seed"])
    path = train_sentencepiece([sample], os.path.join(work, VOCABULARY_NAME), vocab_size=request["vocab_size"],
                               model_type=request["model_type"], input_sentence_size=len(sample) or 1,
                               shuffle=False, num_threads=threads)
    del sample
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    log(f"      vocabulary trained in {time.monotonic() - began:.1f} s (sha256 {sha[:12]}...)")
    return {"file": name, "sha256": sha, "vocab_size": request["vocab_size"], "trained": request}


def _replace_directory(work: str, directory: str) -> None:
    """Moves the finished ``work`` folder to ``directory``, replacing an old prepared folder."""
    old = None
    if os.path.exists(directory):
        old = f"{directory}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
    os.replace(work, directory)
    if old:
        shutil.rmtree(old, ignore_errors=True)
