"""Tests of sample_search on hand-made logits (Markov tables like test_search.py's).

Expected properties are checked against values computed independently:
greedy search's tokens (top-k 1, temperature -> 0), the top-k / nucleus sets
recomputed in numpy from the logits each step actually saw (a recording
``symbols_to_logits_fn``), and sampling frequencies against the exact
probabilities of a hand-made table (binomial margins of many standard
deviations with a fixed seed).
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import search
from keras_transformer.decoding.search import greedy_search, sample_search

PAD, UNK, BOS, EOS, A, B = 0, 1, 2, 3, 4, 5
V = 6


def markov_fn(tables):
    """logits = tables[sentence, previous token]; cache {"table": [B] sentence index}."""
    tables = tf.constant(np.asarray(tables, np.float32))

    def fn(ids, step, cache):
        del step
        return tf.gather_nd(tables, tf.stack([cache["table"], ids], axis=1)), cache

    return fn


def bos(n):
    return tf.fill([n], BOS)


def table_cache(n):
    return {"table": tf.range(n, dtype=tf.int32)}


def random_tables(n, seed, scale=2.0, vocab=V):
    return (np.random.default_rng(seed).normal(size=(n, vocab, vocab)) * scale).astype(np.float32)


@pytest.fixture(params=[False, True], ids=["static", "drop_finished"])
def drop_finished(request):
    return request.param


SETTINGS = [
    dict(),
    dict(top_k=3),
    dict(top_p=0.7),
    dict(top_k=4, top_p=0.8, temperature=1.5),
    dict(temperature=0.5),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "plain")
def test_fixed_seed_reproduces_in_eager_function_and_xla(settings):
    n, max_length = 16, 9
    fn = markov_fn(random_tables(n, 0))
    limits = tf.constant([9, 3, 5, 1, 9, 6, 2, 9] * 2)

    def run(seed, drop=False):
        return sample_search(fn, bos(n), table_cache(n), max_length, EOS, seed, max_decode_lengths=limits,
                             drop_finished=drop, **settings)

    eager = run(tf.constant(11, tf.int64)).numpy()
    np.testing.assert_array_equal(run(tf.constant(11, tf.int64)).numpy(), eager)  # a second call
    np.testing.assert_array_equal(run(11, drop=True).numpy(), eager)  # shrinking batch, Python int seed
    spec = [tf.TensorSpec([], tf.int64)]
    graph = tf.function(run, input_signature=spec)(tf.constant(11, tf.int64)).numpy()
    xla = tf.function(run, input_signature=spec, jit_compile=True)(tf.constant(11, tf.int64)).numpy()
    graph_drop = tf.function(lambda s: run(s, True), input_signature=spec)(tf.constant(11, tf.int64)).numpy()
    np.testing.assert_array_equal(graph, eager)
    np.testing.assert_array_equal(xla, eager)
    np.testing.assert_array_equal(graph_drop, eager)
    # Output conventions: EOS within the limit, zeros after it.
    for b, limit in enumerate(limits.numpy()):
        row = eager[b].tolist()
        end = row.index(EOS) + 1
        assert end <= limit and all(t == 0 for t in row[end:])
    # Another seed samples differently (16 sentences of up to 9 tokens).
    assert not np.array_equal(run(12).numpy(), eager)


def test_seed_forms_and_batch_independence():
    n, max_length = 8, 7
    tables = random_tables(n, 1)
    ids = sample_search(markov_fn(tables), bos(n), table_cache(n), max_length, EOS, seed=5).numpy()
    # A Python int, a scalar tensor and the [2] seed [5, 0] are the same seed.
    np.testing.assert_array_equal(
        sample_search(markov_fn(tables), bos(n), table_cache(n), max_length, EOS,
                      seed=tf.constant([5, 0], tf.int32)).numpy(), ids)
    # Row r's sample depends on the seed, r and its own logits only: the first 3
    # rows alone (a smaller batch) and with other tables in rows 3.. sample the same.
    alone = sample_search(markov_fn(tables[:3]), bos(3), table_cache(3), max_length, EOS, seed=5).numpy()
    np.testing.assert_array_equal(alone, ids[:3])
    other = np.concatenate([tables[:3], random_tables(5, 2)])
    mixed = sample_search(markov_fn(other), bos(n), table_cache(n), max_length, EOS, seed=5).numpy()
    np.testing.assert_array_equal(mixed[:3], ids[:3])


def test_top_k_one_equals_greedy(drop_finished):
    n, max_length = 12, 8
    tables = random_tables(n, 3)
    # Exact ties included: the lower id wins in both searches.
    tables[0, BOS, [A, B]] = 50.0
    limits = tf.constant([8, 2, 3, 8, 1, 5, 8, 4, 8, 7, 6, 8])
    greedy = greedy_search(markov_fn(tables), bos(n), table_cache(n), max_length, EOS,
                           max_decode_lengths=limits).numpy()
    for seed in (0, 1, 2):
        for temperature in (1.0, 3.0):
            sampled = sample_search(markov_fn(tables), bos(n), table_cache(n), max_length, EOS, seed,
                                    max_decode_lengths=limits, top_k=1, temperature=temperature,
                                    drop_finished=drop_finished).numpy()
            np.testing.assert_array_equal(sampled, greedy)
    assert greedy[0, 0] == A


def recording_fn(tables, log):
    """markov_fn that appends each step's (step, ids, logits) to ``log`` (eager mode)."""
    inner = markov_fn(tables)

    def fn(ids, step, cache):
        logits, cache = inner(ids, step, cache)
        log.append((int(step), ids.numpy().copy(), logits.numpy().copy()))
        return logits, cache

    return fn


def sampled_steps(tables, ids, log, max_length):
    """(logits row, sampled token) of every sampled token (not EOS forced at max_length, not padding after EOS)."""
    pairs = []
    for step, step_ids, logits in log:
        assert step_ids.shape[0] == ids.shape[0]  # static mode: the whole batch every step
        for b in range(ids.shape[0]):
            if EOS in ids[b, :step].tolist() or step == max_length - 1:
                continue
            # The step saw the logits of the previously sampled token.
            np.testing.assert_array_equal(logits[b], tables[b, BOS if step == 0 else ids[b, step - 1]])
            pairs.append((logits[b], int(ids[b, step])))
    return pairs


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_every_sampled_token_is_in_the_top_k(top_k):
    vocab, n, max_length = 40, 24, 12
    tables = random_tables(n, 4, scale=1.0, vocab=vocab)  # flat: the top-k restriction is what matters
    log = []
    ids = sample_search(recording_fn(tables, log), bos(n), table_cache(n), max_length, EOS, seed=7,
                        top_k=top_k).numpy()
    pairs = sampled_steps(tables, ids, log, max_length)
    assert len(pairs) > 100
    outside_top_1 = 0
    for logits, token in pairs:
        kth_best = np.sort(logits)[::-1][top_k - 1]
        assert logits[token] >= kth_best, (token, logits)
        outside_top_1 += logits[token] < logits.max()
    if top_k > 1:  # not greedy: it really samples among the k
        assert outside_top_1 > len(pairs) // 5


def nucleus(logits, p, temperature=1.0, top_k=0):
    """The nucleus recomputed in numpy: most probable tokens until their mass reaches p."""
    scaled = logits.astype(np.float64) / temperature
    order = np.argsort(-scaled, kind="stable")
    if top_k:
        order = order[:top_k]
    probs = np.exp(scaled[order] - scaled[order].max())
    probs /= probs.sum() if top_k else np.exp(scaled - scaled.max()).sum()
    mass_before = np.cumsum(probs) - probs
    return set(order[mass_before < p].tolist())


@pytest.mark.parametrize("top_p, temperature, top_k", [(0.5, 1.0, 0), (0.9, 1.0, 0), (0.8, 2.0, 0), (0.7, 1.0, 5)])
def test_every_sampled_token_is_in_the_nucleus(top_p, temperature, top_k):
    vocab, n, max_length = 30, 24, 12
    tables = random_tables(n, 5, scale=1.5, vocab=vocab)
    log = []
    ids = sample_search(recording_fn(tables, log), bos(n), table_cache(n), max_length, EOS, seed=3,
                        top_p=top_p, temperature=temperature, top_k=top_k).numpy()
    pairs = sampled_steps(tables, ids, log, max_length)
    assert len(pairs) > 100
    sizes = []
    for logits, token in pairs:
        allowed = nucleus(logits, top_p, temperature, top_k)
        assert token in allowed
        sizes.append(len(allowed))
    assert max(sizes) > 1  # nuclei of several tokens, so the test can fail


def test_nucleus_is_searched_among_the_64_best_tokens():
    # A flat distribution over 200 tokens: top-p 0.9 would keep 180 of them; the bound keeps 64.
    vocab = 200
    logits = np.zeros((1, vocab, vocab), np.float32)
    logits[0, :, EOS] = -30.0  # no early stop
    log = []
    ids = sample_search(recording_fn(logits, log), bos(1), table_cache(1), 40, EOS, seed=0, top_p=0.9).numpy()
    tokens = ids[0, :39]
    # Ties resolve to the lower id, so the 64 best tokens are ids 0..64 without EOS.
    allowed = set(range(65)) - {EOS}
    assert set(tokens.tolist()) <= allowed
    assert len(set(tokens.tolist())) > 15  # still sampled among them
    assert search.TOP_P_CANDIDATES == 64


# One step from BOS over tokens a, b, EOS with probabilities .5, .3, .2; then EOS.
ONE_STEP = np.full((V, V), -1e9, np.float32)
ONE_STEP[BOS, [A, B, EOS]] = np.log([0.5, 0.3, 0.2])
ONE_STEP[A, EOS] = ONE_STEP[B, EOS] = 0.0


def first_tokens(n, **settings):
    """First sampled token of ``n`` copies of ONE_STEP (one batch, distinct rows, fixed seed)."""
    tables = np.broadcast_to(ONE_STEP, (n, V, V))
    ids = sample_search(markov_fn(tables), bos(n), table_cache(n), 3, EOS, seed=2024, **settings).numpy()
    return ids[:, 0]


def test_frequencies_match_the_distribution():
    n = 4000
    tokens = first_tokens(n)
    for token, p in ((A, 0.5), (B, 0.3), (EOS, 0.2)):
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(np.sum(tokens == token) - n * p) < 5 * sigma, (token, np.sum(tokens == token))
    # Temperature 2: probabilities proportional to p ** 0.5.
    tokens = first_tokens(n, temperature=2.0)
    weights = np.sqrt([0.5, 0.3, 0.2])
    for token, p in zip((A, B, EOS), weights / weights.sum()):
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(np.sum(tokens == token) - n * p) < 5 * sigma
    # top-p 0.75: nucleus {a, b} (mass before b is .5 < .75, before EOS .8), renormalized .625 / .375.
    tokens = first_tokens(n, top_p=0.75)
    assert not np.any(tokens == EOS)
    sigma = math.sqrt(n * 0.625 * 0.375)
    assert abs(np.sum(tokens == A) - n * 0.625) < 5 * sigma


def test_temperature_towards_zero_is_greedy_and_high_temperature_spreads():
    n = 2000
    # T -> 0: every copy takes a (the argmax, .5 against .3).
    assert np.all(first_tokens(n, temperature=1e-3) == A)
    # T = 100: probabilities within 2% of uniform (1/3 each); at T = 1 a has .5.
    hot = first_tokens(n, temperature=100.0)
    sigma = math.sqrt(n * (1 / 3) * (2 / 3))
    for token in (A, B, EOS):
        assert abs(np.sum(hot == token) - n / 3) < 5 * sigma
    assert np.sum(hot == A) < n * 0.5 - 10 * math.sqrt(n * 0.25)  # far below its T = 1 share


def test_temperature_towards_zero_equals_greedy_on_random_tables(drop_finished):
    n, max_length = 12, 8
    tables = random_tables(n, 6)
    greedy = greedy_search(markov_fn(tables), bos(n), table_cache(n), max_length, EOS).numpy()
    for seed in (0, 1):
        cold = sample_search(markov_fn(tables), bos(n), table_cache(n), max_length, EOS, seed,
                             temperature=1e-4, drop_finished=drop_finished).numpy()
        np.testing.assert_array_equal(cold, greedy)


def test_empty_batch(drop_finished):
    fn = markov_fn([ONE_STEP])
    ids = sample_search(fn, tf.zeros([0], tf.int32), {"table": tf.zeros([0], tf.int32)}, 4, EOS, seed=1,
                        top_p=0.5, drop_finished=drop_finished)
    assert ids.shape == (0, 4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(top_k=-1), "top_k"),
        (dict(top_k=2.0), "top_k"),
        (dict(top_k=True), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_p=float("nan")), "top_p"),
        (dict(temperature=0.0), "temperature"),
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=float("inf")), "temperature"),
        (dict(temperature="hot"), "temperature"),
        (dict(seed=tf.constant([1, 2, 3])), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(seed=None), "seed"),
        (dict(max_length=0), "max_length"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, message):
    arguments = dict(max_length=4, seed=0)
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        sample_search(markov_fn([ONE_STEP]), bos(1), table_cache(1), eos_id=EOS, **arguments)


def test_sampling_is_exported_by_the_package():
    import keras_transformer
    from keras_transformer import decoding

    assert keras_transformer.sample_search is sample_search is decoding.sample_search
