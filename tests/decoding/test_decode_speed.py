"""Decoding-speed changes keep results identical (issue: beam search speed).

* one-row cache write (``tensor_scatter_nd_update``) == numpy assignment;
* a cache sized per batch (tensor ``max_length``, dynamic in graph mode) gives
  the same logits as ``model.decode``, and the Translator's searches (graph
  mode: growing cache, shrinking batch; XLA: buffer sized per batch) the same
  tokens as a full ``max_length`` cache;
* beam search does not re-gather leaves returned unchanged, with the same result
  as gathering every leaf;
* XLA source bucketing translates like the unbucketed graph.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import Translator
from keras_transformer.decoding.search import beam_search, greedy_search
from keras_transformer.layers.attention import _write_position

BOS, EOS = 2, 3
MAX_LENGTH = 24
EXTRA = 2
SENTENCES = ["A dog runs.", "Two men play soccer.", "Hi"]


@pytest.fixture(scope="module")
def translator(model, tokenizer):
    return Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=3,
                      length_penalty=0.6)


@pytest.fixture(scope="module")
def inputs(translator):
    return translator.source_ids(tf.constant(SENTENCES))


def test_write_position_matches_numpy_assignment():
    rng = np.random.default_rng(0)
    buffer = rng.normal(size=(3, 2, 5, 4)).astype("float32")  # [batch, heads, length, depth]
    row = rng.normal(size=(3, 2, 1, 4)).astype("float32")
    expected = buffer.copy()
    expected[:, :, 2] = row[:, :, 0]
    got = _write_position(tf.constant(buffer), tf.constant(row), tf.constant(2)).numpy()
    np.testing.assert_array_equal(got, expected)


def test_write_position_dynamic_length_in_graph():
    @tf.function(input_signature=[tf.TensorSpec([None, 2, None, 3]), tf.TensorSpec([None, 2, 1, 3])])
    def write(buffer, row):
        return _write_position(buffer, row, tf.constant(0))

    out = write(tf.zeros([2, 2, 4, 3]), tf.ones([2, 2, 1, 3])).numpy()
    assert out[:, :, 0].sum() == 2 * 2 * 3 and out[:, :, 1:].sum() == 0


def test_init_cache_tensor_length_and_bad_length(model):
    source_ids = tf.constant([[5, 6, 3], [7, 3, 0]])
    encoder_outputs = model.encode(source_ids)
    cache = model.init_cache(encoder_outputs, source_ids, tf.constant(7))
    assert cache["layer_0"]["self_key"].shape == (2, model.num_heads, 7, model.d_model // model.num_heads)
    with pytest.raises(ValueError, match="max_length"):
        model.init_cache(encoder_outputs, source_ids, tf.constant([7, 8]))
    with pytest.raises(ValueError, match="max_length"):
        model.init_cache(encoder_outputs, source_ids, 0)


def test_short_dynamic_cache_decode_step_equals_decode(model):
    """decode_step over a 5-position cache with a graph-dynamic length == decode() at every position."""
    source_ids = tf.constant([[5, 6, 7, 3], [8, 3, 0, 0]])
    target = tf.constant([[BOS, 9, 10, 11, 12], [BOS, 13, 14, 0, 0]])
    encoder_outputs = model.encode(source_ids)
    reference = model.decode(target, encoder_outputs, source_ids).numpy()

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)])
    def run(target, length):
        cache = model.init_cache(encoder_outputs, source_ids, length)
        assert cache["layer_0"]["self_key"].shape[2] is None  # dynamic in the graph
        logits = []
        for step in range(5):
            step_logits, cache = model.decode_step(target[:, step], step, cache)
            logits.append(step_logits)
        return tf.stack(logits, axis=1)

    got = run(target, tf.constant(5)).numpy()
    np.testing.assert_allclose(got[0], reference[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1, :2], reference[1, :2], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_translator_cache_equals_full_cache(translator, model, inputs, jit_compile):
    """Graph mode grows its cache (init_cache(None)); XLA sizes a buffer per batch. Same beams as a full cache."""
    source_ids, limits = inputs["source_ids"], inputs["max_decode_lengths"]
    width = int(source_ids.shape[1])
    lengths = []

    def recording_init_cache(encoder_outputs, source_ids, max_length):
        lengths.append(None if max_length is None else int(max_length))
        return model.init_cache(encoder_outputs, source_ids, max_length)

    class Recording:
        encode = staticmethod(model.encode)
        decode_step = staticmethod(model.decode_step)
        init_cache = staticmethod(recording_init_cache)

    spy = Translator(Recording(), translator.tokenizer, max_length=MAX_LENGTH, extra_decode_length=EXTRA,
                     beam_size=3, length_penalty=0.6, jit_compile=jit_compile)
    beam_ids, beam_scores = spy._beam_search_ids(source_ids, limits, xla=jit_compile)  # eager
    greedy_ids = spy._greedy_search_ids(source_ids, limits, xla=jit_compile)
    if jit_compile:
        assert lengths == [min(MAX_LENGTH, width + EXTRA)] * 2 and lengths[0] < MAX_LENGTH
    else:
        assert lengths == [None, None]

    # Reference: the same searches over a full max_length cache, static batch.
    encoder_outputs = model.encode(source_ids)
    full = model.init_cache(encoder_outputs, source_ids, MAX_LENGTH)
    fn = model.decode_step
    ref_ids, ref_scores = beam_search(fn, tf.fill([3], BOS), full, beam_size=3, length_penalty=0.6,
                                      max_length=MAX_LENGTH, eos_id=EOS, max_decode_lengths=limits,
                                      early_stopping=spy.early_stopping)
    np.testing.assert_array_equal(beam_ids.numpy(), ref_ids.numpy())
    np.testing.assert_allclose(beam_scores.numpy(), ref_scores.numpy(), rtol=1e-5, atol=1e-5)
    ref_greedy = greedy_search(fn, tf.fill([3], BOS), full, max_length=MAX_LENGTH, eos_id=EOS,
                               max_decode_lengths=limits)
    np.testing.assert_array_equal(greedy_ids.numpy(), ref_greedy.numpy())
    np.testing.assert_array_equal(translator._greedy_core(source_ids, limits).numpy(), ref_greedy.numpy())
    assert np.count_nonzero(ref_ids.numpy()) > 3 * 3


def test_beam_skips_unchanged_leaves_with_same_result(model, inputs):
    """Pass-through leaves are not re-gathered; copying every leaf (all gathered) gives the same beams."""
    source_ids, limits = inputs["source_ids"], inputs["max_decode_lengths"]
    encoder_outputs = model.encode(source_ids)
    cache = model.init_cache(encoder_outputs, source_ids, MAX_LENGTH)
    gathered_shapes = []

    def copying_fn(step_ids, step, cache):
        logits, cache = model.decode_step(step_ids, step, cache)
        return logits, tf.nest.map_structure(tf.identity, cache)

    original_gather = tf.gather

    def spy_gather(params, indices, **kwargs):
        gathered_shapes.append(tuple(params.shape))
        return original_gather(params, indices, **kwargs)

    args = dict(beam_size=3, length_penalty=0.6, max_length=MAX_LENGTH, eos_id=EOS, max_decode_lengths=limits)
    tf.gather = spy_gather
    try:
        ids, scores = beam_search(model.decode_step, tf.fill([3], BOS), cache, **args)
        skipped = list(gathered_shapes)
        gathered_shapes.clear()
        ref_ids, ref_scores = beam_search(copying_fn, tf.fill([3], BOS), cache, **args)
    finally:
        tf.gather = original_gather
    np.testing.assert_array_equal(ids.numpy(), ref_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), ref_scores.numpy(), rtol=1e-6)
    width = int(source_ids.shape[1])
    cross_shape = (9, model.num_heads, width, model.d_model // model.num_heads)
    assert cross_shape in gathered_shapes and cross_shape not in skipped
    assert (9, model.num_heads, MAX_LENGTH, model.d_model // model.num_heads) in skipped


def test_xla_bucketed_translation_equals_graph(translator, model, tokenizer):
    xla = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=3,
                     length_penalty=0.6, jit_compile=True, source_bucket_width=8, xla_max_rows=None)
    source = translator.source_ids(tf.constant(SENTENCES))["source_ids"]
    padded = xla._bucket(source)
    assert padded.shape[1] == min(MAX_LENGTH, -(-source.shape[1] // 8) * 8)
    np.testing.assert_array_equal(padded.numpy()[:, : source.shape[1]], source.numpy())
    assert not padded.numpy()[:, source.shape[1]:].any()
    got, ref = xla.translate_ids(tf.constant(SENTENCES)), translator.translate_ids(tf.constant(SENTENCES))
    np.testing.assert_array_equal(got["output_ids"].numpy(), ref["output_ids"].numpy())
    np.testing.assert_array_equal(got["source_ids"].numpy(), ref["source_ids"].numpy())
    np.testing.assert_allclose(got["scores"].numpy(), ref["scores"].numpy(), rtol=1e-4)
    greedy, greedy_ref = xla.translate_greedy(tf.constant(SENTENCES)), translator.translate_greedy(
        tf.constant(SENTENCES))
    np.testing.assert_array_equal(greedy["output_ids"].numpy(), greedy_ref["output_ids"].numpy())
    with pytest.raises(ValueError, match="source_bucket_width"):
        Translator(model, tokenizer, max_length=MAX_LENGTH, source_bucket_width=0)


def test_xla_only_for_small_searches_same_translations(translator, model, tokenizer):
    """jit_compile with xla_max_rows=3: searches of up to 3 decoding rows (sentences x beams) take the XLA
    search, larger ones the graph-mode search; both translate exactly like the plain Translator."""
    hybrid = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=3,
                        length_penalty=0.6, jit_compile=True, xla_max_rows=3)
    for batch in ([SENTENCES[1]], SENTENCES):
        got, ref = hybrid.translate_ids(tf.constant(batch)), translator.translate_ids(tf.constant(batch))
        np.testing.assert_array_equal(got["output_ids"].numpy(), ref["output_ids"].numpy())
        np.testing.assert_allclose(got["scores"].numpy(), ref["scores"].numpy(), rtol=1e-4)
        greedy, greedy_ref = hybrid.translate_greedy(tf.constant(batch)), translator.translate_greedy(
            tf.constant(batch))
        np.testing.assert_array_equal(greedy["output_ids"].numpy(), greedy_ref["output_ids"].numpy())
    # Dispatch (eager: tf.cond runs only the branch taken): which search each call reaches.
    calls = []

    def stub(name):
        return lambda ids, limits: calls.append((name, int(ids.shape[0]), int(ids.shape[1])))

    hybrid._beam_core_xla, hybrid._beam_core = stub("beam xla"), stub("beam graph")
    hybrid._greedy_core_xla, hybrid._greedy_core = stub("greedy xla"), stub("greedy graph")
    bucket = lambda width: min(MAX_LENGTH, -(-width // 16) * 16)  # noqa: E731  (XLA's bucketed source width)
    expected = []
    for batch in ([SENTENCES[1]], SENTENCES, SENTENCES + ["A cat."]):
        inputs = hybrid.source_ids(tf.constant(batch))
        width = int(inputs["source_ids"].shape[1])
        for greedy in (False, True):
            hybrid._search(greedy, inputs["source_ids"], inputs["max_decode_lengths"])
            rows = len(batch) * (1 if greedy else 3)
            kind = ("greedy " if greedy else "beam ") + ("xla" if rows <= 3 else "graph")
            expected.append((kind, len(batch), bucket(width) if kind.endswith("xla") else width))
    assert calls == expected
    assert [c[0] for c in calls] == ["beam xla", "greedy xla", "beam graph", "greedy xla", "beam graph",
                                     "greedy graph"]
    assert hybrid.get_config()["xla_max_rows"] == 3
    with pytest.raises(ValueError, match="xla_max_rows"):
        Translator(model, tokenizer, max_length=MAX_LENGTH, jit_compile=True, xla_max_rows=0)
