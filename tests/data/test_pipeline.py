"""Tests of keras_transformer.data.pipeline (Section 5.1 batching, teacher-forcing shifts)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.data.pipeline import (
    bucket_widths,
    count_real_tokens,
    dataset_statistics,
    make_dataset,
    make_pair_dataset,
    prepare_pairs,
)

BOS, EOS = 2, 3


@pytest.fixture(scope="module")
def processor(tokenizer_model):
    """Reference python SentencePiece for independent expectations."""
    return spm.SentencePieceProcessor(model_file=tokenizer_model)


@pytest.fixture(scope="module")
def val_prepared(tokenizer, multi30k_val):
    en, de = multi30k_val
    return prepare_pairs(en, de, tokenizer, max_length=200)


def _rows(ids: np.ndarray) -> list[tuple[int, ...]]:
    """Rows of a 0-padded batch without the padding; checks padding is only on the right."""
    rows = []
    for row in ids:
        n = int((row != 0).sum())
        assert (row[:n] != 0).all() and (row[n:] == 0).all()
        rows.append(tuple(int(x) for x in row[:n]))
    return rows


def test_prepare_adds_eos_and_shift(val_prepared, processor, multi30k_val):
    en, de = multi30k_val
    assert val_prepared.report.dropped == 0 and val_prepared.report.kept == len(en) == len(val_prepared)
    src = val_prepared.source_ids.to_list()
    tgt = val_prepared.target_ids.to_list()
    for i in (0, 1, 500, len(en) - 1):
        assert src[i] == processor.encode(en[i]) + [EOS]
        assert tgt[i] == processor.encode(de[i]) + [EOS]
    first = next(iter(make_pair_dataset(val_prepared)))
    source, target_in, target_out = (t.numpy().tolist() for t in first)
    assert source == processor.encode(en[0]) + [EOS]
    assert target_in == [BOS] + processor.encode(de[0])
    assert target_out == processor.encode(de[0]) + [EOS]
    expected_tokens = sum(len(processor.encode(s)) + 1 for s in en)
    assert val_prepared.report.source_tokens == expected_tokens


def test_drop_policy_counts(tokenizer, processor, multi30k_val):
    en, de = multi30k_val
    max_length = 16
    keep = [len(processor.encode(a)) + 1 <= max_length and len(processor.encode(b)) + 1 <= max_length for a, b in zip(en, de)]
    prepared = prepare_pairs(en, de, tokenizer, max_length=max_length, length_policy="drop")
    assert prepared.report.dropped == keep.count(False) > 0
    assert prepared.report.kept == len(prepared) == keep.count(True)
    kept_en = [a for a, k in zip(en, keep) if k]
    assert prepared.source_ids.to_list()[:5] == [processor.encode(a) + [EOS] for a in kept_en[:5]]
    assert max(prepared.target_ids.row_lengths().numpy()) <= max_length


def test_truncation_keeps_eos_last(tokenizer, processor, multi30k_val):
    en, de = multi30k_val
    max_length = 12
    prepared = prepare_pairs(en, de, tokenizer, max_length=max_length, length_policy="truncate")
    report = prepared.report
    long_src = sum(len(processor.encode(a)) > max_length - 1 for a in en)
    long_tgt = sum(len(processor.encode(b)) > max_length - 1 for b in de)
    either = sum(len(processor.encode(a)) > max_length - 1 or len(processor.encode(b)) > max_length - 1 for a, b in zip(en, de))
    assert (report.truncated_source, report.truncated_target, report.truncated) == (long_src, long_tgt, either)
    assert report.kept == len(en) and report.dropped == 0 and long_tgt > 0
    for i, row in enumerate(prepared.target_ids.to_list()):
        assert row[-1] == EOS and EOS not in row[:-1] and len(row) <= max_length
        assert row[:-1] == processor.encode(de[i])[: max_length - 1]
    for (source, target_in), target_out in make_dataset(prepared, batch_tokens=120, shuffle=False):
        for ids in (source.numpy(), target_out.numpy()):
            for row in _rows(ids):
                assert row[-1] == EOS
        assert (target_in.numpy()[:, 0] == BOS).all()


def _epoch_pairs(dataset):
    pairs = []
    for (source, target_in), target_out in dataset:
        src_rows, in_rows, out_rows = _rows(source.numpy()), _rows(target_in.numpy()), _rows(target_out.numpy())
        for s, ti, to in zip(src_rows, in_rows, out_rows):
            assert ti == (BOS,) + to[:-1]
            pairs.append((s, to))
    return pairs


def test_token_batches_respect_budget_and_yield_every_pair_once(val_prepared):
    expected = collections.Counter(
        zip(map(tuple, val_prepared.source_ids.to_list()), map(tuple, val_prepared.target_ids.to_list()))
    )
    widths = bucket_widths(int(max(val_prepared.source_ids.row_lengths().numpy().max(),
                                   val_prepared.target_ids.row_lengths().numpy().max())))
    dataset = make_dataset(val_prepared, batch_tokens=256, seed=1)
    orders = []
    for _ in range(2):  # two epochs: each complete, reshuffled
        batches = list(dataset)
        for (source, target_in), target_out in batches:
            b, s = source.shape
            t = target_out.shape[1]
            assert source.dtype == target_in.dtype == target_out.dtype == tf.int32
            assert target_in.shape == target_out.shape
            assert b * max(s, t) <= 256
            assert s in widths and t in widths  # bounded set of padded widths
        pairs = _epoch_pairs(batches)
        assert collections.Counter(pairs) == expected
        orders.append(pairs)
    assert orders[0] != orders[1]


def test_datasets_run_without_tf_data_autotuning(val_prepared):
    """Every epoch's new iterator is destroyed at its end; an autotuned one stalled training up to 60 s."""
    for dataset in (make_dataset(val_prepared, batch_tokens=256, seed=1),
                    make_dataset(val_prepared, batch_size=8, shuffle=False, prefetch=False),
                    make_dataset(val_prepared, batch_tokens=256, padding="fixed", epoch=3)):
        assert dataset.options().autotune.enabled is False
        assert dataset.options().deterministic is True


def test_fixed_batches_yield_every_pair_once(val_prepared):
    expected = collections.Counter(
        zip(map(tuple, val_prepared.source_ids.to_list()), map(tuple, val_prepared.target_ids.to_list()))
    )
    dataset = make_dataset(val_prepared, batch_size=64, padding="batch")
    sizes = [int(s.shape[0]) for (s, _), _ in dataset]
    assert sizes == [64] * 15 + [1014 - 15 * 64]
    assert collections.Counter(_epoch_pairs(dataset)) == expected
    ordered = _epoch_pairs(make_dataset(val_prepared, batch_size=100, shuffle=False))
    assert ordered == list(zip(map(tuple, val_prepared.source_ids.to_list()), map(tuple, val_prepared.target_ids.to_list())))


def test_seeded_order_is_deterministic(val_prepared):
    def first_batches(seed):
        return [b[1].numpy().tolist() for b in make_dataset(val_prepared, batch_tokens=512, seed=seed).take(3)]

    assert first_batches(7) == first_batches(7)
    assert first_batches(7) != first_batches(8)


def test_bucket_widths_and_count_real_tokens():
    assert bucket_widths(32) == [8, 9, 10, 11, 13, 15, 17, 19, 21, 24, 27, 30, 32]
    assert bucket_widths(5) == [5]
    assert bucket_widths(5, min_width=2) == [2, 3, 4, 5]
    assert int(count_real_tokens(tf.constant([[5, 3, 0, 0], [2, 7, 9, 3]]))) == 6
    with pytest.raises(ValueError, match="growth"):
        bucket_widths(32, growth=1.0)


def test_statistics_by_hand():
    batch = ((tf.constant([[5, 3, 0], [4, 4, 3]]), tf.constant([[2, 6, 0, 0], [2, 1, 1, 1]])),
             tf.constant([[6, 3, 0, 0], [1, 1, 1, 3]]))
    stats = dataset_statistics(tf.data.Dataset.from_tensors(batch))
    assert (stats["sentences"], stats["source_tokens"], stats["target_tokens"]) == (2, 5, 6)
    assert (stats["source_slots"], stats["target_slots"], stats["max_batch_tokens"]) == (6, 8, 8)
    assert stats["padding_fraction"] == pytest.approx(1 - 11 / 14)


def test_bad_arguments(val_prepared, tokenizer):
    with pytest.raises(ValueError, match="exactly one"):
        make_dataset(val_prepared, batch_tokens=256, batch_size=8)
    with pytest.raises(ValueError, match="exactly one"):
        make_dataset(val_prepared)
    with pytest.raises(ValueError, match="batch_tokens=10"):
        make_dataset(val_prepared, batch_tokens=10)
    with pytest.raises(ValueError, match="padding"):
        make_dataset(val_prepared, batch_size=8, padding="max")
    with pytest.raises(ValueError, match="longest"):
        make_dataset(val_prepared, batch_size=8, widths=[4, 8])
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        prepare_pairs(["a", "b"], ["c"], tokenizer, max_length=8)
    with pytest.raises(ValueError, match="length_policy"):
        prepare_pairs(["a"], ["c"], tokenizer, max_length=8, length_policy="cut")
    with pytest.raises(ValueError, match="max_length"):
        prepare_pairs(["a"], ["c"], tokenizer, max_length=1)
    with pytest.raises(ValueError, match="subword_samples must be an integer >= 0, got -1"):
        prepare_pairs(["a"], ["c"], tokenizer, max_length=8, subword_samples=-1)
    with pytest.raises(ValueError, match="subword_alpha must be > 0, got 0"):
        prepare_pairs(["a"], ["c"], tokenizer, max_length=8, subword_samples=1, subword_alpha=0)


def _reference_dataset(prepared, batch_tokens=None, batch_size=None, seed=0, shuffle=True, drop_remainder=False,
                       shuffle_buffer_size=None):
    """The former tf.data implementation (shuffle the pairs, group_by_window / padded_batch), padded per batch."""
    widths = tf.constant(bucket_widths(int(max(prepared.source_ids.row_lengths().numpy().max(),
                                                prepared.target_ids.row_lengths().numpy().max()))), tf.int32)
    dataset = tf.data.Dataset.from_tensor_slices((prepared.source_ids, prepared.target_ids))
    dataset = dataset.map(lambda s, t: (tf.identity(s), tf.identity(t)))
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer_size or len(prepared), seed=seed, reshuffle_each_iteration=True)
    if batch_tokens is None:
        return dataset.padded_batch(batch_size, padded_shapes=([None], [None]), drop_remainder=drop_remainder)
    sizes = tf.constant([batch_tokens // int(w) for w in widths.numpy()], tf.int64)

    def key_fn(source, target):
        length = tf.maximum(tf.size(source), tf.size(target))
        return tf.cast(tf.searchsorted(widths, tf.reshape(length, [1]), side="left")[0], tf.int64)

    return dataset.group_by_window(
        key_fn,
        lambda key, window: window.padded_batch(tf.gather(sizes, key), padded_shapes=([None], [None]),
                                                drop_remainder=drop_remainder),
        window_size_func=lambda key: tf.gather(sizes, key),
    )


def _strip(ids: np.ndarray) -> np.ndarray:
    """Removes all-0 trailing columns."""
    keep = int(np.flatnonzero((ids != 0).any(axis=0)).max()) + 1
    return ids[:, :keep]


def _batch_id(source_ids) -> bytes:
    return _strip(source_ids).tobytes()


def _incomplete_batches(prepared, batch_tokens=None, batch_size=None, drop_remainder=False, **unused):
    """How many incomplete (last-of-bucket) batches an epoch holds, counted by hand."""
    if drop_remainder:
        return 0
    if batch_tokens is None:
        return int(len(prepared) % batch_size != 0)
    longest = int(max(prepared.source_ids.row_lengths().numpy().max(), prepared.target_ids.row_lengths().numpy().max()))
    counts = _buckets_by_hand(prepared, bucket_widths(longest))
    return sum(count % (batch_tokens // width) != 0 for width, count in counts.items())


@pytest.mark.parametrize(
    "kwargs",
    [dict(batch_tokens=256, seed=3), dict(batch_tokens=700, seed=5, drop_remainder=True),
     dict(batch_tokens=300, shuffle=False), dict(batch_tokens=256, seed=1, shuffle_buffer_size=50),
     dict(batch_size=64, seed=2)],
)
def test_planned_batches_equal_group_by_window(val_prepared, kwargs):
    """An epoch's planned batches are those of shuffle + group_by_window, epoch after epoch.

    The full batches come in group_by_window's order; the incomplete last
    batch of each bucket, which group_by_window emits at the end of the
    epoch, comes at a drawn position instead (the same batches).
    """
    ours = make_dataset(val_prepared, padding="batch", **kwargs)
    reference = _reference_dataset(val_prepared, **kwargs)
    incomplete = _incomplete_batches(val_prepared, **kwargs)
    for _ in range(2):
        got, want = list(ours), list(reference)
        assert len(got) == len(want) > incomplete
        flushed = {_batch_id(ref_source.numpy()) for ref_source, _ in want[len(want) - incomplete:]}
        assert len(flushed) == incomplete
        got_full = [batch for batch in got if _batch_id(batch[0][0].numpy()) not in flushed]
        assert len(got_full) == len(want) - incomplete  # every flushed batch is planned, once
        for ((source, target_in), target_out), (ref_source, ref_target) in zip(got_full, want):
            np.testing.assert_array_equal(source.numpy(), _strip(ref_source.numpy()))
            np.testing.assert_array_equal(target_out.numpy(), _strip(ref_target.numpy()))
            assert (target_in.numpy()[:, 0] == BOS).all()


def test_incomplete_batches_are_spread_over_the_epoch(val_prepared):
    """Each bucket's incomplete batch comes at a drawn position, not all at the end of the epoch.

    With group_by_window every epoch would end with them, in increasing
    length: the updates just before an epoch-end checkpoint would be small
    batches of the longest sentences.
    """
    kwargs = dict(batch_tokens=256, seed=3)
    incomplete = _incomplete_batches(val_prepared, **kwargs)
    assert incomplete >= 5
    ours = make_dataset(val_prepared, padding="batch", **kwargs)
    reference = _reference_dataset(val_prepared, **kwargs)
    placements = []
    for _ in range(2):  # two epochs
        got, want = list(ours), list(reference)
        flushed = {_batch_id(source.numpy()) for source, _ in want[len(want) - incomplete:]}
        positions = [i for i, ((source, _), _) in enumerate(got) if _batch_id(source.numpy()) in flushed]
        assert len(positions) == incomplete
        assert positions != list(range(len(got) - incomplete, len(got)))  # group_by_window's place
        assert min(positions) < len(got) // 2
        placements.append(positions)
    assert placements[0] != placements[1]  # drawn anew with each epoch's permutation


def _buckets_by_hand(prepared, widths):
    """Non-empty bucket widths and pairs per bucket, from the ids with numpy."""
    longest = np.maximum(prepared.source_ids.row_lengths().numpy(), prepared.target_ids.row_lengths().numpy())
    counts = collections.Counter(next(w for w in widths if w >= n) for n in longest.tolist())
    return counts


@pytest.mark.parametrize("num_replicas", [1, 3])
def test_fixed_padding_one_shape_per_bucket(val_prepared, num_replicas):
    batch_tokens = 300
    longest = int(max(val_prepared.source_ids.row_lengths().numpy().max(),
                      val_prepared.target_ids.row_lengths().numpy().max()))
    widths = bucket_widths(longest)
    counts = _buckets_by_hand(val_prepared, widths)
    expected_rows = {w: max(batch_tokens // w // num_replicas, 1) * num_replicas for w in counts}
    dataset = make_dataset(val_prepared, batch_tokens=batch_tokens, padding="fixed", seed=4, num_replicas=num_replicas)
    shapes = collections.Counter()
    real_rows = collections.Counter()
    for (source, target_in), target_out in dataset:
        b, w = source.shape
        assert source.shape == target_in.shape == target_out.shape  # both sides [B_w, w]
        assert b == expected_rows[w] and b % num_replicas == 0
        shapes[(b, w)] += 1
        real = (target_out.numpy() != 0).any(axis=1)
        # Real rows first; padding rows are all 0 in all three tensors.
        assert real.tolist() == sorted(real.tolist(), reverse=True)
        for ids in (source, target_in, target_out):
            assert (ids.numpy()[~real] == 0).all() and (ids.numpy()[real] != 0).any(axis=1).all()
        real_rows[w] += int(real.sum())
    # One shape per non-empty bucket; each bucket holds its pairs, full batches except maybe the last.
    assert set(shapes) == {(expected_rows[w], w) for w in counts}
    assert real_rows == counts
    assert {w: n for (_, w), n in shapes.items()} == {w: -(-counts[w] // expected_rows[w]) for w in counts}
    # Every pair once, with the same ids as without fixed padding.
    expected = collections.Counter(
        zip(map(tuple, val_prepared.source_ids.to_list()), map(tuple, val_prepared.target_ids.to_list()))
    )
    pairs = []
    for (source, target_in), target_out in dataset:
        real = (target_out.numpy() != 0).any(axis=1)
        for s, ti, to in zip(_rows(source.numpy()[real]), _rows(target_in.numpy()[real]), _rows(target_out.numpy()[real])):
            assert ti == (BOS,) + to[:-1]
            pairs.append((s, to))
    assert collections.Counter(pairs) == expected
    # More shapes without it.
    assert len(dataset_statistics(make_dataset(val_prepared, batch_tokens=batch_tokens, seed=4))["shapes"]) > len(shapes)


def test_fixed_padding_of_sentence_batches(val_prepared):
    widths = [16, 32, 64, 128]
    dataset = make_dataset(val_prepared, batch_size=100, padding="fixed", widths=widths, shuffle=False)
    source_lengths = val_prepared.source_ids.row_lengths().numpy()
    target_lengths = val_prepared.target_ids.row_lengths().numpy()
    for i, ((source, target_in), target_out) in enumerate(dataset):
        longest = max(source_lengths[i * 100:(i + 1) * 100].max(), target_lengths[i * 100:(i + 1) * 100].max())
        width = next(w for w in widths if w >= longest)
        assert source.shape == target_in.shape == target_out.shape == (100, width)
    assert i == 10  # 1014 pairs: 10 full batches and one of 14 real rows padded to 100
    assert int((target_out.numpy() != 0).any(axis=1).sum()) == 14
    with pytest.raises(ValueError, match="num_replicas"):
        make_dataset(val_prepared, batch_tokens=300, padding="fixed", num_replicas=0)


def test_prepare_gives_whitespace_variants_the_ids_of_the_plain_form(tokenizer, multi30k_val):
    """Training data written with tabs, Unicode spaces or extra spaces is prepared as its plain form."""
    en, de = (side[:40] for side in multi30k_val)
    plain = prepare_pairs(en, de, tokenizer, max_length=200)

    def variant(i, s):
        space = ["\t", "\u00a0", "\u3000", "\u2009", "  ", " \u202f "][i % 6]
        return " \t" + s.replace(" ", space) + "\u3000 "

    written = prepare_pairs([variant(i, s) for i, s in enumerate(en)], [variant(i + 1, s) for i, s in enumerate(de)],
                            tokenizer, max_length=200)
    assert written.source_ids.to_list() == plain.source_ids.to_list()
    assert written.target_ids.to_list() == plain.target_ids.to_list()
    assert written.report.to_dict() == plain.report.to_dict()


def test_subword_samples_follow_the_best_segmentation_and_are_seeded(tokenizer, multi30k_val):
    en, de = (side[:100] for side in multi30k_val)
    n = len(en)
    plain = prepare_pairs(en, de, tokenizer, max_length=200)
    sampled = prepare_pairs(en, de, tokenizer, max_length=200, subword_samples=2, subword_alpha=0.4, seed=3)
    report = sampled.report
    assert len(sampled) == report.pairs == report.kept == 3 * n and report.segmentations == 3
    assert "300 pairs (100 x 3 segmentations)" in report.summary()
    for ids, plain_ids in ((sampled.source_ids, plain.source_ids), (sampled.target_ids, plain.target_ids)):
        rows = ids.to_list()
        assert rows[:n] == plain_ids.to_list()  # the best segmentation first, as without samples
        copies = [rows[c * n:(c + 1) * n] for c in range(3)]
        assert copies[1] != copies[0] and copies[2] != copies[1] and copies[2] != copies[0]
        for copy in copies[1:]:
            assert all(row[-1] == EOS and EOS not in row[:-1] for row in copy)
            assert tokenizer.decode(copy) == tokenizer.decode(copies[0])  # the same sentences
    assert report.source_tokens == sum(len(row) for row in sampled.source_ids.to_list())
    target_tokens = sum(len(row) for row in sampled.target_ids.to_list())
    assert report.target_tokens == target_tokens > 3 * plain.report.target_tokens  # drawn pieces are shorter on average
    again = prepare_pairs(en, de, tokenizer, max_length=200, subword_samples=2, subword_alpha=0.4, seed=3)
    assert again.target_ids.to_list() == sampled.target_ids.to_list()
    other = prepare_pairs(en, de, tokenizer, max_length=200, subword_samples=2, subword_alpha=0.4, seed=4)
    assert other.target_ids.to_list()[:n] == sampled.target_ids.to_list()[:n]
    assert other.target_ids.to_list()[n:] != sampled.target_ids.to_list()[n:]
    # An epoch holds every row once.
    batches = make_dataset(sampled, batch_tokens=512, shuffle=True, seed=0)
    assert sorted(_epoch_pairs(batches)) == sorted(zip(map(tuple, sampled.source_ids.to_list()),
                                                       map(tuple, sampled.target_ids.to_list())))
