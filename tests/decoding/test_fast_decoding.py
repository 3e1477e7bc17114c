"""Fast (cached) decoding on the real tiny Transformer (issue 6).

References are independent of the key/value cache: the uncached search runs
the same ``beam_search`` with a ``symbols_to_logits_fn`` that recomputes
``model.decode`` on the whole prefix at every step; tiling is checked against
``numpy.repeat`` of the untiled tensors.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import Translator
from keras_transformer.decoding.search import beam_search, greedy_search

BOS, EOS = 2, 3
MAX_LENGTH = 16
SENTENCES = [
    "A dog runs in the park.",
    "Two men are playing soccer near a big tree.",
    "Ein Mann fährt Fahrrad.",
]


@pytest.fixture(scope="module")
def translator(model, tokenizer):
    return Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=4, beam_size=3,
                      length_penalty=0.6)


@pytest.fixture(scope="module")
def inputs(translator):
    return translator.source_ids(tf.constant(SENTENCES))


def uncached_fn(model):
    """symbols_to_logits_fn without key/value cache: model.decode over the whole prefix.

    Its "cache" holds only the prefix buffer [B, MAX_LENGTH], the encoder
    outputs and the source ids (beam search tiles and reorders them by beam).
    """

    def fn(step_ids, step, cache):
        column = tf.equal(tf.range(MAX_LENGTH), step)[None, :]
        prefix = tf.where(column, step_ids[:, None], cache["prefix"])
        logits = model.decode(prefix[:, : step + 1], cache["encoder_outputs"], cache["source_ids"])
        return logits[:, -1, :], dict(cache, prefix=prefix)

    return fn


def uncached_cache(model, source_ids):
    return {
        "prefix": tf.zeros([source_ids.shape[0], MAX_LENGTH], tf.int32),
        "encoder_outputs": model.encode(source_ids, training=False),
        "source_ids": source_ids,
    }


def test_cached_beam_equals_uncached_reference_beam(translator, model, inputs):
    source_ids, limits = inputs["source_ids"], inputs["max_decode_lengths"]
    ids, scores = translator._beam_core(source_ids, limits)
    ref_ids, ref_scores = beam_search(
        uncached_fn(model), tf.fill([3], BOS), uncached_cache(model, source_ids), beam_size=3,
        length_penalty=0.6, max_length=MAX_LENGTH, eos_id=EOS, max_decode_lengths=limits,
        early_stopping=translator.early_stopping,
    )
    np.testing.assert_array_equal(ids.numpy(), ref_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), ref_scores.numpy(), rtol=1e-4, atol=1e-4)
    assert np.count_nonzero(ids.numpy()) > 0


def test_cached_greedy_equals_uncached_reference_search(translator, model, inputs):
    source_ids, limits = inputs["source_ids"], inputs["max_decode_lengths"]
    got = translator._greedy_core(source_ids, limits).numpy()
    ref = greedy_search(uncached_fn(model), tf.fill([3], BOS), uncached_cache(model, source_ids),
                        max_length=MAX_LENGTH, eos_id=EOS, max_decode_lengths=limits).numpy()
    np.testing.assert_array_equal(got, ref)


def test_eager_function_and_xla_identical(translator, model, tokenizer, inputs):
    source_ids, limits = inputs["source_ids"], inputs["max_decode_lengths"]
    xla = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=4, beam_size=3,
                     length_penalty=0.6, jit_compile=True, xla_max_rows=None)
    eager_beam = translator._beam_search_ids(source_ids, limits)  # plain Python: runs eagerly
    eager_greedy = translator._greedy_search_ids(source_ids, limits)
    for name, (beam, greedy) in {
        "function": (translator._beam_core(source_ids, limits), translator._greedy_core(source_ids, limits)),
        "xla": (xla._beam_core_xla(source_ids, limits), xla._greedy_core_xla(source_ids, limits)),
    }.items():
        np.testing.assert_array_equal(beam[0].numpy(), eager_beam[0].numpy(), err_msg=name)
        np.testing.assert_allclose(beam[1].numpy(), eager_beam[1].numpy(), rtol=1e-4, err_msg=name)
        np.testing.assert_array_equal(greedy.numpy(), eager_greedy.numpy(), err_msg=name)
    # Non-empty: every output row ends with EOS within its limit, and there are
    # real tokens besides the EOS markers.
    for row, limit in zip(eager_greedy.numpy(), limits.numpy()):
        assert EOS in row[:limit].tolist()
    assert np.count_nonzero(eager_greedy.numpy()) > 3
    assert np.count_nonzero(eager_beam[0].numpy()) > 3 * 3
    assert all(t for t in xla.translate(tf.constant(SENTENCES))["translations"].numpy())


def test_beam_size_one_equals_greedy_real_model(model, tokenizer):
    one = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=4, beam_size=1)
    sentences = tf.constant(SENTENCES + ["", "Zwei Hunde."])
    beam = one.translate_ids(sentences)["output_ids"].numpy()
    greedy = one.translate_greedy(sentences)
    np.testing.assert_array_equal(beam[:, 0], greedy["output_ids"].numpy())
    assert one.translate(sentences)["translations"].numpy().tolist() == greedy["translations"].numpy().tolist()


def test_beam_tiles_real_cache_batch_2_beam_3(model, inputs):
    source_ids = inputs["source_ids"][:2]
    encoder_outputs = model.encode(source_ids, training=False)
    cache = model.init_cache(encoder_outputs, source_ids, MAX_LENGTH)
    seen = []

    def recording_fn(step_ids, step, cache):
        seen.append((step_ids, cache))
        return model.decode_step(step_ids, step, cache)

    beam_search(recording_fn, tf.fill([2], BOS), cache, beam_size=3, length_penalty=0.6, max_length=3, eos_id=EOS)
    step_ids, tiled = seen[0]  # eager: the cache as beam search first passes it to the model
    assert step_ids.numpy().tolist() == [BOS] * 6
    np.testing.assert_array_equal(tiled["source_mask"].numpy(), np.repeat(source_ids.numpy() != 0, 3, axis=0))
    # Cross-attention keys/values of the 6 rows == those computed from the
    # encoder outputs repeated row by row (b -> rows 3b, 3b+1, 3b+2).
    repeated = model.init_cache(tf.constant(np.repeat(encoder_outputs.numpy(), 3, axis=0)),
                                tf.constant(np.repeat(source_ids.numpy(), 3, axis=0)), MAX_LENGTH)
    flat_seen, flat_ref = tf.nest.flatten(tiled), tf.nest.flatten(repeated)
    assert len(flat_seen) == len(flat_ref) == 2 + 4 * model.num_layers  # source mask and bias, 4 per layer
    for got, ref in zip(flat_seen, flat_ref):
        assert got.shape[0] == 6 and got.shape == ref.shape
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    # Step-0 logits of the 6 rows are those of the 2 sentences, repeated.
    logits, _ = model.decode_step(step_ids, 0, tiled)
    alone = model.decode(tf.fill([2, 1], BOS), encoder_outputs, source_ids)[:, 0]
    np.testing.assert_allclose(logits.numpy(), np.repeat(alone.numpy(), 3, axis=0), rtol=1e-4, atol=1e-5)


def test_no_retracing_for_new_batch_sizes_and_lengths(model, tokenizer):
    t = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=2, beam_size=2)
    batches = [["A dog."], ["Two men play soccer in the park today.", "Hi"], [""] * 2 + ["A cat sleeps."] * 3]
    for batch in batches:
        out = t.translate(tf.constant(batch))
        assert out["translations"].shape == (len(batch),)
        t.translate_greedy(tf.constant(batch))
        assert t.translate_ids(tf.constant(batch))["output_ids"].shape[:2] == (len(batch), 2)
    counts = {name: getattr(t, name).experimental_get_tracing_count()
              for name in ("translate", "translate_ids", "translate_greedy", "_beam_core", "_greedy_core")}
    assert counts == dict.fromkeys(counts, 1)


def test_invalid_utf8_is_replaced_and_outputs_are_valid_utf8(translator):
    bad = [b"\xff\xfe dog", b"dog \xc3", "Ein Hund \U0001F600 日本語".encode()]
    same = ["\ufffd\ufffd dog", "dog \ufffd", "Ein Hund \U0001F600 日本語"]
    a = translator.source_ids(tf.constant(bad))
    b = translator.source_ids(tf.constant(same))
    np.testing.assert_array_equal(a["source_ids"].numpy(), b["source_ids"].numpy())
    out = translator.translate(tf.constant(bad))["translations"].numpy()
    assert len(out) == 3
    for text in out:
        text.decode("utf-8")  # strict: raises on invalid UTF-8
