"""Tests of keras_transformer.data.tokenizer (shared SentencePiece vocabulary, Section 3.4)."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.data.tokenizer import SubwordTokenizer, read_tokenizer_options, train_sentencepiece


def test_round_trips_every_validation_line(tokenizer, multi30k_val):
    for lines in multi30k_val:
        ids = tokenizer.tokenize(tf.constant(lines))
        out = [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
        mismatches = [(a, b) for a, b in zip(lines, out) if a != b]
        assert not mismatches, mismatches[:3]
        assert len(out) == len(lines)


def test_ids_contract(tokenizer, tokenizer_model, multi30k_val):
    processor = spm.SentencePieceProcessor(model_file=tokenizer_model)
    assert (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id()) == (0, 1, 2, 3)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    assert tokenizer.vocab_size == processor.get_piece_size() == 1000
    lines = multi30k_val[0][:50]
    ids = tokenizer.tokenize(lines)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32 and ids.shape[0] == 50
    assert ids.to_list() == processor.encode(lines)  # in-graph == reference library
    flat = ids.flat_values.numpy()
    assert not np.isin(flat, [0, 2, 3]).any()  # no pad/BOS/EOS added
    assert flat.min() >= 1 and flat.max() < 1000


def test_detokenize_drops_specials_and_everything_after_eos(tokenizer):
    processor = spm.SentencePieceProcessor(model_proto=tokenizer.model_bytes)
    a = processor.encode("A dog runs.")
    b = processor.encode("Two men.")
    dense = [[2] + a + [3] + b + [0, 0], b + [0] * (len(a) + 4)]
    width = max(len(r) for r in dense)
    dense = [r + [0] * (width - len(r)) for r in dense]
    out = tokenizer.detokenize(tf.constant(dense, tf.int32)).numpy().tolist()
    assert out == [b"A dog runs.", b"Two men."]
    ragged = tf.ragged.constant([[2] + a + [3, 3] + b, b + [3]], dtype=tf.int32)
    assert tokenizer.detokenize(ragged).numpy().tolist() == [b"A dog runs.", b"Two men."]
    assert tokenizer.decode([[2] + a + [3] + b]) == ["A dog runs."]


def test_works_inside_tf_function(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        return tokenizer.detokenize(tokenizer.tokenize(strings).to_tensor())

    assert round_trip(tf.constant(["Ein Hund rennt.", "A cat"])).numpy().tolist() == [b"Ein Hund rennt.", b"A cat"]


def test_model_bytes_hash_and_options_record(tokenizer, tokenizer_model):
    with open(tokenizer_model, "rb") as f:
        raw = f.read()
    assert tokenizer.model_bytes == raw
    assert tokenizer.vocab_sha256 == hashlib.sha256(raw).hexdigest()
    record = read_tokenizer_options(tokenizer_model)
    assert record["sha256"] == hashlib.sha256(raw).hexdigest()
    assert record["vocab_size"] == 1000 and record["training_sentences"] == 5000
    assert record["trainer_options"]["model_type"] == "unigram"
    assert record["trainer_options"]["character_coverage"] == 1.0
    tokenizer.check_vocabulary(hashlib.sha256(raw).hexdigest())
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        tokenizer.check_vocabulary("0" * 64)
    assert SubwordTokenizer(raw).vocab_sha256 == tokenizer.vocab_sha256


def test_training_is_deterministic_and_samples(multi30k_val, tmp_path):
    en, de = multi30k_val
    first = train_sentencepiece([en, de], tmp_path / "a", vocab_size=300, input_sentence_size=1500, seed=3)
    second = train_sentencepiece([en, de], tmp_path / "b", vocab_size=300, input_sentence_size=1500, seed=3)
    assert first.endswith("a.model") and os.path.isfile(first)
    with open(first, "rb") as f1, open(second, "rb") as f2:
        assert f1.read() == f2.read()
    assert read_tokenizer_options(first)["training_sentences"] == 1500  # 2028 lines sampled down


def test_bpe_and_file_inputs(multi30k_dir, tmp_path):
    path = train_sentencepiece(
        [str(multi30k_dir / "val.en"), str(multi30k_dir / "val.de")], tmp_path, vocab_size=400, model_type="bpe"
    )
    assert path == str(tmp_path / "spm.model")
    tok = SubwordTokenizer(path)
    assert tok.vocab_size == 400
    assert json.loads((tmp_path / "spm.json").read_text())["trainer_options"]["model_type"] == "bpe"


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="model_type"):
        train_sentencepiece(["a b"], tmp_path, vocab_size=100, model_type="word")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        train_sentencepiece(tmp_path / "missing.txt", tmp_path, vocab_size=100)
    with pytest.raises(ValueError, match="no .*training sentences"):
        train_sentencepiece([["", "  "]], tmp_path, vocab_size=100)
    with pytest.raises(FileNotFoundError, match="nope.model"):
        SubwordTokenizer(tmp_path / "nope.model")


def test_rejects_model_with_other_ids(multi30k_val, tmp_path):
    import io

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(multi30k_val[0]), model_writer=buffer, vocab_size=200, minloglevel=2
    )  # sentencepiece defaults: unk=0, bos=1, eos=2, no pad
    with pytest.raises(ValueError, match="pad/unk/bos/eos"):
        SubwordTokenizer(buffer.getvalue())


def test_survives_seeding_after_construction(tokenizer_model):
    # tf.random.set_seed clears the eager kernel cache that owns tensorflow_text's resource.
    tokenizer = SubwordTokenizer(tokenizer_model)
    before = tokenizer.tokenize(["A dog runs on the beach."]).to_list()
    tf.random.set_seed(1)
    after = tokenizer.tokenize(["A dog runs on the beach."])
    assert after.to_list() == before
    assert tokenizer.detokenize(after).numpy()[0].decode() == "A dog runs on the beach."


def test_mistyped_paths_are_an_error_not_training_text(tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus.en.gz"):
        train_sentencepiece(["corpus.en.gz", "corpus.de.gz"], str(tmp_path / "spm"), vocab_size=100)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        train_sentencepiece(str(tmp_path / "missing.txt"), str(tmp_path / "spm"), vocab_size=100)
