"""Tests of keras_transformer.data.streaming and the epoch-indexed in-memory batches (exact resume, sharding)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.data.corpus_source import CorpusSource
from keras_transformer.data.epochs import StrategyLayout, stateless_order
from keras_transformer.data.pipeline import (
    bucket_widths,
    dataset_statistics,
    make_dataset,
    make_epoch_batches,
    prepare_pairs,
)
from keras_transformer.data.prepare import prepare_corpus
from keras_transformer.data.prepared import PreparedDataError
from keras_transformer.data.streaming import make_streaming_batches

EOS, BOS = 3, 2
PAIRS = 240


def _lines(path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def text(multi30k_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("text")
    en, de = _lines(multi30k_dir / "train.en")[:PAIRS], _lines(multi30k_dir / "train.de")[:PAIRS]
    (folder / "a.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (folder / "a.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    return folder, en, de


def _prepare(text, directory, num_shards):
    folder, _, _ = text
    return prepare_corpus(directory, CorpusSource.files(folder / "a.en", folder / "a.de"), vocab_size=300,
                          max_length=40, num_shards=num_shards, processes=1, chunk_pairs=8, log=lambda _: None)


@pytest.fixture(scope="module")
def corpus4(text, tmp_path_factory):
    return _prepare(text, tmp_path_factory.mktemp("p4") / "prep", 4)


@pytest.fixture(scope="module")
def expected_pairs(corpus4, text):
    """The kept pairs, tokenized by hand with the python SentencePiece processor."""
    _, en, de = text
    processor = spm.SentencePieceProcessor(model_file=corpus4.vocabulary_path)
    pairs = collections.Counter()
    for a, b in zip(en, de):
        s, t = tuple(processor.encode(a) + [EOS]), tuple(processor.encode(b) + [EOS])
        if len(s) <= 40 and len(t) <= 40:
            pairs[(s, t)] += 1
    assert sum(pairs.values()) == corpus4.num_pairs() > PAIRS // 2
    return pairs


def _rows(ids):
    rows = []
    for row in ids:
        n = int((row != 0).sum())
        assert (row[:n] != 0).all() and (row[n:] == 0).all()  # padding only on the right
        rows.append(tuple(int(x) for x in row[:n]))
    return rows


def _pairs(batches):
    """(pairs, number of all-padding batches) of a list of batches; checks target_in = BOS + target_out[:-1]."""
    pairs, empty = [], 0
    for (source, target_in), target_out in batches:
        source, target_in, target_out = source.numpy(), target_in.numpy(), target_out.numpy()
        real = (target_out != 0).any(axis=1)
        if not real.any():
            assert not source.any() and not target_in.any()
            empty += 1
            continue
        for s, ti, to in zip(_rows(source[real]), _rows(target_in[real]), _rows(target_out[real])):
            assert ti == (BOS,) + to[:-1]
            pairs.append((s, to))
    return pairs, empty


def test_one_worker_sees_every_pair_once_per_epoch(corpus4, expected_pairs):
    batches = make_streaming_batches(corpus4, batch_tokens=200, seed=3, shuffle_buffer_size=50, cycle_length=2)
    widths = batches.batching.widths
    orders = []
    for epoch in (0, 1):
        epoch_batches = list(batches.epoch(epoch))
        assert len(epoch_batches) == batches.steps_per_epoch
        for (source, target_in), target_out in epoch_batches:
            b, s = source.shape
            assert b * max(s, target_out.shape[1]) <= 200 and s in widths and target_out.shape[1] in widths
        pairs, empty = _pairs(epoch_batches)
        assert empty == 0 and collections.Counter(pairs) == expected_pairs
        orders.append(pairs)
    assert orders[0] != orders[1]  # reshuffled per epoch


def test_epochs_are_functions_of_seed_and_epoch(corpus4):
    def hashes(dataset):
        return [(s.numpy().tobytes(), t.numpy().tobytes()) for (s, _), t in dataset]

    a = make_streaming_batches(corpus4, batch_tokens=200, seed=3, shuffle_buffer_size=50)
    b = make_streaming_batches(corpus4, batch_tokens=200, seed=3, shuffle_buffer_size=50)  # rebuilt from scratch
    c = make_streaming_batches(corpus4, batch_tokens=200, seed=4, shuffle_buffer_size=50)
    epoch1 = hashes(a.epoch(1))
    assert epoch1 == hashes(b.epoch(1)) and epoch1 != hashes(c.epoch(1)) and epoch1 != hashes(a.epoch(0))
    # Epochs 1-2 without the first 5 steps (a resumed run) = the tail of the uninterrupted epochs.
    steps = a.steps_per_epoch
    resumed = hashes(b.dataset(1, 3, skip=5))
    assert resumed == (epoch1 + hashes(a.epoch(2)))[5:]
    assert int(b.dataset(1, 3, skip=5).cardinality()) == 2 * steps - 5
    with pytest.raises(ValueError, match="skip"):
        a.dataset(0, 1, skip=steps)


@pytest.mark.parametrize("num_shards", [4, 3])
def test_workers_read_their_own_shards_and_cover_the_corpus(text, tmp_path, num_shards, expected_pairs):
    corpus = _prepare(text, tmp_path / "prep", num_shards)
    union = collections.Counter()
    steps = set()
    for worker in (0, 1):
        batches = make_streaming_batches(corpus, batch_tokens=400, seed=1, layout=StrategyLayout(2, worker, 1),
                                         shuffle_buffer_size=32)
        assert batches.batching.batch_tokens == 200  # the global budget split over 2 replicas
        assert batches.worker_files[worker] == corpus.files()[worker::2]
        epoch = list(batches.epoch(0, worker))
        pairs, empty = _pairs(epoch)
        assert len(epoch) == batches.steps_per_epoch and empty == batches.padding_batches(worker)
        steps.add(len(epoch))
        union.update(pairs)
        # This worker's pairs are exactly those of its shards.
        own = collections.Counter()
        for path in batches.worker_files[worker]:
            for record in tf.data.TFRecordDataset(path):
                ids = np.frombuffer(record.numpy(), "<i4")
                own[(tuple(ids[1 : 1 + ids[0]].tolist()), tuple(ids[1 + ids[0] :].tolist()))] += 1
        assert collections.Counter(pairs) == own
    assert len(steps) == 1  # the same number of steps on both workers
    assert union == expected_pairs  # every pair once across the cluster, none twice
    if num_shards == 3:  # 2 shards against 1: the lighter worker pads with all-padding steps
        assert max(batches.padding_batches(w) for w in (0, 1)) > 0


def test_fixed_padding_and_local_replicas(corpus4, expected_pairs):
    batches = make_streaming_batches(corpus4, batch_tokens=400, padding="fixed", seed=2,
                                     layout=StrategyLayout(1, 0, 2))
    sizes = dict(zip(batches.batching.widths, batches.batching.sizes))
    epoch = list(batches.epoch(0))
    assert len(epoch) == 2 * batches.steps_per_epoch  # one element per local replica and step
    for (source, target_in), target_out in epoch:
        b, w = source.shape
        assert source.shape == target_in.shape == target_out.shape and b == sizes[w] == 200 // w
    pairs, _ = _pairs(epoch)
    assert collections.Counter(pairs) == expected_pairs


def test_streaming_padding_is_low_on_multi30k(multi30k_dir, tmp_path):
    """All of Multi30k train with the recipe's vocabulary (8,000 pieces) and 2,048-token batches: below 10% padding."""
    corpus = prepare_corpus(tmp_path / "prep", CorpusSource.multi30k("train", data_dir=multi30k_dir, download=False),
                            vocab_size=8000, max_length=128, num_shards=8, processes=1, log=lambda _: None)
    real = slots = 0
    for (source, _), target_out in make_streaming_batches(corpus, batch_tokens=2048, seed=0).epoch(0):
        real += int(np.count_nonzero(source)) + int(np.count_nonzero(target_out))
        slots += source.numpy().size + target_out.numpy().size
    assert real == sum(int(s["source_tokens"]) + int(s["target_tokens"]) for s in corpus.split("train")["shards"])
    streaming = 1 - real / slots
    memory = dataset_statistics(make_dataset(corpus.read_pairs("train"), batch_tokens=2048, seed=0))
    assert streaming < 0.10 and abs(streaming - memory["padding_fraction"]) < 0.005


def test_fewer_shards_than_workers_and_bad_budget(corpus4):
    with pytest.raises(ValueError, match="4 train shards for 5 workers"):
        make_streaming_batches(corpus4, batch_tokens=400, layout=StrategyLayout(5, 0, 1))
    with pytest.raises(ValueError, match="tokens per replica batch"):
        make_streaming_batches(corpus4, batch_tokens=60, layout=StrategyLayout(2, 0, 1))


def test_damaged_shard_is_named_after_a_read_error(corpus4, tmp_path):
    import shutil

    from keras_transformer.data.prepared import open_prepared

    folder = tmp_path / "copy"
    shutil.copytree(corpus4.directory, folder)
    shard = folder / "train-00002-of-00004.tfrecord"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0x5A
    shard.write_bytes(bytes(data))
    batches = make_streaming_batches(open_prepared(folder), batch_tokens=200, seed=0)
    with pytest.raises(tf.errors.DataLossError):
        list(batches.epoch(0))
    with pytest.raises(PreparedDataError, match=str(shard)):
        batches.check_data()


def test_stateless_order():
    order = stateless_order(tf.constant(10, tf.int64), tf.constant([1, 2], tf.int64)).numpy()
    assert sorted(order.tolist()) == list(range(10))
    windows = stateless_order(tf.constant(10, tf.int64), tf.constant([1, 2], tf.int64), window=4).numpy()
    assert [sorted(windows[i : i + 4].tolist()) for i in (0, 4)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert sorted(windows[8:].tolist()) == [8, 9]
    again = stateless_order(tf.constant(10, tf.int64), tf.constant([1, 2], tf.int64)).numpy()
    other = stateless_order(tf.constant(10, tf.int64), tf.constant([1, 3], tf.int64)).numpy()
    assert order.tolist() == again.tolist() != other.tolist()


def _reference_batches(prepared, order, batch_tokens):
    """group_by_window over the pairs in ``order`` (the former tf.data pipeline), each batch padded to its longest."""
    widths = tf.constant(bucket_widths(int(max(prepared.source_ids.row_lengths().numpy().max(),
                                                prepared.target_ids.row_lengths().numpy().max()))), tf.int32)
    sizes = tf.constant([batch_tokens // int(w) for w in widths.numpy()], tf.int64)
    rows = list(zip(*(
        [np.array(row, np.int32) for row in tf.gather(ids, order).to_list()]
        for ids in (prepared.source_ids, prepared.target_ids)
    )))
    dataset = tf.data.Dataset.from_generator(lambda: iter(rows), output_signature=(
        tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32)))

    def key_fn(source, target):
        length = tf.maximum(tf.size(source), tf.size(target))
        return tf.cast(tf.searchsorted(widths, tf.reshape(length, [1]), side="left")[0], tf.int64)

    return list(dataset.group_by_window(
        key_fn, lambda key, window: window.padded_batch(tf.gather(sizes, key), padded_shapes=([None], [None])),
        window_size_func=lambda key: tf.gather(sizes, key)))


def test_in_memory_epochs_from_seed_and_epoch(tokenizer, multi30k_val):
    en, de = multi30k_val
    prepared = prepare_pairs(en[:400], de[:400], tokenizer, max_length=200)
    batches = make_epoch_batches(prepared, batch_tokens=256, seed=5)
    epochs = [list(batches.epoch(e)) for e in (0, 1)]
    assert [len(e) for e in epochs] == [batches.steps_per_epoch] * 2
    widths = bucket_widths(int(max(prepared.source_ids.row_lengths().numpy().max(),
                                   prepared.target_ids.row_lengths().numpy().max())))

    def full(source, target):  # as many rows as its bucket's batches hold
        lengths = np.maximum((source != 0).sum(axis=1), (target != 0).sum(axis=1))
        width = next(w for w in widths if w >= lengths.max())
        return source.shape[0] == 256 // width

    for e, got in enumerate(epochs):
        order = stateless_order(tf.constant(400, tf.int64), tf.constant([5, e], tf.int64))
        want = [(s.numpy(), t.numpy()) for s, t in _reference_batches(prepared, order, 256)]
        got = [(source.numpy()[:, : int((source.numpy() != 0).any(0).sum())],
                target_out.numpy()[:, : int((target_out.numpy() != 0).any(0).sum())]) for (source, _), target_out in got]
        assert len(got) == len(want)
        # Full batches in group_by_window's order; each bucket's incomplete batch (which
        # group_by_window emits last) at its drawn position: the same batches.
        got_full, want_full = [b for b in got if full(*b)], [b for b in want if full(*b)]
        assert len(got_full) == len(want_full) and len(got_full) < len(got)
        for (source, target_out), (ref_source, ref_target) in zip(got_full, want_full):
            np.testing.assert_array_equal(source, ref_source)
            np.testing.assert_array_equal(target_out, ref_target)
        assert sorted(s.tobytes() for s, t in got if not full(s, t)) == sorted(
            s.tobytes() for s, t in want if not full(s, t))
    # make_dataset(epoch=e) is that epoch; a rebuilt object gives the same; a resumed range skips exactly.
    flat = [(s.numpy().tobytes(), t.numpy().tobytes()) for (s, _), t in epochs[0] + epochs[1]]
    again = make_epoch_batches(prepared, batch_tokens=256, seed=5)
    assert [(s.numpy().tobytes(), t.numpy().tobytes()) for (s, _), t in again.dataset(0, 2, skip=7)] == flat[7:]
    single = [(s.numpy().tobytes(), t.numpy().tobytes()) for (s, _), t in
              make_dataset(prepared, batch_tokens=256, seed=5, epoch=1)]
    assert single == flat[len(epochs[0]):]
