"""Validation BLEU during training, the best model by BLEU, and resumable early stopping."""

from __future__ import annotations

import glob
import itertools
import json
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import training
from keras_transformer.config import get_preset
from keras_transformer.data.pipeline import make_dataset, prepare_pairs
from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece
from keras_transformer.decoding.corpus import translate_lines
from keras_transformer.decoding.translator import Translator
from keras_transformer.evaluation import Scores, score_corpus
from keras_transformer.training.validation import EarlyStopping, ValidationBLEU, make_validation


def _lines(path, n):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


@pytest.fixture(scope="module")
def data(multi30k_dir, tmp_path_factory):
    """A 300-piece SentencePiece model, 400 training pairs and 16 validation pairs of real Multi30k."""
    train = _lines(multi30k_dir / "train.en", 400), _lines(multi30k_dir / "train.de", 400)
    valid = _lines(multi30k_dir / "val.en", 16), _lines(multi30k_dir / "val.de", 16)
    spm = train_sentencepiece(train[0] + train[1], tmp_path_factory.mktemp("spm"), vocab_size=300)
    return types.SimpleNamespace(spm=spm, train=train, valid=valid)


@pytest.fixture
def float32():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy(previous)


def _setup(data, seed=5, learning_rate_scale=0.01):
    """(model, tokenizer, config, train dataset, validation dataset): tiny preset, compiled, float32.

    The small learning rate keeps the model near its random start, whose greedy translations are not empty
    (a tiny model trained at full rate for a few dozen steps answers EOS first, an empty string).
    """
    keras.utils.set_random_seed(seed)
    tokenizer = SubwordTokenizer(data.spm)  # after seeding (it owns a tensorflow_text resource)
    config = get_preset("tiny", vocab_size=tokenizer.vocab_size, warmup_steps=10)
    model = training.build_model(config)
    training.compile_model(model, config, jit_compile=False, learning_rate_scale=learning_rate_scale)
    train = prepare_pairs(*data.train, tokenizer, config.max_length)
    valid = prepare_pairs(*data.valid, tokenizer, config.max_length)
    batching = dict(batch_tokens=config.batch_tokens, padding="bucket")
    return model, tokenizer, config, make_dataset(train, shuffle=False, **batching), make_dataset(valid, **batching)


def _independent(weights_model, tokenizer, config, sources, beam_size=1):
    """Greedy (or beam) translations by a Translator on a separate float32 model holding the same weights."""
    model = training.build_model(config)
    model.set_weights(weights_model.get_weights())
    translator = Translator(model, tokenizer, max_length=config.max_length,
                            extra_decode_length=config.extra_decode_length, beam_size=beam_size,
                            length_penalty=config.length_penalty)
    fn = translator.translate if beam_size > 1 else translator.translate_greedy
    return translate_lines(fn, sources, batch_size=64)


def _summaries(folder):
    """{tag: {step: value}} of the TensorBoard event files in ``folder``."""
    found = {}
    for path in glob.glob(str(folder / "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                found.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    return found


def test_validation_bleu_equals_an_independent_translation_and_keeps_the_best(data, tmp_path, float32):
    beam_size = 1
    model, tokenizer, config, train_ds, valid_ds = _setup(data)
    per_epoch = int(train_ds.reduce(0, lambda n, _: n + 1))
    sources, references = data.valid
    loss_stopping = EarlyStopping("val_loss", patience=5, model_dir=tmp_path)
    callback = ValidationBLEU(sources, references, tokenizer, config, max_sentences=12, beam_size=beam_size,
                              target_lang="de", model_dir=tmp_path)
    history = training.fit(model, train_ds, model_dir=tmp_path, epochs=2, validation_data=valid_ds, verbose=0,
                          validation_bleu=callback, early_stopping=loss_stopping)

    # One evaluation per epoch end, at the optimizer step, on the first 12 sentences.
    assert [e["step"] for e in callback.evaluations] == [per_epoch, 2 * per_epoch]
    assert [e["sentences"] for e in callback.evaluations] == [12, 12]
    # The last evaluation scored the final weights: an independent Translator gives the same translations.
    expected = _independent(model, tokenizer, config, sources[:12], beam_size)
    assert callback.hypotheses == expected and any(expected)
    scores = score_corpus(expected, references[:12], target_lang="de")
    assert callback.evaluations[-1]["bleu"] == scores.bleu and callback.evaluations[-1]["chrf"] == scores.chrf
    assert scores.chrf > 0
    # Keras callbacks and the History see val_bleu / val_chrf; val_loss early stopping saw each epoch.
    assert history.history["val_bleu"] == [e["bleu"] for e in callback.evaluations]
    assert history.history["val_chrf"] == [e["chrf"] for e in callback.evaluations]
    assert [r["value"] for r in loss_stopping.history] == pytest.approx(history.history["val_loss"])
    # TensorBoard: bleu and chrf at the training step, in the logs/ folder of fit.
    logged = _summaries(tmp_path / "logs" / "validation")
    assert logged["bleu"] == pytest.approx({e["step"]: e["bleu"] for e in callback.evaluations})
    assert logged["chrf"] == pytest.approx({e["step"]: e["chrf"] for e in callback.evaluations})
    assert "epoch_loss" in logged  # Keras' own validation scalars share the folder

    # The best model by BLEU (the first of equal scores) reloads and translates as scored.
    best = json.loads((tmp_path / "best_bleu.weights.h5.json").read_text())
    first_best = max(callback.evaluations, key=lambda e: e["bleu"])
    assert (best["step"], best["val_bleu"], best["val_chrf"]) == (
        first_best["step"], first_best["bleu"], first_best["chrf"]
    )
    assert best["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    reloaded = training.build_model(config)
    reloaded.load_weights(tmp_path / "best_bleu.weights.h5")
    hypotheses = _independent(reloaded, tokenizer, config, sources[:12], beam_size)
    assert hypotheses == (tmp_path / "best_bleu.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert score_corpus(hypotheses, references[:12]).bleu == best["val_bleu"]
    assert not glob.glob(str(tmp_path / "tmp-*"))  # written atomically, nothing left behind


class ScriptedBLEU(ValidationBLEU):
    """A ValidationBLEU whose scores follow a script (to test what is done with them)."""

    def __init__(self, values, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.values = iter(values)

    def translate_and_score(self):
        value = next(self.values)
        scores = Scores(bleu=value, chrf=value / 2, bleu_signature="tok:13a", chrf_signature="chrF",
                        num_sentences=len(self.sources))
        return scores, [f"step {int(self.model.optimizer.iterations)}"] * len(self.sources)


def test_early_stopping_on_bleu_stops_after_the_patience_and_stays_stopped(data, tmp_path, float32, capsys):
    model, tokenizer, config, train_ds, _ = _setup(data)
    assert int(train_ds.reduce(0, lambda n, _: n + 1)) > 10  # the stop comes mid-epoch
    sources, references = data.valid
    stopping = EarlyStopping("val_bleu", patience=2, model_dir=tmp_path)
    # Every 2 steps: 10, 12 (best), 11, 12 (equal is no improvement): the patience of 2 is used up at step 8.
    callback = ScriptedBLEU([10.0, 12.0, 11.0, 12.0, 99.0], sources, references, tokenizer, config,
                            every_steps=2, model_dir=tmp_path, early_stopping=stopping)
    training.fit(model, train_ds, model_dir=tmp_path, epochs=3, verbose=0, validation_bleu=callback,
                early_stopping=stopping)
    assert int(model.optimizer.iterations) == 8
    assert [(r["step"], r["value"]) for r in stopping.history] == [(2, 10.0), (4, 12.0), (6, 11.0), (8, 12.0)]
    assert "early stopping: val_bleu did not improve in 2 evaluations (best 12 at step 4); stopping at step 8" in (
        capsys.readouterr().out
    )
    best = json.loads((tmp_path / "best_bleu.weights.h5.json").read_text())
    assert (best["step"], best["val_bleu"]) == (4, 12.0)
    assert (tmp_path / "best_bleu.hyp.txt").read_text().splitlines() == ["step 4"] * len(sources)
    state = json.loads((tmp_path / "checkpoints" / "state.json").read_text())
    # The position is checkpointed, its epoch numbered as the console does: batch 8 of epoch 1, not complete.
    assert (state["epoch"], state["batch"], state["epoch_complete"], state["step"]) == (1, 8, False, 8)

    # Running the same training again restores step 8 and trains nothing more.
    model, tokenizer, config, train_ds, _ = _setup(data)
    again = EarlyStopping("val_bleu", patience=2, model_dir=tmp_path)
    callback = ScriptedBLEU([50.0], sources, references, tokenizer, config, every_steps=2, model_dir=tmp_path,
                            early_stopping=again)
    training.fit(model, train_ds, model_dir=tmp_path, epochs=3, verbose=0, validation_bleu=callback,
                early_stopping=again)
    assert int(model.optimizer.iterations) == 8 and callback.evaluations == []
    assert "this run stopped at step 8" in capsys.readouterr().out


def test_beam_search_validation_equals_an_independent_beam_search(data, tmp_path, float32):
    model, tokenizer, config, _, _ = _setup(data)
    sources, references = data.valid
    callback = ValidationBLEU(sources, references, tokenizer, config, beam_size=2, length_penalty=1.0,
                              model_dir=tmp_path, tensorboard=False)
    callback.set_model(model)
    record = callback.evaluate(epoch=0)
    assert callback.search == "beam search (beam 2, alpha 1.0)"
    model_copy = training.build_model(config)
    model_copy.set_weights(model.get_weights())
    translator = Translator(model_copy, tokenizer, max_length=config.max_length,
                            extra_decode_length=config.extra_decode_length, beam_size=2, length_penalty=1.0)
    expected = translate_lines(translator.translate, sources, batch_size=64)
    assert callback.hypotheses == expected and any(expected)
    scores = score_corpus(expected, references)
    assert (record["bleu"], record["chrf"], record["sentences"], record["step"]) == (scores.bleu, scores.chrf, 16, 0)
    assert json.loads((tmp_path / "best_bleu.weights.h5.json").read_text())["search"] == callback.search


def _fake_model(step):
    return types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=step), stop_training=False)


def test_early_stopping_on_loss_counts_epochs_without_improvement(tmp_path):
    stopping = EarlyStopping("val_loss", patience=2, min_delta=0.01)
    model = _fake_model(0)
    stopping.set_model(model)
    stopping.on_train_begin()
    # 2.90 improves on 3.00; 2.895 is within min_delta (no improvement), 2.95 is worse: stop after the 4th epoch.
    for epoch, loss in enumerate([3.00, 2.90, 2.895, 2.95]):
        assert not model.stop_training
        model.optimizer.iterations = 10 * (epoch + 1)
        stopping.on_epoch_end(epoch, {"loss": 1.0, "val_loss": loss})
    assert model.stop_training and stopping.best == {"step": 20, "epoch": 2, "value": 2.90}  # the console's "Epoch 2"
    assert stopping.mode == "min" and EarlyStopping("val_bleu").mode == "max"


def test_early_stopping_resumes_from_the_restored_step(tmp_path):
    history = [{"step": s, "epoch": 0, "value": v} for s, v in [(2, 5.0), (4, 7.0), (6, 6.0), (8, 6.5)]]
    (tmp_path / "early_stopping.json").write_text(json.dumps({"monitor": "val_bleu", "history": history}))
    stopping = EarlyStopping("val_bleu", patience=2, model_dir=tmp_path)
    stopping.restore(5)  # the checkpoint of step 5 was restored: the evaluations at 6 and 8 are made again
    assert [r["step"] for r in stopping.history] == [2, 4] and stopping.wait == 0 and not stopping.exhausted
    saved = json.loads((tmp_path / "early_stopping.json").read_text())
    assert [r["step"] for r in saved["history"]] == [2, 4]
    with pytest.raises(ValueError, match="early stopping on 'val_bleu', not 'val_loss'"):
        EarlyStopping("val_loss", model_dir=tmp_path).restore(5)


def test_the_time_budget_leaves_validation_out():
    for excluded, stopped in ((None, True), (lambda: 1e9, False)):
        budget = training.TimeBudget(0.0, excluded)
        budget.set_model(_fake_model(0))
        budget.on_train_begin()
        budget.on_train_batch_end(0)
        assert budget.stopped_early is stopped


def test_the_time_budget_cools_the_learning_rate_down_to_zero_over_its_last_fraction(monkeypatch):
    from keras_transformer.training import fitting

    config = get_preset("tiny")
    model = training.compile_model(training.build_model(config), config, jit_compile=False, cooldown=True)
    clock = [1000.0]
    monkeypatch.setattr(fitting.time, "monotonic", lambda: clock[0])
    budget = training.TimeBudget(100.0, cooldown_fraction=0.3)
    budget.set_model(model)
    budget.on_train_begin()
    eq3 = float(training.WarmupSchedule(config.d_model, config.warmup_steps)(0))
    # 1 until 70 s of the 100, then linear: 0.5 at 85 s, 0 at 100 s (and the budget stops training).
    for spent, factor in ((0.0, 1.0), (70.0, 1.0), (85.0, 0.5), (94.0, 0.2), (100.0, 0.0)):
        clock[0] = 1000.0 + spent
        budget.on_train_batch_end(0)
        assert float(model.optimizer.learning_rate) == pytest.approx(factor * eq3, rel=1e-5)
        assert budget.stopped_early is (spent >= 100.0)

    plain = training.compile_model(training.build_model(config), config, jit_compile=False)
    budget = training.TimeBudget(100.0, cooldown_fraction=0.3)
    budget.set_model(plain)
    with pytest.raises(ValueError, match=r"compile_model\(..., cooldown=True\)"):
        budget.on_train_begin()
    with pytest.raises(ValueError, match="cooldown_fraction must be in"):
        training.TimeBudget(100.0, cooldown_fraction=1.5)


def test_bad_settings_are_named(data):
    tokenizer = SubwordTokenizer(data.spm)
    config = get_preset("tiny", vocab_size=tokenizer.vocab_size)
    sources, references = data.valid
    with pytest.raises(ValueError, match="16 validation sources but 15 references"):
        ValidationBLEU(sources, references[:-1], tokenizer, config)
    with pytest.raises(ValueError, match="every_steps must be an int >= 0"):
        ValidationBLEU(sources, references, tokenizer, config, every_steps=-1)
    with pytest.raises(ValueError, match="unknown BLEU tokenizer"):
        ValidationBLEU(sources, references, tokenizer, config, tokenize="words")
    with pytest.raises(ValueError, match="not 'val_loss'"):
        ValidationBLEU(sources, references, tokenizer, config, early_stopping=EarlyStopping("val_loss"))
    with pytest.raises(ValueError, match="patience must be an int >= 1"):
        EarlyStopping("val_bleu", patience=0)
    valid = types.SimpleNamespace(sources=sources, targets=references)
    with pytest.raises(ValueError, match="needs a validation set"):
        make_validation(None, tokenizer, config, model_dir=None, early_stopping_patience=3)
    with pytest.raises(ValueError, match="max_sentences must be > 0"):
        make_validation(valid, tokenizer, config, model_dir=None, max_sentences=0, early_stopping_patience=3)
    callback, stopping = make_validation(valid, tokenizer, config, model_dir=None, max_sentences=0,
                                         early_stopping_patience=3, early_stopping_metric="loss")
    assert callback is None and stopping.monitor == "val_loss"
    callback, stopping = make_validation(valid, tokenizer, config, model_dir=None, max_sentences=5,
                                         early_stopping_patience=2, target_lang="zh")
    assert len(callback.sources) == 5 and callback.bleu_tokenizer == "zh" and callback.early_stopping is stopping
    assert stopping.fed and stopping.monitor == "val_bleu"
