"""A line without any letter or digit comes back as itself, in every search, the n-best list and the export."""

import tensorflow as tf

from keras_transformer.decoding import Translator

LINES = ["-", "?", " ... ", "— !", "「」", "* * *"]
EXPECTED = ["-", "?", "...", "— !", "「」", "* * *"]


def _texts(values):
    return [v.decode("utf-8") for v in values.numpy().tolist()]


def test_punctuation_alone_is_copied_through_by_every_search(model, tokenizer):
    translator = Translator(model, tokenizer, max_length=20, extra_decode_length=5, beam_size=2)
    batch = tf.constant(LINES + ["A dog runs."])
    beam = translator.translate(batch)
    assert _texts(beam["translations"])[:-1] == EXPECTED
    assert beam["scores"].numpy()[:-1].tolist() == [0.0] * len(LINES)
    assert _texts(translator.translate_greedy(batch)["translations"])[:-1] == EXPECTED
    # Keep the sampler in a name: a tf.function method holds its object weakly.
    sampler = Translator(model, tokenizer, max_length=20, sampling_topk=5)
    sampled = sampler.translate_sampled(batch, tf.constant(3, tf.int64))
    assert _texts(sampled["translations"])[:-1] == EXPECTED
    n_best = translator.translate_n_best(batch)
    assert [row[0].decode("utf-8") for row in n_best["translations"].numpy().tolist()][:-1] == EXPECTED


def test_the_export_copies_punctuation_lines_through(model, tokenizer, tmp_path):
    from keras_transformer.export import export_saved_model

    translator = Translator(model, tokenizer, max_length=20, extra_decode_length=5, beam_size=2)
    loaded = tf.saved_model.load(export_saved_model(translator, tmp_path / "export", version=1))
    assert _texts(loaded.signatures["serving_default"](tf.constant(LINES))["translations"]) == EXPECTED
