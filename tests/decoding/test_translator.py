"""Translator tests on a tiny random-weight Transformer and a tiny SentencePiece model.

References are computed independently of the search code: the uncached greedy
decode recomputes ``model.decode`` on the whole prefix every step in a Python
loop, and beam scores are recomputed from teacher-forced ``model.decode``
log-probabilities and the length-penalty formula.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import Translator

EOS = 3
MAX_LENGTH = 20
SENTENCES = [
    "A dog runs in the park.",
    "Two men are playing soccer near a tree.",
    "Ein Mann fährt Fahrrad.",
]


@pytest.fixture(scope="module")
def translator(model, tokenizer):
    return Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=6, beam_size=3,
                      length_penalty=0.6)


def test_source_ids_are_pieces_plus_eos(translator, tokenizer):
    inputs = translator.source_ids(tf.constant(SENTENCES))
    pieces = tokenizer.encode(SENTENCES)
    width = max(len(p) for p in pieces) + 1
    expected = np.zeros((len(SENTENCES), width), np.int32)
    for i, p in enumerate(pieces):
        expected[i, : len(p) + 1] = p + [EOS]
    np.testing.assert_array_equal(inputs["source_ids"].numpy(), expected)
    np.testing.assert_array_equal(
        inputs["max_decode_lengths"].numpy(), [min(len(p) + 1 + 6, MAX_LENGTH) for p in pieces]
    )
    assert not inputs["truncated"].numpy().any()


def uncached_greedy(model, source_ids, limits):
    """Greedy decode recomputing model.decode over the whole prefix at each step."""
    encoder_outputs = model.encode(source_ids, training=False)
    results = []
    for b in range(source_ids.shape[0]):
        prefix = [2]
        out = []
        for t in range(int(limits[b])):
            logits = model.decode(tf.constant([prefix]), encoder_outputs[b : b + 1], source_ids[b : b + 1])
            token = EOS if t == limits[b] - 1 else int(np.argmax(logits.numpy()[0, -1]))
            out.append(token)
            prefix.append(token)
            if token == EOS:
                break
        results.append(out + [0] * (MAX_LENGTH - len(out)))
    return np.array(results)


def test_cached_greedy_equals_uncached_reference(translator, model):
    inputs = translator.source_ids(tf.constant(SENTENCES))
    expected = uncached_greedy(model, inputs["source_ids"], inputs["max_decode_lengths"].numpy())
    got = translator.translate_greedy(tf.constant(SENTENCES))["output_ids"].numpy()
    np.testing.assert_array_equal(got, expected)


def test_beam_scores_match_teacher_forced_log_probs(translator, model):
    out = translator.translate_ids(tf.constant(SENTENCES))
    ids, scores = out["output_ids"].numpy(), out["scores"].numpy()
    source_ids = out["source_ids"]
    assert ids.shape == (3, 3, MAX_LENGTH) and scores.shape == (3, 3)
    encoder_outputs = model.encode(source_ids, training=False)
    for b in range(3):
        assert np.all(np.diff(scores[b]) <= 1e-5)
        for k in range(3):
            seq = ids[b, k].tolist()
            n = seq.index(EOS) + 1
            target_in = tf.constant([[2] + seq[: n - 1]])
            logits = model.decode(target_in, encoder_outputs[b : b + 1], source_ids[b : b + 1]).numpy()[0]
            log_probs = logits - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
            log_p = sum(log_probs[t, seq[t]] for t in range(n))
            expected = log_p / ((5 + n) / 6) ** 0.6
            np.testing.assert_allclose(scores[b, k], expected, rtol=1e-4, atol=1e-4)


def test_translate_returns_best_beam(translator, tokenizer):
    out = translator.translate(tf.constant(SENTENCES))
    ids = translator.translate_ids(tf.constant(SENTENCES))
    assert out["translations"].dtype == tf.string and out["translations"].shape == (3,)
    assert out["scores"].dtype == tf.float32
    expected = tokenizer.decode(ids["output_ids"].numpy()[:, 0].tolist())
    assert [t.decode("utf-8") for t in out["translations"].numpy()] == expected
    np.testing.assert_allclose(out["scores"].numpy(), ids["scores"].numpy()[:, 0])


def test_output_length_is_source_plus_extra(model, tokenizer):
    translator = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=1, beam_size=2)
    pieces = tokenizer.encode(SENTENCES)
    greedy = translator.translate_greedy(tf.constant(SENTENCES))["output_ids"].numpy()
    beams = translator.translate_ids(tf.constant(SENTENCES))["output_ids"].numpy()
    for b, p in enumerate(pieces):
        limit = min(len(p) + 1 + 1, MAX_LENGTH)
        assert greedy[b].tolist().index(EOS) + 1 <= limit
        for row in beams[b]:
            assert row.tolist().index(EOS) + 1 <= limit


def test_long_source_is_truncated_and_flagged(translator, tokenizer):
    long_sentence = " ".join(["A dog runs in the park near a big tree."] * 6)
    pieces = tokenizer.encode([long_sentence])[0]
    assert len(pieces) > MAX_LENGTH - 1
    inputs = translator.source_ids(tf.constant([long_sentence, SENTENCES[0]]))
    assert inputs["truncated"].numpy().tolist() == [True, False]
    assert inputs["source_ids"].numpy()[0].tolist() == pieces[: MAX_LENGTH - 1] + [EOS]
    out = translator.translate(tf.constant([long_sentence, SENTENCES[0]]))
    assert out["truncated"].numpy().tolist() == [True, False]


def test_empty_and_whitespace_inputs(translator):
    out = translator.translate(tf.constant(["", "   ", SENTENCES[0]]))
    assert out["translations"].numpy()[:2].tolist() == [b"", b""]
    assert out["scores"].numpy()[:2].tolist() == [0.0, 0.0]
    greedy = translator.translate_greedy(tf.constant(["", " "]))
    assert greedy["translations"].numpy().tolist() == [b"", b""]
    assert not greedy["output_ids"].numpy().any()
    assert translator.translate(tf.constant([], tf.string))["translations"].shape == (0,)


def test_xla_translator_matches(model, tokenizer, translator):
    xla = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=6, beam_size=3,
                     length_penalty=0.6, jit_compile=True)
    a, b = translator.translate_ids(tf.constant(SENTENCES)), xla.translate_ids(tf.constant(SENTENCES))
    np.testing.assert_array_equal(a["output_ids"].numpy(), b["output_ids"].numpy())
    np.testing.assert_allclose(a["scores"].numpy(), b["scores"].numpy(), rtol=1e-4)
    assert np.count_nonzero(b["output_ids"].numpy()) > 0
    ga = translator.translate_greedy(tf.constant(SENTENCES))["output_ids"].numpy()
    gb = xla.translate_greedy(tf.constant(SENTENCES))["output_ids"].numpy()
    np.testing.assert_array_equal(ga, gb)


def test_python_call(translator):
    out = translator(SENTENCES[:2])
    assert isinstance(out, list) and len(out) == 2 and all(isinstance(s, str) for s in out)
    assert translator("") == ""
    with pytest.raises(ValueError, match="str"):
        translator([1, 2])


def test_invalid_arguments(model, tokenizer):
    with pytest.raises(ValueError, match="max_length"):
        Translator(model, tokenizer, max_length=1)
    with pytest.raises(ValueError, match="max_length"):
        Translator(model, tokenizer, max_length=model.max_length + 1)
    with pytest.raises(ValueError, match="beam_size"):
        Translator(model, tokenizer, max_length=8, beam_size=0)
    with pytest.raises(ValueError, match="length_penalty"):
        Translator(model, tokenizer, max_length=8, length_penalty=-0.1)
    with pytest.raises(ValueError, match="extra_decode_length"):
        Translator(model, tokenizer, max_length=8, extra_decode_length=-1)


def test_batching_does_not_change_translations(translator):
    # Padding of shorter sources in a batch must be masked everywhere (encoder,
    # cross-attention cache, beam bookkeeping).
    batched = translator.translate_ids(tf.constant(SENTENCES))
    for i, sentence in enumerate(SENTENCES):
        alone = translator.translate_ids(tf.constant([sentence]))
        np.testing.assert_array_equal(alone["output_ids"].numpy()[0], batched["output_ids"].numpy()[i])
        np.testing.assert_allclose(alone["scores"].numpy()[0], batched["scores"].numpy()[i], rtol=1e-4, atol=1e-4)


def test_mixed_precision_model_is_decoded_in_float32(translator, model, tokenizer):
    """A model trained under mixed_bfloat16 is decoded as a float32 copy: no weight casts per step, and the
    same translations as the float32 model with the same weights."""
    bf16 = model.with_dtype_policy("mixed_bfloat16")
    assert bf16.compute_dtype == "bfloat16"
    converted = Translator(bf16, tokenizer, max_length=translator.max_length,
                           extra_decode_length=translator.extra_decode_length, beam_size=translator.beam_size,
                           length_penalty=translator.length_penalty)
    assert converted.model.compute_dtype == "float32"
    sentences = tf.constant(["A dog runs.", "Two men play soccer in the park."])
    assert (converted.translate(sentences)["translations"].numpy().tolist()
            == translator.translate(sentences)["translations"].numpy().tolist())
    kept = Translator(bf16, tokenizer, max_length=translator.max_length, compute_dtype=None)
    assert kept.model is bf16
