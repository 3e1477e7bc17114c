"""Ensembles: models with one vocabulary decoded as one, their log-probabilities averaged at each step."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import Translator
from keras_transformer.decoding.ensemble import Ensemble, load_ensemble
from keras_transformer.settings import RunError

SENTENCES = ["A dog runs in the park.", "Two men are playing soccer.", "", "A woman in a red coat sings.",
             "Kinder spielen im Wasser.", "A man rides a bike down a hill."]
KWARGS = dict(max_length=20, extra_decode_length=5, beam_size=2, length_penalty=0.6)


def _texts(result):
    return [t.decode("utf-8") for t in result["translations"].numpy().tolist()]


def _perturbed_copy(model, scale=0.3, seed=7):
    """Another model with the same architecture and vocabulary: the weights plus noise."""
    copy = type(model).from_config(model.get_config())
    copy((tf.constant([[5, 6, 3]]), tf.constant([[2, 7]])))
    rng = np.random.default_rng(seed)
    copy.set_weights([w + rng.normal(0, scale, w.shape).astype(w.dtype) for w in model.get_weights()])
    return copy


def test_an_ensemble_of_one_model_and_of_two_copies_translates_as_that_model(model, tokenizer):
    batch = tf.constant(SENTENCES)
    alone = Translator(model, tokenizer, **KWARGS)
    for ensemble in (Ensemble([model]), Ensemble([model, model])):
        together = Translator(ensemble, tokenizer, **KWARGS)
        assert _texts(together.translate(batch)) == _texts(alone.translate(batch))
        assert _texts(together.translate_greedy(batch)) == _texts(alone.translate_greedy(batch))
        np.testing.assert_allclose(together.score(batch, batch)["log_prob"].numpy(),
                                   alone.score(batch, batch)["log_prob"].numpy(), rtol=1e-4, atol=1e-4)


def test_each_step_scores_the_mean_of_the_members_log_probabilities(model, tokenizer):
    other = _perturbed_copy(model)
    ensemble = Ensemble([model, other])
    source = tf.constant([[5, 9, 17, 3], [11, 4, 3, 0]])
    cache = ensemble.init_cache(ensemble.encode(source), source)
    step_ids = tf.fill([2], tokenizer.bos_id)
    scores, cache = ensemble.decode_step(step_ids, 0, cache)
    expected = []
    for member in (model, other):
        member_cache = member.init_cache(member.encode(source), source)
        logits, _ = member.decode_step(step_ids, 0, member_cache)
        expected.append(tf.nn.log_softmax(logits).numpy())
    np.testing.assert_allclose(scores.numpy(), np.mean(expected, axis=0), atol=1e-5)
    assert not np.allclose(expected[0], expected[1], atol=1e-3)  # the members do differ
    assert set(cache) == {"member_0", "member_1"} and ensemble.vocab_size == model.vocab_size


def test_folders_with_another_vocabulary_are_refused(model, multi30k_dir, tmp_path, make_model_folder):
    from keras_transformer.data.tokenizer import train_sentencepiece
    from keras_transformer.decoding.load import open_translator

    spm_a, spm_b = tmp_path / "a", tmp_path / "b"
    spm_a.mkdir(), spm_b.mkdir()
    lines = (multi30k_dir / "train.en").read_text(encoding="utf-8").splitlines()[:600]
    train_sentencepiece(lines, spm_a, vocab_size=200)
    train_sentencepiece(lines[::-1][:500], spm_b, vocab_size=200)
    first = make_model_folder(tmp_path / "first", model, spm_a / "spm.model")
    second = make_model_folder(tmp_path / "second", model, spm_b / "spm.model")
    with pytest.raises(RunError, match="has another vocabulary than .*first.*share one vocabulary"):
        load_ensemble([first, second])
    with pytest.raises(RunError, match="share one vocabulary"):
        open_translator(first, ensemble=[second])


def test_an_ensemble_savedmodel_translates_in_a_fresh_process_with_tensorflow_alone(model, tokenizer, tmp_path):
    from keras_transformer.export import export_saved_model

    ensemble = Ensemble([model, _perturbed_copy(model)])
    translator = Translator(ensemble, tokenizer, **KWARGS)
    expected = _texts(translator.translate(tf.constant(SENTENCES)))
    single = Translator(model, tokenizer, **KWARGS)  # in a name: tf.function methods hold it weakly
    assert expected != _texts(single.translate(tf.constant(SENTENCES)))
    path = export_saved_model(translator, tmp_path / "export", version=1)
    config = json.loads(open(os.path.join(path, "assets.extra", "export_config.json"), encoding="utf-8").read())
    assert len(config["model_config"]["members"]) == 2
    script = (
        "import json, sys; import tensorflow as tf; import tensorflow_text\n"
        f"m = tf.saved_model.load({path!r})\n"
        f"out = m.signatures['serving_default'](tf.constant({SENTENCES!r}))\n"
        "print(json.dumps({'t': [t.decode() for t in out['translations'].numpy().tolist()],"
        " 'kt': any(n.startswith('keras_transformer') for n in sys.modules),"
        " 'keras': 'keras' in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["t"] == expected and not result["kt"]
