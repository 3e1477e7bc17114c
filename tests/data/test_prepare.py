"""Tests of keras_transformer.data.prepare (and .prepared, .corpus_source): shards and manifest, reuse and invalidation, damaged folders."""

from __future__ import annotations

import collections
import gzip
import json
import os
import shutil

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.data.corpus_source import CorpusSource
from keras_transformer.data.pipeline import prepare_pairs
from keras_transformer.data.prepare import prepare_corpus
from keras_transformer.data.prepared import FORMAT, PreparedDataError, open_prepared
from keras_transformer.data.streaming import decode_record
from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece

EOS = 3
PAIRS = 300


def _lines(path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def corpus_files(multi30k_dir, tmp_path_factory):
    """The first 300 Multi30k training pairs: English plain, German gzip-compressed (both readers)."""
    folder = tmp_path_factory.mktemp("corpus")
    en, de = _lines(multi30k_dir / "train.en")[:PAIRS], _lines(multi30k_dir / "train.de")[:PAIRS]
    (folder / "train.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    with gzip.open(folder / "train.de.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(de) + "\n")
    val_en, val_de = _lines(multi30k_dir / "val.en")[:40], _lines(multi30k_dir / "val.de")[:40]
    (folder / "val.en").write_text("\n".join(val_en) + "\n", encoding="utf-8")
    (folder / "val.de").write_text("\n".join(val_de) + "\n", encoding="utf-8")
    return folder, en, de


def _source(folder) -> CorpusSource:
    return CorpusSource.files(folder / "train.en", folder / "train.de.gz")


def _records(corpus, split="train"):
    """Every (source, target) id tuple in the shards of ``split``, read with tf.data independently of streaming."""
    out = []
    for record in tf.data.TFRecordDataset(corpus.files(split)):
        source, target = decode_record(record)
        out.append((tuple(source.numpy().tolist()), tuple(target.numpy().tolist())))
    return out


@pytest.fixture(scope="module")
def prepared(corpus_files, tmp_path_factory):
    folder, _, _ = corpus_files
    lines = []
    corpus = prepare_corpus(
        tmp_path_factory.mktemp("p") / "prep", _source(folder),
        CorpusSource.files(folder / "val.en", folder / "val.de"), vocab_size=300, max_length=24, num_shards=3,
        processes=1, chunk_pairs=16, log=lines.append,
    )
    return corpus, lines


def test_shards_hold_every_kept_pair_with_exact_counts(prepared, corpus_files):
    corpus, _ = prepared
    _, en, de = corpus_files
    processor = spm.SentencePieceProcessor(model_file=corpus.vocabulary_path)
    expected = collections.Counter()
    dropped = 0
    for a, b in zip(en, de):  # by hand: pieces + EOS, dropped when a side is longer than 24
        s, t = processor.encode(a) + [EOS], processor.encode(b) + [EOS]
        if len(s) > 24 or len(t) > 24:
            dropped += 1
        else:
            expected[(tuple(s), tuple(t))] += 1
    assert 0 < dropped < PAIRS
    assert collections.Counter(_records(corpus)) == expected
    report = corpus.length_report("train")
    assert (report.pairs, report.kept, report.dropped) == (PAIRS, PAIRS - dropped, dropped)
    # The same report as the in-memory prepare_pairs (the contract of exact counts).
    memory = prepare_pairs(en, de, SubwordTokenizer(corpus.vocabulary_path), max_length=24)
    assert memory.report.to_dict() == report.to_dict()
    manifest = json.loads(open(corpus.manifest_path).read())
    assert manifest["format"] == FORMAT and manifest["max_length"] == 24 and manifest["length_policy"] == "drop"
    shards = manifest["splits"]["train"]["shards"]
    assert [s["file"] for s in shards] == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert sum(s["pairs"] for s in shards) == PAIRS - dropped
    for shard, path in zip(shards, corpus.files()):
        records = [r for r in tf.data.TFRecordDataset(path)]
        assert len(records) == shard["pairs"] and os.path.getsize(path) == shard["bytes"]
        lengths = [max(len(decode_record(r)[0]), len(decode_record(r)[1])) for r in records]
        assert shard["longest_histogram"] == np.bincount(lengths, minlength=25).tolist()
    # Chunks of 16 pairs go round robin: shard 0 starts with the first kept pairs of the corpus.
    first = [(tuple(s), tuple(t)) for s, t in ((processor.encode(a) + [EOS], processor.encode(b) + [EOS])
                                               for a, b in zip(en[:16], de[:16])) if len(s) <= 24 and len(t) <= 24]
    assert _records(corpus)[: len(first)] == first
    with open(corpus.vocabulary_path, "rb") as f:
        assert manifest["vocabulary"]["sha256"] == __import__("hashlib").sha256(f.read()).hexdigest()
    source_info = manifest["splits"]["train"]["fingerprint"]["content"]
    assert source_info[1]["size"] == os.path.getsize(corpus_files[0] / "train.de.gz")
    # The validation split: one shard, read back in corpus order.
    valid = corpus.read_pairs("valid")
    assert len(valid) == corpus.num_pairs("valid") == corpus.length_report("valid").kept


def test_truncate_policy_and_parallel_processes_write_the_same_ids(corpus_files, tmp_path):
    folder, en, de = corpus_files
    vocab = train_sentencepiece(en + de, tmp_path / "v", vocab_size=300)
    one = prepare_corpus(tmp_path / "one", _source(folder), vocabulary=vocab, max_length=12,
                         length_policy="truncate", num_shards=2, processes=1, chunk_pairs=32, log=lambda _: None)
    two = prepare_corpus(tmp_path / "two", _source(folder), vocabulary=vocab, max_length=12,
                         length_policy="truncate", num_shards=2, processes=2, chunk_pairs=32, log=lambda _: None)
    for a, b in zip(one.files(), two.files()):
        assert open(a, "rb").read() == open(b, "rb").read()
    memory = prepare_pairs(en, de, SubwordTokenizer(vocab), max_length=12, length_policy="truncate")
    assert one.length_report().to_dict() == memory.report.to_dict()
    assert memory.report.truncated > 0 and one.num_pairs() == PAIRS
    expected = collections.Counter(zip(map(tuple, memory.source_ids.to_list()), map(tuple, memory.target_ids.to_list())))
    records = _records(one)
    assert collections.Counter(records) == expected
    assert all(s[-1] == EOS and t[-1] == EOS and len(s) <= 12 and len(t) <= 12 for s, t in records)


def test_reuse_and_invalidation(corpus_files, tmp_path):
    folder, en, de = corpus_files
    work = tmp_path / "corpus"
    shutil.copytree(folder, work)
    lines = []
    kwargs = dict(vocab_size=300, max_length=24, num_shards=2, processes=1, log=lines.append)
    first = prepare_corpus(tmp_path / "prep", _source(work), **kwargs)
    stamp = [os.stat(p).st_mtime_ns for p in first.files()]
    sha = first.vocab_sha256

    # Same sources and settings: reused as is (nothing rewritten), also without the vocabulary options.
    lines.clear()
    again = prepare_corpus(tmp_path / "prep", _source(work), max_length=24, processes=1, log=lines.append)
    assert any(line.startswith("reusing the prepared data") for line in lines)
    assert [os.stat(p).st_mtime_ns for p in again.files()] == stamp and again.vocab_sha256 == sha

    # Another max_length: tokenized again, with the same vocabulary.
    lines.clear()
    shorter = prepare_corpus(tmp_path / "prep", _source(work), **dict(kwargs, max_length=16))
    assert any("max_length changed (24 -> 16)" in line for line in lines)
    assert any("reusing the vocabulary" in line for line in lines)
    assert shorter.vocab_sha256 == sha and shorter.max_length == 16 and shorter.length_report().dropped > 0

    # A changed source file (one line edited): prepared again, vocabulary retrained on the new text.
    lines.clear()
    edited = en[:]
    short = min(range(PAIRS), key=lambda i: len(de[i]))
    edited[short] = "Zebras."
    (work / "train.en").write_text("\n".join(edited) + "\n", encoding="utf-8")
    changed = prepare_corpus(tmp_path / "prep", _source(work), **dict(kwargs, max_length=16))
    assert any("the train source changed (size" in line for line in lines)
    processor = spm.SentencePieceProcessor(model_file=changed.vocabulary_path)
    pair = (tuple(processor.encode("Zebras.") + [EOS]), tuple(processor.encode(de[short]) + [EOS]))
    assert max(map(len, pair)) <= 16 and pair in _records(changed)

    # The same size, one letter changed: the sha256 tells.
    lines.clear()
    edited[short] = "Zebrax."
    (work / "train.en").write_text("\n".join(edited) + "\n", encoding="utf-8")
    prepare_corpus(tmp_path / "prep", _source(work), **dict(kwargs, max_length=16))
    assert any("the train source changed (same size, sha256 differs)" in line for line in lines)

    # Another vocabulary given: tokenized again with it.
    lines.clear()
    other = train_sentencepiece(en + de, tmp_path / "other", vocab_size=200)
    given = prepare_corpus(tmp_path / "prep", _source(work), vocabulary=other, max_length=16, processes=1,
                           log=lines.append)
    assert any("another vocabulary is given" in line for line in lines)
    assert given.vocab_sha256 == SubwordTokenizer(other).vocab_sha256
    assert max(max(s + t) for s, t in _records(given)) < 200
    # ... and kept on the next call that gives no vocabulary options.
    lines.clear()
    kept = prepare_corpus(tmp_path / "prep", _source(work), max_length=16, processes=1, log=lines.append)
    assert kept.vocab_sha256 == given.vocab_sha256 and any(line.startswith("reusing") for line in lines)
    # Moving the corpus keeps the prepared data (identity is the content, not the path).
    moved = tmp_path / "moved"
    shutil.move(work, moved)
    lines.clear()
    prepare_corpus(tmp_path / "prep", _source(moved), max_length=16, processes=1, log=lines.append)
    assert any(line.startswith("reusing") for line in lines)
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p or ".old-" in p]  # no leftovers


def test_damaged_folders_are_named(prepared, tmp_path):
    corpus, _ = prepared
    folder = tmp_path / "copy"
    shutil.copytree(corpus.directory, folder)
    shard = folder / os.path.basename(corpus.files()[1])

    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 7])  # truncated
    with pytest.raises(PreparedDataError, match=rf"{shard}.*truncated"):
        open_prepared(folder)
    with pytest.raises(PreparedDataError, match=str(shard)):  # prepare_corpus refuses to reuse it too
        prepare_corpus(folder, corpus.source(), CorpusSource.from_dict(corpus.split("valid")["source"]),
                       max_length=24, processes=1, log=lambda _: None)

    corrupt = bytearray(data)
    corrupt[len(data) // 2] ^= 0xFF  # same size, one byte flipped
    shard.write_bytes(bytes(corrupt))
    opened = open_prepared(folder)  # sizes match: opening is a stat per shard
    with pytest.raises(PreparedDataError, match=rf"{shard}.*checksum"):
        opened.verify("records")
    with pytest.raises(PreparedDataError, match=rf"{shard}.*sha256"):
        opened.verify("sha256")
    shard.write_bytes(data)

    (folder / os.path.basename(corpus.files()[2])).unlink()
    with pytest.raises(PreparedDataError, match=r"shard missing: .*train-00002-of-00003"):
        open_prepared(folder)


def test_manifests_that_do_not_match_are_named(prepared, tmp_path):
    corpus, _ = prepared
    folder = tmp_path / "copy"
    shutil.copytree(corpus.directory, folder)
    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text())

    def write(changed):
        manifest_path.write_text(json.dumps(changed))

    write(dict(manifest, format="keras_transformer.prepared/0"))
    with pytest.raises(PreparedDataError, match=rf"{manifest_path} has format 'keras_transformer.prepared/0'"):
        open_prepared(folder)
    wrong = json.loads(json.dumps(manifest))
    wrong["splits"]["train"]["shards"][0]["pairs"] += 1
    write(wrong)
    with pytest.raises(PreparedDataError, match=r"train-00000-of-00003.tfrecord holds \d+ records, .* says \d+"):
        open_prepared(folder, verify="records")
    wrong = json.loads(json.dumps(manifest))
    wrong["splits"]["train"]["num_shards"] = 4
    write(wrong)
    with pytest.raises(PreparedDataError, match="lists 3 shards but num_shards is 4"):
        open_prepared(folder)
    manifest_path.write_text("{not json")
    with pytest.raises(PreparedDataError, match=rf"{manifest_path} is not valid JSON"):
        open_prepared(folder)
    write(manifest)
    (folder / "spm.model").write_bytes(b"another model")
    with pytest.raises(PreparedDataError, match=r"spm.model is not the vocabulary"):
        open_prepared(folder)

    other = tmp_path / "not-prepared"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(PreparedDataError, match=rf"{other} exists and is not a prepared folder"):
        prepare_corpus(other, corpus.source(), max_length=24, processes=1, log=lambda _: None)
    with pytest.raises(PreparedDataError, match="manifest.json is missing"):
        open_prepared(other)


def test_tsv_source_and_bad_settings(corpus_files, tmp_path):
    folder, en, de = corpus_files
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{a}\t{b}\tCC-BY\n" for a, b in zip(en[:50], de[:50])), encoding="utf-8")
    vocab = train_sentencepiece(en + de, tmp_path / "v", vocab_size=300)
    corpus = prepare_corpus(tmp_path / "tsv", CorpusSource.tsv(tsv), vocabulary=vocab, max_length=256, num_shards=1,
                            processes=1, log=lambda _: None)
    processor = spm.SentencePieceProcessor(model_file=vocab)
    assert _records(corpus) == [(tuple(processor.encode(a) + [EOS]), tuple(processor.encode(b) + [EOS]))
                                for a, b in zip(en[:50], de[:50])]
    with pytest.raises(ValueError, match="length_policy"):
        prepare_corpus(tmp_path / "x", CorpusSource.tsv(tsv), length_policy="cut", log=lambda _: None)
    with pytest.raises(ValueError, match="num_shards"):
        prepare_corpus(tmp_path / "x", CorpusSource.tsv(tsv), num_shards=0, log=lambda _: None)
    with pytest.raises(FileNotFoundError, match="missing.en"):
        prepare_corpus(tmp_path / "x", CorpusSource.files(tmp_path / "missing.en", tsv), log=lambda _: None)
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\nonly one field\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{bad}:2: expected at least 2"):
        prepare_corpus(tmp_path / "y", CorpusSource.tsv(bad), vocabulary=vocab, processes=1, log=lambda _: None)
    assert not (tmp_path / "y").exists()  # a failed preparation leaves nothing behind
