"""Forced-decoding scores and n-best lists on the session's tiny fixed-seed Transformer.

References are independent of ``Translator.score``: token ids from the
``sentencepiece`` library, one ``model.decode`` per sentence, a float64 numpy
log-softmax gathered at the target ids, and the length-penalty formula
written out; beam search's own scores (``translate_ids``) for the hypotheses
it returns.
"""

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_transformer.decoding import Translator
from keras_transformer.decoding.corpus import format_n_best, n_best_lines, parse_n_best_line, translate_lines
from keras_transformer.decoding.scoring import (
    PairScore,
    format_scores,
    parse_score_line,
    read_aligned_lines,
    score_lines,
)

BOS, EOS = 2, 3
MAX_LENGTH = 20
ALPHA = 0.6
BEAM = 3
SOURCES = [
    "A dog runs in the park.",
    "Two men are playing soccer near a tree.",
    "Ein Mann fährt Fahrrad.",
    "",
    "A woman.",
]
TARGETS = [
    "Ein Hund rennt im Park.",
    "Zwei Männer spielen Fußball.",
    "",  # an empty target: EOS alone
    "Ein Hund.",  # an empty source: scored as the model sees it (EOS alone)
    "   ",  # whitespace only: no pieces
]


@pytest.fixture(scope="module")
def translator(model, tokenizer):
    return Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=6, beam_size=BEAM,
                      length_penalty=ALPHA)


@pytest.fixture(scope="module")
def processor(tokenizer):
    return sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_bytes)


def teacher_forced_by_hand(model, processor, source, target):
    """(token log-probs, pieces) of ``target`` given ``source``: numpy, float64, one sentence at a time."""
    source_ids = processor.encode(source)[: MAX_LENGTH - 1] + [EOS]
    target_pieces = processor.encode(target)[: MAX_LENGTH - 1]
    target_in = tf.constant([[BOS] + target_pieces])
    source_tensor = tf.constant([source_ids])
    logits = model.decode(target_in, model.encode(source_tensor, training=False), source_tensor).numpy()[0]
    logits = logits.astype(np.float64)
    log_softmax = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    target_out = target_pieces + [EOS]
    token_log_probs = np.array([log_softmax[t, token] for t, token in enumerate(target_out)])
    return token_log_probs, [processor.id_to_piece(i) for i in target_out], target_out


def test_score_is_the_teacher_forced_sum_by_hand(translator, model, processor):
    out = translator.score(tf.constant(SOURCES), tf.constant(TARGETS))
    assert out["log_prob"].dtype == tf.float32 and out["num_tokens"].dtype == tf.int32
    width = out["token_log_probs"].shape[1]
    for i, (source, target) in enumerate(zip(SOURCES, TARGETS)):
        expected, pieces, ids = teacher_forced_by_hand(model, processor, source, target)
        n = len(expected)
        assert out["num_tokens"].numpy()[i] == n
        np.testing.assert_allclose(out["token_log_probs"].numpy()[i, :n], expected, rtol=1e-5, atol=1e-5)
        assert not out["token_log_probs"].numpy()[i, n:].any()  # 0-padded after EOS
        np.testing.assert_array_equal(out["target_ids"].numpy()[i], ids + [0] * (width - n))
        assert [p.decode() for p in out["target_pieces"].numpy()[i]] == pieces + [""] * (width - n)
        log_p = expected.sum()
        np.testing.assert_allclose(out["log_prob"].numpy()[i], log_p, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["score"].numpy()[i], log_p / ((5 + n) / 6) ** ALPHA, rtol=1e-5, atol=1e-5)
    assert out["num_tokens"].numpy()[2] == 1 and out["num_tokens"].numpy()[4] == 1  # empty / blank target
    assert np.isfinite(out["log_prob"].numpy()[3]) and out["log_prob"].numpy()[3] < 0  # empty source: the model's
    assert not out["truncated"].numpy().any()


def test_score_of_beam_hypotheses_equals_beam_scores(translator, tokenizer):
    """Each hypothesis beam search returns, scored as a string, gets the score beam search reported."""
    sources = SOURCES[:3] + SOURCES[4:]
    ids = translator.translate_ids(tf.constant(sources))
    n_best = translator.translate_n_best(tf.constant(sources))
    best = translator.translate(tf.constant(sources))["translations"]
    np.testing.assert_array_equal(n_best["translations"].numpy()[:, 0], best.numpy())
    compared = 0
    for b, source in enumerate(sources):
        for k in range(BEAM):
            row = ids["output_ids"].numpy()[b, k].tolist()
            hypothesis_ids = row[: row.index(EOS)]
            text = n_best["translations"].numpy()[b, k].decode("utf-8")
            assert text == tokenizer.decode([hypothesis_ids])[0]
            if tokenizer.encode([text])[0] != hypothesis_ids:
                # Not SentencePiece's segmentation of its own text (the string scores another sequence):
                # score the ids themselves, teacher-forced, as score() does for a string's pieces.
                from keras_transformer.decoding import model_calls
                from keras_transformer.decoding.search import length_penalty_factor

                source_ids = translator.source_ids(tf.constant([source]))["source_ids"]
                log_probs = model_calls.teacher_forced_log_probs(
                    translator.model, source_ids, tf.constant([[BOS] + hypothesis_ids]),
                    tf.constant([hypothesis_ids + [EOS]]))
                by_ids = tf.reduce_sum(log_probs) / length_penalty_factor(len(hypothesis_ids) + 1, ALPHA)
                np.testing.assert_allclose(by_ids.numpy(), ids["scores"].numpy()[b, k], rtol=1e-4, atol=1e-4)
                continue
            got = translator.score(tf.constant([source]), tf.constant([text]))
            np.testing.assert_allclose(got["score"].numpy()[0], ids["scores"].numpy()[b, k], rtol=1e-4, atol=1e-4)
            assert got["num_tokens"].numpy()[0] == len(hypothesis_ids) + 1
            compared += 1
    assert compared >= 1  # at least one hypothesis scored through its text


def test_long_source_and_target_are_truncated_and_flagged(translator, model, processor):
    long_text = " ".join(["Ein Hund rennt im Park neben einem großen Baum."] * 6)
    assert len(processor.encode(long_text)) > MAX_LENGTH - 1
    out = translator.score(tf.constant([SOURCES[0], long_text, SOURCES[0]]),
                           tf.constant([long_text, TARGETS[0], TARGETS[0]]))
    assert out["truncated"].numpy().tolist() == [True, True, False]
    assert out["num_tokens"].numpy()[0] == MAX_LENGTH  # the first max_length - 1 pieces, then EOS
    assert out["target_ids"].numpy()[0].tolist() == processor.encode(long_text)[: MAX_LENGTH - 1] + [EOS]
    for i, (source, target) in enumerate([(SOURCES[0], long_text), (long_text, TARGETS[0])]):
        expected, _, _ = teacher_forced_by_hand(model, processor, source, target)
        np.testing.assert_allclose(out["log_prob"].numpy()[i], expected.sum(), rtol=1e-5, atol=1e-5)


def test_score_batches_and_bad_shapes(translator):
    alone = [translator.score(tf.constant([s]), tf.constant([t]))["score"].numpy()[0] for s, t in zip(SOURCES, TARGETS)]
    together = translator.score(tf.constant(SOURCES), tf.constant(TARGETS))["score"].numpy()
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-5)  # padding changes nothing
    empty = translator.score(tf.constant([], tf.string), tf.constant([], tf.string))
    assert empty["score"].shape == (0,) and empty["token_log_probs"].shape[0] == 0
    with pytest.raises(tf.errors.InvalidArgumentError, match="same number of entries"):
        translator.score(tf.constant(["a"]), tf.constant(["a", "b"]))


def test_n_best_texts_scores_and_empty_input(translator, tokenizer):
    out = translator.translate_n_best(tf.constant(SOURCES))
    ids = translator.translate_ids(tf.constant(SOURCES))
    assert out["translations"].shape == (len(SOURCES), BEAM) and out["scores"].shape == (len(SOURCES), BEAM)
    for b in range(len(SOURCES)):
        if SOURCES[b]:
            assert [t.decode() for t in out["translations"].numpy()[b]] == tokenizer.decode(
                ids["output_ids"].numpy()[b].tolist())
            np.testing.assert_array_equal(out["scores"].numpy()[b], ids["scores"].numpy()[b])
    # An empty input has one hypothesis, "" with score 0; the other slots have none.
    assert out["translations"].numpy()[3].tolist() == [b""] * BEAM
    assert out["scores"].numpy()[3].tolist() == [0.0] + [-np.inf] * (BEAM - 1)


def test_n_best_lines_format_and_parse(translator):
    lines = SOURCES + ["Zwei Hunde spielen im Schnee."]
    n = 2
    entries = n_best_lines(translator.translate_n_best, lines, n, batch_size=2)
    best = translate_lines(translator.translate, lines, batch_size=2)
    ids = translator.translate_ids(tf.constant(lines))["output_ids"].numpy()
    assert [len(e) for e in entries] == [1 if not line else n for line in lines]
    for b, sentence in enumerate(entries):
        assert sentence[0][0] == best[b]  # the first is translate's output
        scores = [score for _, score in sentence]
        assert scores == sorted(scores, reverse=True)
        if lines[b]:  # distinct hypotheses (as token sequences)
            assert len({tuple(row) for row in ids[b, :n].tolist()}) == n
    text = format_n_best(entries)
    parsed = [parse_n_best_line(line) for line in text.splitlines()]
    assert len(parsed) == sum(len(e) for e in entries)
    expected = [(b, hypothesis, round(score, 6)) for b, sentence in enumerate(entries) for hypothesis, score in sentence]
    assert [(i, h, round(s, 6)) for i, h, s in parsed] == expected
    assert text.splitlines()[len(entries[0]) + len(entries[1]) + len(entries[2])] == "3 |||  ||| 0.000000"
    assert parse_n_best_line("7 ||| a ||| b ||| -1.25") == (7, "a ||| b", -1.25)
    with pytest.raises(ValueError, match="not an n-best line"):
        parse_n_best_line("7 ||| no score")
    with pytest.raises(ValueError, match="exceeds the beam size 3"):
        n_best_lines(translator.translate_n_best, lines, BEAM + 1)
    with pytest.raises(ValueError, match=">= 1"):
        n_best_lines(translator.translate_n_best, lines, 0)


def test_score_lines_format_and_parse(translator):
    long_text = " ".join(["Ein Hund rennt im Park neben einem großen Baum."] * 6)
    sources, targets = SOURCES + [SOURCES[0]], TARGETS + [long_text]
    direct = translator.score(tf.constant(sources), tf.constant(targets))
    scores = score_lines(translator.score, sources, targets, batch_size=2, per_token=True)
    for i, pair in enumerate(scores):
        assert pair.num_tokens == direct["num_tokens"].numpy()[i]
        np.testing.assert_allclose(pair.score, direct["score"].numpy()[i], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(sum(pair.token_log_probs), pair.log_prob, rtol=1e-5, atol=1e-4)
        assert len(pair.pieces) == pair.num_tokens and pair.pieces[-1] == "</s>"
    assert [p.truncated for p in scores] == [False] * 5 + [True]
    text = format_scores(scores, per_token=True)
    parsed = [parse_score_line(line) for line in text.splitlines()]
    for got, pair in zip(parsed, scores):
        assert got.num_tokens == pair.num_tokens and got.pieces == pair.pieces
        assert abs(got.score - pair.score) <= 5e-7 and abs(got.log_prob - pair.log_prob) <= 5e-7
    plain = format_scores(scores).splitlines()
    assert all(len(line.split("\t")) == 3 for line in plain)
    assert parse_score_line(plain[0]) == PairScore(float(plain[0].split("\t")[0]), float(plain[0].split("\t")[1]),
                                                   scores[0].num_tokens)
    with pytest.raises(ValueError, match="not a score line"):
        parse_score_line("1.0\t2.0")
    with pytest.raises(ValueError, match="aligned pairs"):
        score_lines(translator.score, ["a"], [])


def test_score_lines_warns_about_truncated_pairs(translator, capsys):
    long_text = " ".join(["Ein Hund rennt im Park neben einem großen Baum."] * 6)
    score_lines(translator.score, ["A dog.", long_text, "A cat."], ["Ein Hund.", "Ein Hund.", "Eine Katze."])
    err = capsys.readouterr().err
    assert "warning: 1 of 3 sentences are longer than the model's max_length" in err and "(lines 2)" in err


def test_read_aligned_lines_names_files_and_lines(tmp_path):
    source, target = tmp_path / "a.en", tmp_path / "a.de"
    source.write_text("one\n\nthree\r\n", encoding="utf-8")
    target.write_text("eins\nzwei\n\n", encoding="utf-8")
    assert read_aligned_lines(source, target) == (["one", "", "three"], ["eins", "zwei", ""])
    target.write_text("eins\nzwei\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"{source} has 3 lines but {target} has 2 lines"):
        read_aligned_lines(source, target)
    target.write_bytes(b"eins\nzw\xffei\ndrei\n")
    with pytest.raises(ValueError, match=f"{target}, line 2: not UTF-8 \\(invalid byte at column 3\\)"):
        read_aligned_lines(source, target)
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "missing.de")):
        read_aligned_lines(source, tmp_path / "missing.de")
