"""Tests of keras_transformer.data.tokenizer (shared SentencePiece vocabulary, Section 3.4)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.data.tokenizer import SubwordTokenizer, read_tokenizer_options, train_sentencepiece


def _normal_form(line: str) -> str:
    """NFKC with Unicode whitespace folded to single spaces, computed without SentencePiece."""
    return " ".join(unicodedata.normalize("NFKC", line).split())


def test_round_trips_every_validation_line(tokenizer, multi30k_val):
    """Normal text comes back exactly; the one val line with a U+00A0 comes back with a space."""
    not_normal = []
    for lines in multi30k_val:
        ids = tokenizer.tokenize(tf.constant(lines))
        out = [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
        assert len(out) == len(lines)
        mismatches = [(a, b) for a, b in zip(lines, out) if b != _normal_form(a)]
        assert not mismatches, mismatches[:3]
        not_normal += [line for line in lines if _normal_form(line) != line]
    assert len(not_normal) == 1 and "\u00a0" in not_normal[0]  # val.de line 1


#: Ways of writing the spaces of a sentence that must not change its ids.
WHITESPACE_VARIANTS = {
    "tabs": lambda s: s.replace(" ", "\t"),
    "no-break spaces": lambda s: s.replace(" ", "\u00a0"),
    "ideographic spaces": lambda s: s.replace(" ", "\u3000"),
    "thin spaces": lambda s: s.replace(" ", "\u2009"),
    "narrow no-break spaces": lambda s: s.replace(" ", "\u202f"),
    "repeated spaces": lambda s: s.replace(" ", "  \t "),
    "surrounding whitespace": lambda s: " \t\u00a0" + s + " \u3000\n",
    "line separators": lambda s: s.replace(" ", "\u2028"),
}


def test_whitespace_variants_get_the_ids_of_the_plain_form(tokenizer, tokenizer_model, multi30k_val):
    lines = multi30k_val[0][:10] + multi30k_val[1][1:11]
    processor = spm.SentencePieceProcessor(model_file=tokenizer_model)
    plain = tokenizer.tokenize(tf.constant(lines)).to_list()
    for name, variant in WHITESPACE_VARIANTS.items():
        written = [variant(line) for line in lines]
        assert written != lines
        assert tokenizer.tokenize(tf.constant(written)).to_list() == plain, name  # in-graph (tensorflow-text)
        assert processor.encode(written) == plain, name  # the sentencepiece library, same model


def test_normalization_rule_lives_in_the_model(tokenizer, tokenizer_model):
    assert tokenizer.normalization == "nmt_nfkc"
    assert read_tokenizer_options(tokenizer_model)["trainer_options"]["normalization_rule_name"] == "nmt_nfkc"
    # NFKC: full-width letters and the ellipsis read as their ASCII forms.
    assert tokenizer.encode(["\uff21 dog\u2026"]) == tokenizer.encode(["A dog..."])


def test_vocabulary_training_folds_whitespace(multi30k_val, tmp_path):
    en, de = multi30k_val
    lines = en[:600] + de[:600]
    variants = [list(WHITESPACE_VARIANTS.values())[i % len(WHITESPACE_VARIANTS)](s) for i, s in enumerate(lines)]
    plain = train_sentencepiece(lines, tmp_path / "plain", vocab_size=300)
    written = train_sentencepiece(variants, tmp_path / "variants", vocab_size=300)
    with open(plain, "rb") as f1, open(written, "rb") as f2:
        assert f1.read() == f2.read()  # the trainer saw the same normalized text


def test_identity_vocabulary_keeps_its_old_behaviour(multi30k_val, tmp_path):
    """A vocabulary trained with the former default ("identity") tokenizes as it always did."""
    en, de = multi30k_val
    path = train_sentencepiece([en, de], tmp_path, vocab_size=1000, normalization_rule_name="identity")
    old = SubwordTokenizer(path)
    assert old.normalization == "identity"
    for lines in (en, de):  # every line round-trips, the U+00A0 of val.de line 1 included
        out = [s.decode("utf-8") for s in old.detokenize(old.tokenize(tf.constant(lines))).numpy()]
        assert out == lines
    processor = spm.SentencePieceProcessor(model_file=path)
    tabbed = "A dog\truns."
    assert old.tokenize([tabbed]).to_list() == [processor.encode(tabbed)]  # no rule in the model: the tab stays
    assert processor.encode(tabbed) != processor.encode("A dog runs.")


def test_unknown_and_word_piece_masks(tokenizer, tokenizer_model):
    processor = spm.SentencePieceProcessor(model_file=tokenizer_model)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    byte_pieces = {i for i, p in enumerate(pieces) if re.fullmatch(r"<0x[0-9A-F]{2}>", p)}
    assert len(byte_pieces) == 256  # byte_fallback=True in the fixture
    unknown = tokenizer.unknown_piece_mask
    assert unknown.shape == (1000,) and unknown.dtype == bool
    assert set(np.flatnonzero(unknown)) == byte_pieces | {1}
    word = tokenizer.word_piece_mask
    assert not word[[0, 1, 2, 3]].any() and not (word & unknown).any()
    assert word[processor.piece_to_id("\u2581dog")] and word[processor.piece_to_id("s")]
    assert not word[processor.piece_to_id("\u2581")] and not word[processor.piece_to_id(".")]
    # Chinese and emoji: byte pieces only (and the "▁" of the start), no known word.
    for text in ("\u4f60\u597d\u4e16\u754c", "\U0001F600\U0001F44D"):
        ids = processor.encode(text)
        assert all(unknown[i] or pieces[i] == "\u2581" for i in ids) and not word[ids].any()


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


def test_sampled_segmentations_are_seeded_and_detokenize_to_the_sentence(tokenizer, multi30k_val):
    en, de = multi30k_val
    lines = en[:200] + de[:200]
    best = tokenizer.encode(lines)
    draws = tokenizer.sample(lines, alpha=0.4, seed=7)
    assert draws == tokenizer.sample(lines, alpha=0.4, seed=7)  # a function of the seed
    assert draws != tokenizer.sample(lines, alpha=0.4, seed=8)
    changed = sum(d != b for d, b in zip(draws, best))
    assert 0 < changed < len(lines)
    assert tokenizer.decode(draws) == tokenizer.decode(best)  # other pieces, the same text
    # Smaller alpha spreads the draws: more sentences leave the best segmentation, in more pieces.
    spread = tokenizer.sample(lines, alpha=0.1, seed=7)
    assert sum(d != b for d, b in zip(spread, best)) > changed
    assert sum(map(len, spread)) > sum(map(len, draws)) > sum(map(len, best))
    # A large alpha concentrates them on the best segmentation.
    sharp = tokenizer.sample(lines, alpha=20.0, seed=7)
    assert sum(d == b for d, b in zip(sharp, best)) >= 0.95 * len(lines)
    with pytest.raises(ValueError, match="alpha must be > 0, got 0"):
        tokenizer.sample(lines, alpha=0, seed=1)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        tokenizer.sample(lines, alpha=0.4, seed=-1)
