"""The repetition guard: no repeated n-gram and a penalty on written tokens, in greedy, beam and sampling search."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import Translator
from keras_transformer.decoding.search import beam_search, greedy_search, sample_search
from keras_transformer.decoding.search.logits import guard_repetition, init_repetition_history

VOCAB, EOS = 8, 1


def _looping_logits(step_ids, step, cache):
    """A model that always prefers token 4, then 5, never EOS: without a guard it writes 4 4 4 4 ..."""
    rows = tf.shape(step_ids)[0]
    logits = tf.tile(tf.constant([[-9.0, -5.0, -9.0, -9.0, 3.0, 2.0, 1.0, 0.5]]), [rows, 1])  # pad and BOS never
    return logits, cache


def _ngrams(ids, n):
    ids = [int(i) for i in ids if i not in (0, EOS)]
    return [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]


@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_no_ngram_is_written_twice_in_any_search(search):
    initial = tf.constant([2, 2], tf.int32)
    cache = init_repetition_history({}, tf.constant(2), 12)
    fn = guard_repetition(_looping_logits, no_repeat_ngram_size=2)
    kwargs = dict(max_length=12, eos_id=EOS)
    if search == "greedy":
        ids = greedy_search(fn, initial, cache, **kwargs).numpy()
        unguarded = greedy_search(_looping_logits, initial, {}, **kwargs).numpy()
        assert _ngrams(unguarded[0], 2).count((4, 4)) > 3  # the loop the guard prevents
    elif search == "beam":
        ids = beam_search(fn, initial, cache, beam_size=2, length_penalty=0.6, **kwargs)[0].numpy()[:, 0]
    else:
        ids = sample_search(fn, initial, cache, seed=tf.constant(3, tf.int64), top_k=3, **kwargs).numpy()
    for row in ids:
        grams = _ngrams(row, 2)
        assert len(grams) == len(set(grams)) > 2, row


def test_the_penalty_lowers_written_tokens_and_keeps_the_others():
    cache = init_repetition_history({}, tf.constant(1), 6)
    fn = guard_repetition(_looping_logits, repetition_penalty=2.0)
    _, cache = fn(tf.constant([2]), 0, cache)  # BOS: nothing written yet
    logits, cache = fn(tf.constant([4]), 1, cache)  # token 4 written
    expected = np.array([[-9.0, -5.0, -9.0, -9.0, 1.5, 2.0, 1.0, 0.5]], "float32")
    np.testing.assert_allclose(logits.numpy(), expected)
    logits, _ = fn(tf.constant([1]), 2, cache)  # a negative logit is multiplied: -5 -> -10
    assert logits.numpy()[0, 1] == -10.0 and logits.numpy()[0, 4] == 1.5
    assert guard_repetition(_looping_logits) is _looping_logits  # off: the function itself


def test_the_translator_guards_every_search_and_records_it(model, tokenizer, tmp_path):
    sentences = tf.constant(["A dog runs in the park.", "Two men are playing soccer near a tree."])
    plain = Translator(model, tokenizer, max_length=24, extra_decode_length=10, beam_size=2)
    guarded = Translator(model, tokenizer, max_length=24, extra_decode_length=10, beam_size=2,
                         no_repeat_ngram_size=2, sampling_topk=5)
    for method in ("translate_ids", "translate_greedy"):
        out = getattr(guarded, method)(sentences)["output_ids"].numpy()
        rows = out[:, 0, :] if out.ndim == 3 else out
        for row in rows:
            assert len(_ngrams(row, 2)) == len(set(_ngrams(row, 2)))
    repeated = [len(g) - len(set(g)) for g in (_ngrams(r, 2) for r in plain.translate_greedy(sentences)["output_ids"].numpy())]
    assert max(repeated) > 0  # the fixed-seed random model does repeat itself without the guard
    sampled = guarded.translate_sampled(sentences, tf.constant(1, tf.int64))["output_ids"].numpy()
    assert all(len(_ngrams(r, 2)) == len(set(_ngrams(r, 2))) for r in sampled)
    assert guarded.get_config()["no_repeat_ngram_size"] == 2 and plain.get_config()["repetition_penalty"] == 1.0
    with pytest.raises(ValueError, match="no_repeat_ngram_size must be 0"):
        Translator(model, tokenizer, max_length=24, no_repeat_ngram_size=1)
    with pytest.raises(ValueError, match="repetition_penalty must be"):
        Translator(model, tokenizer, max_length=24, repetition_penalty=0.5)
