"""Tests of the readers (keras_transformer.data.parallel_text, .multi30k, .tfds) and the bad-input policy."""

from __future__ import annotations

import gzip
import io
import urllib.error

import pytest

from keras_transformer.data import multi30k
from keras_transformer.data import tfds as data_tfds
from keras_transformer.data.multi30k import load_multi30k
from keras_transformer.data.parallel_text import read_parallel_files, read_tsv_pairs
from keras_transformer.data.tfds import load_tfds_translation


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_reads_real_multi30k_val(multi30k_dir, multi30k_val):
    pairs = read_parallel_files(multi30k_dir / "val.en", multi30k_dir / "val.de")
    assert pairs.sources == multi30k_val[0] and pairs.targets == multi30k_val[1]
    assert len(pairs) == 1014
    assert pairs.report.pairs_read == pairs.report.pairs_kept == 1014 and pairs.report.skipped == 0


def test_load_multi30k_from_data_dir(data_root, multi30k_dir, multi30k_val):
    for data_dir in (data_root, multi30k_dir):  # parent of multi30k/ or the folder itself
        pairs = load_multi30k("validation", data_dir=data_dir, download=False)
        assert pairs.sources == multi30k_val[0] and pairs.targets == multi30k_val[1]
    reverse = load_multi30k("test", data_dir=data_root, source_lang="de", target_lang="en", download=False)
    assert len(reverse) == 1000 and reverse.sources[0] == (multi30k_dir / "test2016.de").read_text("utf-8").split("\n")[0]
    with pytest.raises(ValueError, match="unknown Multi30k split"):
        load_multi30k("test2017", data_dir=data_root)
    with pytest.raises(ValueError, match="languages"):
        load_multi30k("val", data_dir=data_root, source_lang="fr")


def test_mismatched_line_counts_name_both_files_and_counts(tmp_path):
    src = _write(tmp_path / "a.en", b"one\ntwo\nthree\n")
    tgt = _write(tmp_path / "b.de", b"eins\nzwei\n")
    for on_error in ("raise", "skip"):
        with pytest.raises(ValueError) as info:
            read_parallel_files(src, tgt, on_error=on_error)
        message = str(info.value)
        assert str(src) in message and str(tgt) in message
        assert "3 lines" in message and "2 lines" in message
    with pytest.raises(ValueError, match=r"has 1 lines .* has 3 lines"):
        read_parallel_files(_write(tmp_path / "c.en", b"x\n"), src)


def test_empty_line_raises_or_is_counted(tmp_path):
    src = _write(tmp_path / "a.en", b"one\n\nthree\nfour\n")
    tgt = _write(tmp_path / "b.de", b"eins\nzwei\ndrei\n  \n")
    with pytest.raises(ValueError) as info:
        read_parallel_files(src, tgt)
    assert f"{src}:2" in str(info.value) and "empty" in str(info.value)
    pairs = read_parallel_files(src, tgt, on_error="skip")
    assert pairs.sources == ["one", "three"] and pairs.targets == ["eins", "drei"]
    assert pairs.report.skipped_empty == 2 and pairs.report.pairs_read == 4 and pairs.report.pairs_kept == 2
    assert f"{src}:2" in pairs.report.examples[0] and f"{tgt}:4" in pairs.report.examples[1]
    assert "2 skipped" in pairs.report.summary()


def test_invalid_utf8_raises_or_is_counted(tmp_path):
    src = _write(tmp_path / "a.en", b"one\ntwo\n")
    tgt = _write(tmp_path / "b.de", b"eins\nzw\xffei\n")
    with pytest.raises(ValueError) as info:
        read_parallel_files(src, tgt)
    assert f"{tgt}:2" in str(info.value) and "invalid UTF-8" in str(info.value)
    pairs = read_parallel_files(src, tgt, on_error="skip")
    assert pairs.sources == ["one"] and pairs.report.skipped_invalid_utf8 == 1


def test_missing_file_is_named(tmp_path):
    src = _write(tmp_path / "a.en", b"one\n")
    with pytest.raises(FileNotFoundError, match="nothere.de"):
        read_parallel_files(src, tmp_path / "nothere.de", on_error="skip")
    with pytest.raises(FileNotFoundError, match="nothere.tsv"):
        read_tsv_pairs(tmp_path / "nothere.tsv")
    with pytest.raises(ValueError, match="on_error"):
        read_parallel_files(src, src, on_error="ignore")


def test_gzip_and_crlf(tmp_path):
    src = _write(tmp_path / "a.en.gz", gzip.compress("Grüße\r\nb\r\n".encode()))
    tgt = _write(tmp_path / "b.de", "x\r\ny\r\n".encode())
    pairs = read_parallel_files(src, tgt)
    assert pairs.sources == ["Grüße", "b"] and pairs.targets == ["x", "y"]


def test_tsv_pairs(tmp_path):
    path = _write(tmp_path / "p.tsv", "Go.\tVe.\tCC-BY\nHi.\n\tHola.\nRun!\t¡Corre!\n".encode())
    with pytest.raises(ValueError, match=r"p.tsv:2: expected at least 2"):
        read_tsv_pairs(path)
    pairs = read_tsv_pairs(path, on_error="skip")
    assert pairs.sources == ["Go.", "Run!"] and pairs.targets == ["Ve.", "¡Corre!"]
    assert (pairs.report.skipped_bad_fields, pairs.report.skipped_empty) == (1, 1)
    swapped = read_tsv_pairs(path, source_column=1, target_column=0, on_error="skip")
    assert swapped.sources == ["Ve.", "¡Corre!"]


def test_tatoeba_file(data_root):
    path = data_root / "tatoeba_spa_eng" / "spa.txt"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    pairs = read_tsv_pairs(path)
    assert len(pairs) == 118_121
    assert (pairs.sources[:3], pairs.targets[:3]) == (["Go.", "Go.", "Go."], ["Ve.", "Vete.", "Vaya."])


def test_multi30k_offline_error_says_which_files_go_where(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise urllib.error.URLError("network unreachable")

    monkeypatch.setattr(multi30k.urllib.request, "urlopen", no_network)
    cache = tmp_path / "cache"
    with pytest.raises(FileNotFoundError) as info:
        load_multi30k("train", data_dir=tmp_path / "data", cache_dir=cache)
    message = str(info.value)
    for expected in ("train.en", "train.de", str(cache), str(tmp_path / "data" / "multi30k"), "network unreachable",
                     "KERAS_TRANSFORMER_DATA", "train.en.gz"):
        assert expected in message, expected


def test_multi30k_download_to_cache(tmp_path, monkeypatch):
    texts = {"val.en": "A dog.\nA cat.\n", "val.de": "Ein Hund.\nEine Katze.\n"}
    requested = []

    def fake_urlopen(url, timeout):
        requested.append(url)
        name = url.rsplit("/", 1)[1][: -len(".gz")]
        return io.BytesIO(gzip.compress(texts[name].encode()))

    monkeypatch.setattr(multi30k.urllib.request, "urlopen", fake_urlopen)
    monkeypatch.setattr(multi30k, "_MULTI30K_GZ_SHA256", {})
    pairs = load_multi30k("val", data_dir=tmp_path / "none", cache_dir=tmp_path / "cache")
    assert pairs.sources == ["A dog.", "A cat."] and pairs.targets == ["Ein Hund.", "Eine Katze."]
    assert requested == [
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/val.en.gz",
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/val.de.gz",
    ]
    assert (tmp_path / "cache" / "val.de").read_text("utf-8") == texts["val.de"]


def test_multi30k_download_rejects_wrong_checksum(tmp_path, monkeypatch):
    monkeypatch.setattr(multi30k.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(gzip.compress(b"x\n")))
    with pytest.raises(FileNotFoundError, match="sha256"):
        load_multi30k("val", data_dir=tmp_path, cache_dir=tmp_path / "cache")


def test_tfds_offline_error_points_to_local_files(tmp_path, monkeypatch):
    monkeypatch.setattr(data_tfds, "_network_available", lambda *a, **k: False)
    with pytest.raises(RuntimeError) as info:
        load_tfds_translation("wmt14_translate/de-en", data_dir=tmp_path)
    message = str(info.value)
    assert "network is unreachable" in message and "read_parallel_files" in message and str(tmp_path) in message
    with pytest.raises(RuntimeError, match="download=False"):
        load_tfds_translation("ted_hrlr_translate/pt_to_en", data_dir=tmp_path, download=False)


def test_tfds_reader_with_mock_data(tmp_path, monkeypatch):
    import tensorflow as tf
    import tensorflow_datasets as tfds

    examples = {"de": ["Ein Hund.", "Hallo", ""], "en": ["A dog.", "Hello", "x"]}

    def as_dataset_fn(builder, split, **kwargs):
        return tf.data.Dataset.from_tensor_slices(examples)

    monkeypatch.setattr(data_tfds, "_network_available", lambda *a, **k: True)
    with tfds.testing.mock_data(as_dataset_fn=as_dataset_fn):
        pairs = load_tfds_translation("wmt14_translate/de-en", data_dir=tmp_path, on_error="skip")
        with pytest.raises(ValueError, match="example 3: empty"):
            load_tfds_translation("wmt14_translate/de-en", data_dir=tmp_path)
        reverse = load_tfds_translation(
            "wmt14_translate/de-en", data_dir=tmp_path, source_lang="en", target_lang="de", max_pairs=1
        )
    assert pairs.sources == ["Ein Hund.", "Hallo"] and pairs.targets == ["A dog.", "Hello"]
    assert pairs.report.skipped_empty == 1 and pairs.report.pairs_read == 3
    assert reverse.sources == ["A dog."] and reverse.targets == ["Ein Hund."]
