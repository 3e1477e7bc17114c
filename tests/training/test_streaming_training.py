"""Training on prepared shards: every pair once per epoch with 1 and 2 workers, exact resume after SIGKILL.

Each run is tests/training/_workers.py ``stream`` in a subprocess (a
``MultiWorkerMirroredStrategy`` cluster must be set up before TensorFlow
starts). The worker logs every batch its input pipeline hands to Keras (its
position in the run's dataset and a hash of each real pair in it) and every
optimizer step; the expected pairs are tokenized here, by hand, with the
SentencePiece processor.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import sentencepiece as spm

from keras_transformer.data.corpus_source import CorpusSource
from keras_transformer.data.prepare import prepare_corpus
from keras_transformer.training import checkpoints as ckpt

WORKER = pathlib.Path(__file__).with_name("_workers.py")
PAIRS, MAX_LENGTH, BATCH_TOKENS, WIDTHS, EPOCHS = 160, 48, 512, "16,32,48", 3
EOS = 3


def _hash(source: list[int], target: list[int]) -> str:
    """The pair hash of _workers.pair_hashes, from ids computed here."""
    key = np.concatenate([source, [-1], target]).astype("<i4").tobytes()
    return hashlib.sha1(key).hexdigest()[:16]


def _records(path: pathlib.Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def prepared(multi30k_dir, tmp_path_factory):
    """160 real pairs in 4 shards, and the hash of every kept pair (tokenized by hand)."""
    folder = tmp_path_factory.mktemp("stream")
    en = (multi30k_dir / "train.en").read_text(encoding="utf-8").splitlines()[:PAIRS]
    de = (multi30k_dir / "train.de").read_text(encoding="utf-8").splitlines()[:PAIRS]
    (folder / "a.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (folder / "a.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    corpus = prepare_corpus(folder / "prep", CorpusSource.files(folder / "a.en", folder / "a.de"), vocab_size=300,
                            max_length=MAX_LENGTH, num_shards=4, processes=1, chunk_pairs=8, log=lambda _: None)
    processor = spm.SentencePieceProcessor(model_file=corpus.vocabulary_path)
    expected = collections.Counter()
    for a, b in zip(en, de):
        s, t = processor.encode(a) + [EOS], processor.encode(b) + [EOS]
        if len(s) <= MAX_LENGTH and len(t) <= MAX_LENGTH:
            expected[_hash(s, t)] += 1
    assert sum(expected.values()) == corpus.num_pairs() > PAIRS // 2
    return corpus, expected


def _command(log, corpus, model_dir):
    return [sys.executable, str(WORKER), "stream", str(log), corpus.directory, str(model_dir), str(EPOCHS),
            str(BATCH_TOKENS), WIDTHS]


def _env(**extra):
    return dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", **extra)


def _batches(records: list[dict], steps: int) -> dict[int, list[str]]:
    """Global step index -> the pair hashes of the batch at that index (from the probe's records)."""
    out = {}
    for r in records:
        if "position" in r:
            index = r["first_epoch"] * steps + r["skip"] + r["position"]
            assert out.setdefault(index, r["pairs"]) == r["pairs"]  # a position is one batch
            out[index] = r["pairs"]
    return out


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def uninterrupted(prepared, tmp_path_factory):
    """One worker trained for EPOCHS epochs without interruption: (steps per epoch, step index -> pair hashes)."""
    corpus, _ = prepared
    folder = tmp_path_factory.mktemp("uninterrupted")
    log = folder / "log.jsonl"
    run = subprocess.run(_command(log, corpus, folder / "model"), env=_env(), capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    records = _records(log)
    steps = records[-1]["steps_per_epoch"]
    assert records[-1]["step"] == EPOCHS * steps
    return steps, _batches(records, steps)


def test_every_pair_once_per_epoch_with_one_and_two_workers(prepared, uninterrupted, tmp_path):
    corpus, expected = prepared
    epochs = EPOCHS

    # One worker.
    steps, batches = uninterrupted
    assert sorted(batches) == list(range(epochs * steps))
    orders = []
    for epoch in range(epochs):
        pairs = [h for i in range(epoch * steps, (epoch + 1) * steps) for h in batches[i]]
        assert collections.Counter(pairs) == expected  # every pair once, none twice
        orders.append(pairs)
    assert orders[0] != orders[1]  # a new order each epoch

    # Two localhost workers (TF_CONFIG): each reads its own two shards.
    cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
    logs, procs = [], []
    for index in range(2):
        logs.append(tmp_path / f"worker{index}.jsonl")
        env = _env(TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen(_command(logs[-1], corpus, tmp_path / "two"), env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        assert proc.returncode == 0, err[-4000:]
    results = [_records(path) for path in logs]
    steps = results[0][-1]["steps_per_epoch"]
    assert results[1][-1]["steps_per_epoch"] == steps  # the same number of steps on both workers
    assert [r[-1]["step"] for r in results] == [epochs * steps] * 2
    files = corpus.files()
    for epoch in range(epochs):
        union = collections.Counter()
        for index, records in enumerate(results):
            assert {r["worker"] for r in records} == {index}
            batches = _batches(records, steps)
            assert sorted(batches) == list(range(epochs * steps))
            pairs = collections.Counter(h for i in range(epoch * steps, (epoch + 1) * steps) for h in batches[i])
            # Exactly the pairs of this worker's shards (0 and 2, or 1 and 3), read here from the files.
            own = collections.Counter()
            for path in files[index::2]:
                for record in _tfrecords(path):
                    ids = np.frombuffer(record, "<i4")
                    own[_hash(ids[1 : 1 + ids[0]].tolist(), ids[1 + ids[0] :].tolist())] += 1
            assert pairs == own
            union += pairs
        assert union == expected  # the union is the corpus: every pair once across the cluster, none twice


def _tfrecords(path):
    import tensorflow as tf

    return [record.numpy() for record in tf.data.TFRecordDataset(path)]


def test_sigkill_mid_epoch_then_resume_sees_the_batches_of_an_uninterrupted_run(prepared, uninterrupted, tmp_path):
    corpus, _ = prepared
    epochs = EPOCHS
    steps, reference = uninterrupted

    log, model_dir = tmp_path / "log.jsonl", tmp_path / "run"
    command = _command(log, corpus, model_dir)
    first = subprocess.Popen(command, env=_env(WORKER_SLEEP="0.3"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # kill in epoch 1 (of 0, 1, 2), after at least two of its steps
        if len([r for r in _records(log) if r.get("epoch") == 1]) >= 2:
            break
        assert first.poll() is None, first.stderr.read().decode()[-3000:]
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    state = ckpt.read_state(model_dir / "checkpoints")
    assert state.epoch == 1 and 1 <= state.batch < steps and state.step == steps + state.batch

    second = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    killed = _batches([r for r in _records(log) if r["pid"] == first.pid], steps)
    resumed_records = [r for r in _records(log) if r["pid"] != first.pid]
    resumed = _batches(resumed_records, steps)
    # The resumed run reads from the step after the checkpoint to the end, each step once ...
    assert sorted(resumed) == list(range(state.step, epochs * steps))
    optimizer_steps = [r["step"] for r in resumed_records if "step" in r and "done" not in r]
    assert optimizer_steps == list(range(state.step + 1, epochs * steps + 1))
    # ... and what was trained, before and after the kill, is the uninterrupted run's sequence of batches.
    trained = [killed[i] for i in range(state.step)] + [resumed[i] for i in range(state.step, epochs * steps)]
    assert trained == [reference[i] for i in range(epochs * steps)]
    assert resumed_records[-1]["done"] and resumed_records[-1]["step"] == epochs * steps
