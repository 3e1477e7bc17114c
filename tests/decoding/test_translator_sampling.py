"""Translator.translate_sampled on the tiny fixed-seed Transformer.

Independent references: greedy translation (top-k 1), and the logits of
every sampled prefix recomputed with teacher-forced ``model.decode`` (no
cache, no search code) to check that each sampled token lies in its step's
top-k or nucleus.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import Translator

PAD, BOS, EOS = 0, 2, 3
MAX_LENGTH = 20
SENTENCES = [
    "A dog runs in the park.",
    "Two men are playing soccer near a tree.",
    "Ein Mann fährt Fahrrad.",
    "A little girl in a pink dress climbs the stairs.",
]


def make(model, tokenizer, **kwargs):
    return Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=6, **kwargs)


def sampled(translator, sentences, seed):
    return translator.translate_sampled(tf.constant(sentences), tf.constant(seed, tf.int64))


def test_top_k_one_equals_greedy(model, tokenizer):
    translator = make(model, tokenizer, sampling_topk=1)
    greedy = translator.translate_greedy(tf.constant(SENTENCES))["output_ids"].numpy()
    # Sampling never emits pad or BOS; greedy must not pick them here for the comparison to apply.
    for row in greedy:
        body = row[: row.tolist().index(EOS)]
        assert PAD not in body and BOS not in body
    for seed in (0, 9):
        out = sampled(translator, SENTENCES, seed)
        np.testing.assert_array_equal(out["output_ids"].numpy(), greedy)
    assert out["translations"].numpy().tolist() == translator.translate_greedy(
        tf.constant(SENTENCES))["translations"].numpy().tolist()


def test_fixed_seed_reproduces_in_graph_mode_and_xla(model, tokenizer):
    graph = make(model, tokenizer, sampling_topp=0.95)
    xla = make(model, tokenizer, sampling_topp=0.95, jit_compile=True, xla_max_rows=None)
    first = sampled(graph, SENTENCES, 5)["output_ids"].numpy()
    np.testing.assert_array_equal(sampled(graph, SENTENCES, 5)["output_ids"].numpy(), first)
    np.testing.assert_array_equal(sampled(xla, SENTENCES, 5)["output_ids"].numpy(), first)
    assert not np.array_equal(sampled(graph, SENTENCES, 6)["output_ids"].numpy(), first)
    greedy = graph.translate_greedy(tf.constant(SENTENCES))["output_ids"].numpy()
    assert not np.array_equal(first, greedy)  # it samples


def test_a_sentence_samples_the_same_whatever_the_rest_of_the_batch(model, tokenizer):
    translator = make(model, tokenizer, sampling_topk=20)
    batch = sampled(translator, SENTENCES, 3)["output_ids"].numpy()
    alone = sampled(translator, SENTENCES[:1], 3)["output_ids"].numpy()
    np.testing.assert_array_equal(alone[0], batch[0])
    others = sampled(translator, SENTENCES[:2] + ["Zwei Hunde spielen im Schnee.", ""], 3)["output_ids"].numpy()
    np.testing.assert_array_equal(others[:2], batch[:2])


def teacher_forced_logits(model, translator, sentence, ids):
    """Logits [n, V] of every position of the sampled ``ids`` (up to EOS), pad and BOS masked like sampling."""
    inputs = translator.source_ids(tf.constant([sentence]))
    source = inputs["source_ids"]
    n = ids.tolist().index(EOS) + 1
    target_in = tf.constant([[BOS] + ids[: n - 1].tolist()])
    logits = model.decode(target_in, model.encode(source, training=False), source).numpy()[0].astype(np.float64)
    logits[:, [PAD, BOS]] = -np.inf
    return logits, n, int(inputs["max_decode_lengths"].numpy()[0])


@pytest.mark.parametrize("top_k", [2, 5])
def test_every_sampled_token_is_in_the_top_k(model, tokenizer, top_k):
    translator = make(model, tokenizer, sampling_topk=top_k, sampling_temperature=2.0)
    checked = outside_top_1 = 0
    for seed in range(3):
        ids = sampled(translator, SENTENCES, seed)["output_ids"].numpy()
        for sentence, row in zip(SENTENCES, ids):
            logits, n, limit = teacher_forced_logits(model, translator, sentence, row)
            for t in range(n if n < limit else n - 1):  # not an EOS forced at the limit
                kth_best = np.sort(logits[t])[::-1][top_k - 1]
                assert logits[t, row[t]] >= kth_best - 1e-4
                outside_top_1 += logits[t, row[t]] < logits[t].max() - 1e-4
                checked += 1
    assert checked > 50 and outside_top_1 > checked // 5


def test_every_sampled_token_is_in_the_nucleus(model, tokenizer):
    top_p = 0.6
    translator = make(model, tokenizer, sampling_topp=top_p)
    checked, sizes = 0, []
    for seed in range(3):
        ids = sampled(translator, SENTENCES, seed)["output_ids"].numpy()
        for sentence, row in zip(SENTENCES, ids):
            logits, n, limit = teacher_forced_logits(model, translator, sentence, row)
            probs = np.exp(logits - logits.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            for t in range(n if n < limit else n - 1):
                order = np.argsort(-probs[t], kind="stable")
                mass_before = np.cumsum(probs[t][order]) - probs[t][order]
                # The nucleus, with a margin of float rounding at its boundary.
                allowed = set(order[mass_before < top_p + 1e-4].tolist())
                assert row[t] in allowed
                sizes.append(int(np.sum(mass_before < top_p)))
                checked += 1
    assert checked > 50 and max(sizes) > 3


def test_empty_input_and_python_call(model, tokenizer):
    translator = make(model, tokenizer, sampling_topk=10)
    out = sampled(translator, ["", "  ", SENTENCES[0]], 1)
    assert out["translations"].numpy()[:2].tolist() == [b"", b""]
    assert not out["output_ids"].numpy()[:2].any()
    assert out["output_ids"].shape == (3, MAX_LENGTH) and out["truncated"].numpy().tolist() == [False] * 3
    text = translator(SENTENCES[:2], seed=1)
    assert text == [t.decode("utf-8") for t in sampled(translator, SENTENCES[:2], 1)["translations"].numpy()]
    with pytest.raises(ValueError, match="seed"):
        translator(SENTENCES[:1], seed="1")


def test_settings_are_validated_and_recorded(model, tokenizer):
    for kwargs, name in (
        (dict(sampling_topk=-1), "sampling_topk"),
        (dict(sampling_topp=0.0), "sampling_topp"),
        (dict(sampling_topp=2.0), "sampling_topp"),
        (dict(sampling_temperature=0.0), "sampling_temperature"),
    ):
        with pytest.raises(ValueError, match=f"Translator {name}"):
            make(model, tokenizer, **kwargs)
    config = make(model, tokenizer, sampling_topk=8, sampling_topp=0.9, sampling_temperature=0.7).get_config()
    assert (config["sampling_topk"], config["sampling_topp"], config["sampling_temperature"]) == (8, 0.9, 0.7)
