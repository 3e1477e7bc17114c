"""Tests of greedy_search / beam_search / tile_for_beam on hand-made logits.

The "model" is a Markov table of next-token probabilities indexed by the
previous token (optionally the two previous tokens, kept in the cache, to check
that beam search re-gathers the cache by parent beam). Expected outputs are
derived by hand or by independent numpy enumeration, never copied from a run.
"""

import functools
import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import search
from keras_transformer.decoding.search import (
    beam_search,
    greedy_search,
    length_penalty_factor,
    tile_for_beam,
)

PAD, UNK, BOS, EOS, A, B = 0, 1, 2, 3, 4, 5
V = 6
IMPOSSIBLE = -1e9


@pytest.fixture(params=[False, True], ids=["static", "drop_finished"])
def drop_finished(request):
    """Both execution modes of the searches must give the same, hand-derived results."""
    return request.param


def searches(drop_finished):
    """(greedy_search, beam_search) in the given mode."""
    return (functools.partial(search.greedy_search, drop_finished=drop_finished),
            functools.partial(search.beam_search, drop_finished=drop_finished))


def log_table(rows):
    """[V, V] log-probabilities from {prev: {next: prob}}; unlisted entries impossible."""
    table = np.full((V, V), IMPOSSIBLE, np.float32)
    for prev, nexts in rows.items():
        assert abs(sum(nexts.values()) - 1.0) < 1e-9
        for nxt, p in nexts.items():
            table[prev, nxt] = math.log(p)
    return table


def markov_fn(tables):
    """symbols_to_logits_fn over per-sentence tables [T, V, V]; cache {"table": [B]}."""
    tables = tf.constant(np.asarray(tables, np.float32))

    def fn(ids, step, cache):
        del step
        logits = tf.gather_nd(tables, tf.stack([cache["table"], ids], axis=1))
        return logits, cache

    return fn


def batch_cache(num):
    return {"table": tf.range(num, dtype=tf.int32)}


def bos(num):
    return tf.fill([num], BOS)


# BOS -> a (.6), a -> b (.5), b -> EOS (.7): greedy path a b EOS.
GREEDY_TABLE = log_table(
    {
        BOS: {A: 0.6, B: 0.3, EOS: 0.1},
        A: {B: 0.5, A: 0.2, EOS: 0.3},
        B: {EOS: 0.7, A: 0.2, B: 0.1},
    }
)


def test_tile_for_beam_order():
    x = tf.constant([[1, 2], [3, 4]])
    tiled = tile_for_beam(x, 3)
    assert tiled.shape == (6, 2)
    assert tiled.numpy().tolist() == [[1, 2]] * 3 + [[3, 4]] * 3
    nested = tf.nest.map_structure(lambda t: tile_for_beam(t, 3), {"k": tf.constant([7, 8])})
    assert nested["k"].numpy().tolist() == [7, 7, 7, 8, 8, 8]


def test_tile_for_beam_rejects_bad_input():
    with pytest.raises(ValueError, match="beam_size"):
        tile_for_beam(tf.constant([1]), 0)
    with pytest.raises(ValueError, match="scalar"):
        tile_for_beam(tf.constant(1), 2)


def test_length_penalty_formula():
    # Wu et al. (2016): ((5 + |Y|) / 6) ** alpha.
    got = length_penalty_factor(tf.constant([1, 2, 10]), 0.6).numpy()
    np.testing.assert_allclose(got, [1.0, (7 / 6) ** 0.6, (15 / 6) ** 0.6], rtol=1e-6)
    np.testing.assert_allclose(length_penalty_factor(tf.constant([3]), 0.0).numpy(), [1.0])


def test_greedy_picks_argmax_path_and_stops_at_eos():
    ids = greedy_search(markov_fn([GREEDY_TABLE]), bos(1), batch_cache(1), max_length=6, eos_id=EOS)
    assert ids.dtype == tf.int32
    assert ids.numpy().tolist() == [[A, B, EOS, 0, 0, 0]]


def test_greedy_batched_per_sentence_tables(drop_finished):
    greedy_search, beam_search = searches(drop_finished)
    # Sentence 1: BOS -> EOS immediately.
    t1 = log_table({BOS: {EOS: 0.8, A: 0.2}, A: {EOS: 1.0}})
    ids = greedy_search(markov_fn([GREEDY_TABLE, t1]), bos(2), batch_cache(2), max_length=5, eos_id=EOS)
    assert ids.numpy().tolist() == [[A, B, EOS, 0, 0], [EOS, 0, 0, 0, 0]]


def test_greedy_matches_numpy_reference_on_random_tables():
    rng = np.random.default_rng(0)
    tables = rng.normal(size=(4, V, V)).astype(np.float32) * 2
    max_length = 7
    ids = greedy_search(markov_fn(tables), bos(4), batch_cache(4), max_length=max_length, eos_id=EOS).numpy()
    for b in range(4):
        expected, prev = [], BOS
        for t in range(max_length):
            nxt = EOS if t == max_length - 1 else int(np.argmax(tables[b, prev]))
            expected.append(nxt)
            prev = nxt
            if nxt == EOS:
                break
        expected += [0] * (max_length - len(expected))
        assert ids[b].tolist() == expected


# EOS almost never: a <-> b alternate.
NO_EOS_TABLE = log_table(
    {
        BOS: {A: 0.9, B: 0.0999999, EOS: 1e-7},
        A: {B: 0.9, A: 0.0999999, EOS: 1e-7},
        B: {A: 0.9, B: 0.0999999, EOS: 1e-7},
    }
)


def test_greedy_respects_max_decode_lengths(drop_finished):
    greedy_search, beam_search = searches(drop_finished)
    tables = [NO_EOS_TABLE] * 4
    ids = greedy_search(
        markov_fn(tables), bos(4), batch_cache(4), max_length=6, eos_id=EOS,
        max_decode_lengths=tf.constant([2, 4, 1, 99]),
    )
    assert ids.numpy().tolist() == [
        [A, EOS, 0, 0, 0, 0],
        [A, B, A, EOS, 0, 0],
        [EOS, 0, 0, 0, 0, 0],
        [A, B, A, B, A, EOS],  # 99 is clipped to max_length
    ]


def test_beam_size_one_equals_greedy():
    ids, scores = beam_search(
        markov_fn([GREEDY_TABLE]), bos(1), batch_cache(1), beam_size=1, length_penalty=0.0,
        max_length=6, eos_id=EOS,
    )
    assert ids.shape == (1, 1, 6) and scores.shape == (1, 1)
    assert ids.numpy()[0, 0].tolist() == [A, B, EOS, 0, 0, 0]
    np.testing.assert_allclose(scores.numpy()[0, 0], math.log(0.6 * 0.5 * 0.7), rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_size_one_equals_greedy_random(alpha, drop_finished):
    """beam_size=1 returns greedy's tokens, and the score of that path recomputed in numpy."""
    greedy_search, beam_search = searches(drop_finished)
    rng = np.random.default_rng(1)
    tables = (rng.normal(size=(8, V, V)) * 2).astype(np.float32)
    n = len(tables)
    limits = tf.constant([6, 2, 3, 6, 1, 5, 6, 4])
    greedy = greedy_search(markov_fn(tables), bos(n), batch_cache(n), max_length=6, eos_id=EOS,
                           max_decode_lengths=limits).numpy()
    ids, scores = beam_search(markov_fn(tables), bos(n), batch_cache(n), beam_size=1, length_penalty=alpha,
                              max_length=6, eos_id=EOS, max_decode_lengths=limits)
    np.testing.assert_array_equal(ids.numpy()[:, 0], greedy)
    log_softmax = tables - np.log(np.exp(tables.astype(np.float64)).sum(-1, keepdims=True))
    for b in range(n):
        prev, greedy_lp, length = BOS, 0.0, 0
        for tok in greedy[b]:
            greedy_lp += log_softmax[b, prev, tok]  # a forced EOS counts its own log-probability
            prev, length = tok, length + 1
            if tok == EOS:
                break
        np.testing.assert_allclose(scores.numpy()[b, 0], greedy_lp / ((5 + length) / 6) ** alpha, rtol=1e-5)


# Greedy follows a (.5) then a, a... ; beam finds b EOS (.4 * .9 = .36).
TRAP_TABLE = log_table(
    {
        BOS: {A: 0.5, B: 0.4, EOS: 0.1},
        A: {A: 0.36, B: 0.34, EOS: 0.30},
        B: {EOS: 0.9, A: 0.05, B: 0.05},
    }
)


def test_beam_beats_greedy_on_crafted_example(drop_finished):
    greedy_search, beam_search = searches(drop_finished)
    fn = markov_fn([TRAP_TABLE])
    greedy = greedy_search(fn, bos(1), batch_cache(1), max_length=4, eos_id=EOS).numpy()[0]
    assert greedy.tolist() == [A, A, A, EOS]  # EOS forced at max_length
    greedy_log_prob = math.log(0.5 * 0.36 * 0.36 * 0.30)
    ids, scores = beam_search(fn, bos(1), batch_cache(1), beam_size=2, length_penalty=0.0, max_length=4,
                              eos_id=EOS)
    assert ids.numpy()[0, 0].tolist() == [B, EOS, 0, 0]
    np.testing.assert_allclose(scores.numpy()[0, 0], math.log(0.4 * 0.9), rtol=1e-5)
    assert scores.numpy()[0, 0] > greedy_log_prob
    # Second best complete hypothesis: a b EOS (.5 * .34 * .9 = .153), ahead of
    # a EOS (.5 * .3 = .15) and EOS (.1).
    assert ids.numpy()[0, 1].tolist() == [A, B, EOS, 0]
    np.testing.assert_allclose(scores.numpy()[0, 1], math.log(0.153), rtol=1e-5)


# Hand-made ranking example: with max_length 3 and only tokens a, b, EOS there are
# exactly 7 complete hypotheses, and beam 4 explores all of them.
RANK_TABLE = log_table(
    {
        BOS: {EOS: 0.36, A: 0.35, B: 0.29},
        A: {EOS: 0.95, A: 0.03, B: 0.02},
        B: {EOS: 0.5, A: 0.25, B: 0.25},
    }
)
RANK_HYPOTHESES = {
    (EOS,): 0.36,
    (A, EOS): 0.35 * 0.95,
    (B, EOS): 0.29 * 0.5,
    (A, A, EOS): 0.35 * 0.03 * 0.95,
    (A, B, EOS): 0.35 * 0.02 * 0.5,
    (B, A, EOS): 0.29 * 0.25 * 0.95,
    (B, B, EOS): 0.29 * 0.25 * 0.5,
}


@pytest.mark.parametrize(
    "alpha, expected_best",
    [
        (0.0, (EOS,)),  # log .36 > log .3325
        (0.6, (A, EOS)),  # log .3325 / (7/6)^.6 = -1.0039 > log .36 / 1 = -1.0217
    ],
)
def test_beam_ranks_by_length_penalized_score(alpha, expected_best, drop_finished):
    greedy_search, beam_search = searches(drop_finished)
    expected = sorted(
        ((math.log(p) / ((5 + len(y)) / 6) ** alpha, y) for y, p in RANK_HYPOTHESES.items()),
        reverse=True,
    )[:4]
    assert expected[0][1] == expected_best
    ids, scores = beam_search(markov_fn([RANK_TABLE]), bos(1), batch_cache(1), beam_size=4,
                              length_penalty=alpha, max_length=3, eos_id=EOS)
    got = [tuple(int(t) for t in row if t != 0) for row in ids.numpy()[0]]
    assert got == [y for _, y in expected]
    np.testing.assert_allclose(scores.numpy()[0], [s for s, _ in expected], rtol=1e-5)


def test_beam_respects_max_decode_lengths_exhaustively(drop_finished):
    greedy_search, beam_search = searches(drop_finished)
    # Per sentence limits 2 and 3 on RANK_TABLE; beam 4 is exhaustive here, so the
    # result must equal the enumeration of every sequence within the limit.
    alpha = 0.6
    ids, scores = beam_search(markov_fn([RANK_TABLE, RANK_TABLE]), bos(2), batch_cache(2), beam_size=4,
                              length_penalty=alpha, max_length=5, eos_id=EOS,
                              max_decode_lengths=tf.constant([2, 3]))
    for b, limit in enumerate([2, 3]):
        hyps = []
        for n in range(1, limit + 1):
            for body in itertools.product([A, B], repeat=n - 1):
                prev, lp = BOS, 0.0
                for tok in body + (EOS,):
                    lp += RANK_TABLE[prev, tok]
                    prev = tok
                hyps.append((lp / ((5 + n) / 6) ** alpha, body + (EOS,)))
        expected = sorted(hyps, reverse=True)[:4]
        # Limit 2 allows only 3 hypotheses: the 4th slot is empty with score -inf.
        expected += [(-np.inf, ())] * (4 - len(expected))
        got = [tuple(int(t) for t in row if t != 0) for row in ids.numpy()[b]]
        assert got == [y for _, y in expected]
        assert all(len(y) <= limit for y in got)
        np.testing.assert_allclose(scores.numpy()[b], [s for s, _ in expected], rtol=1e-5)


def test_beam_forced_eos_when_model_never_stops(drop_finished):
    greedy_search, beam_search = searches(drop_finished)
    ids, scores = beam_search(markov_fn([NO_EOS_TABLE]), bos(1), batch_cache(1), beam_size=2,
                              length_penalty=0.6, max_length=8, eos_id=EOS,
                              max_decode_lengths=tf.constant([3]))
    best = ids.numpy()[0, 0].tolist()
    # Every complete hypothesis pays one unlikely EOS (1e-7); the best of each
    # length is a, ab, ... and the length penalty (dividing a negative log-prob)
    # decides between lengths 1..3 (here: length 3, EOS forced at the limit).
    lp1 = math.log(1e-7)
    lp2 = math.log(0.9 * 1e-7) / (7 / 6) ** 0.6
    lp3 = math.log(0.9 * 0.9 * 1e-7) / (8 / 6) ** 0.6
    best_len = 1 + int(np.argmax([lp1, lp2, lp3]))
    assert len([t for t in best if t != 0]) == best_len
    assert best[best_len - 1] == EOS
    np.testing.assert_allclose(scores.numpy()[0, 0], max(lp1, lp2, lp3), rtol=1e-5)


def second_order_fn(tables):
    """logits = tables[sentence, prev2, prev1]; prev2 lives in the cache (gathered by beam)."""
    tables = tf.constant(tables)

    def fn(ids, step, cache):
        del step
        logits = tf.gather_nd(tables, tf.stack([cache["table"], cache["prev"], ids], axis=1))
        return logits, {"table": cache["table"], "prev": ids}

    return fn


def recompute_log_prob(table, seq):
    log_softmax = table - np.log(np.exp(table.astype(np.float64)).sum(-1, keepdims=True))
    p2, p1, total = BOS, BOS, 0.0
    for tok in seq:
        total += log_softmax[p2, p1, tok]
        p2, p1 = p1, tok
        if tok == EOS:
            break
    return total


def test_beam_scores_match_recomputed_log_probs_with_cache_gather(drop_finished):
    greedy_search, beam_search = searches(drop_finished)
    rng = np.random.default_rng(3)
    n, alpha, max_length = 3, 0.6, 6
    tables = (rng.normal(size=(n, V, V, V)) * 2).astype(np.float32)
    cache = {"table": tf.range(n, dtype=tf.int32), "prev": tf.fill([n], BOS)}
    ids, scores = beam_search(second_order_fn(tables), bos(n), cache, beam_size=3, length_penalty=alpha,
                              max_length=max_length, eos_id=EOS)
    ids, scores = ids.numpy(), scores.numpy()
    for b in range(n):
        assert np.all(np.diff(scores[b]) <= 1e-6)  # best first
        seen = set()
        for k in range(3):
            seq = ids[b, k].tolist()
            length = seq.index(EOS) + 1
            assert all(t == 0 for t in seq[length:])
            assert EOS not in seq[: length - 1]
            seen.add(tuple(seq))
            expected = recompute_log_prob(tables[b], seq) / ((5 + length) / 6) ** alpha
            np.testing.assert_allclose(scores[b, k], expected, rtol=1e-4, atol=1e-4)
        assert len(seen) == 3  # distinct hypotheses


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_eager_function_and_xla_agree(mode):
    rng = np.random.default_rng(4)
    n, max_length = 3, 7
    tables = (rng.normal(size=(n, V, V, V)) * 2).astype(np.float32)
    fn = second_order_fn(tables)
    limits = tf.constant([7, 3, 5])

    def run(initial_ids, table_ids, limits):
        cache = {"table": table_ids, "prev": initial_ids}
        greedy = greedy_search(fn, initial_ids, cache, max_length, EOS, max_decode_lengths=limits)
        ids, scores = beam_search(fn, initial_ids, cache, 2, 0.6, max_length, EOS, max_decode_lengths=limits)
        return greedy, ids, scores

    args = (bos(n), tf.range(n, dtype=tf.int32), limits)
    eager = run(*args)
    spec = [tf.TensorSpec([None], tf.int32)] * 3
    compiled = tf.function(run, input_signature=spec, jit_compile=(mode == "xla"))(*args)
    for e, c in zip(eager, compiled):
        assert c.shape == e.shape
        np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-5)
    assert np.count_nonzero(compiled[0].numpy()) > 0 and np.count_nonzero(compiled[1].numpy()) > 0
    # Every row ends with EOS within its limit.
    for b, limit in enumerate(limits.numpy()):
        assert EOS in compiled[0].numpy()[b, :limit].tolist()


def test_empty_batch(drop_finished):
    greedy_search, beam_search = searches(drop_finished)
    fn = markov_fn([GREEDY_TABLE])
    cache = {"table": tf.zeros([0], tf.int32)}
    ids = greedy_search(fn, tf.zeros([0], tf.int32), cache, max_length=4, eos_id=EOS)
    assert ids.shape == (0, 4)
    ids, scores = beam_search(fn, tf.zeros([0], tf.int32), cache, 2, 0.6, 4, EOS)
    assert ids.shape == (0, 2, 4) and scores.shape == (0, 2)


def test_bad_arguments_raise_value_error():
    fn = markov_fn([GREEDY_TABLE])
    with pytest.raises(ValueError, match="max_length"):
        greedy_search(fn, bos(1), batch_cache(1), max_length=0, eos_id=EOS)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(fn, bos(1), batch_cache(1), beam_size=0, length_penalty=0.6, max_length=3, eos_id=EOS)
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(fn, bos(1), batch_cache(1), beam_size=2, length_penalty=-1.0, max_length=3, eos_id=EOS)
    with pytest.raises(ValueError, match="max_decode_lengths"):
        greedy_search(fn, bos(1), batch_cache(1), max_length=3, eos_id=EOS,
                      max_decode_lengths=tf.constant([[1]]))


@pytest.mark.parametrize("beam_size", [1, 2, 3])
def test_drop_finished_equals_static_in_graph_mode(beam_size):
    """In a tf.function (the exported graph), shrinking the batch changes no token and no score."""
    rng = np.random.default_rng(5)
    n, max_length = 7, 9
    tables = (rng.normal(size=(n, V, V, V)) * 2).astype(np.float32)
    fn = second_order_fn(tables)
    limits = tf.constant([9, 3, 5, 1, 9, 6, 2])

    def run(drop):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)] * 3)
        def decode(initial_ids, table_ids, limits):
            cache = {"table": table_ids, "prev": initial_ids}
            greedy = greedy_search(fn, initial_ids, cache, max_length, EOS, limits, drop_finished=drop)
            ids, scores = beam_search(fn, initial_ids, cache, beam_size, 0.6, max_length, EOS, limits,
                                      drop_finished=drop)
            return greedy, ids, scores

        return [t.numpy() for t in decode(bos(n), tf.range(n, dtype=tf.int32), limits)]

    static, dropped = run(False), run(True)
    np.testing.assert_array_equal(static[0], dropped[0])  # greedy ids
    np.testing.assert_array_equal(static[1], dropped[1])  # beam ids
    # Scores: equal up to the last bit of a softmax over another batch size.
    np.testing.assert_allclose(static[2], dropped[2], rtol=1e-6)
    assert np.count_nonzero(static[1]) > n  # real hypotheses, not an all-padding result


def test_top_k_rows_equals_tf_top_k_with_ties():
    rng = np.random.default_rng(6)
    for n, k in ((8000, 8), (8000, 1), (37000, 8), (6, 4), (1000, 3)):
        # Rounded values: many exact ties, which must resolve to the lower index like tf.math.top_k.
        values = np.round(rng.normal(size=(5, n)) * 4).astype(np.float32)
        got_values, got_ids = search.top_k_rows(tf.constant(values), k)
        want_values, want_ids = tf.math.top_k(values, k)
        np.testing.assert_array_equal(got_values.numpy(), want_values.numpy())
        np.testing.assert_array_equal(got_ids.numpy(), want_ids.numpy())
    with pytest.raises(ValueError, match="exceeds"):
        search.top_k_rows(tf.zeros([2, 5]), 6)
