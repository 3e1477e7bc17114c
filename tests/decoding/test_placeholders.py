"""Numbers, web and e-mail addresses are carried through a placeholder: the rules, training data, every search."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import placeholders
from keras_transformer.data.placeholders import PLACEHOLDER, mask_pair_str, mask_str, restore_str
from keras_transformer.decoding import Translator

# Inputs of our own, none of them from the report.
SPANNED = [
    "Room 4711 opens at 7:45, see https://rooms.example.org/4711?x=1.",
    "Write to ana.lopez+trip@correo.example.es or call 0034 912 555 010.",
    "The 2,500 runners passed km 21.1 at www.maraton.example.",
]
PLAIN = ["A woman rides a bike.", "", "   ", "Ein Hund läuft durch den Schnee."]


def test_the_python_rules_mask_and_restore_spans_in_order():
    masked, spans = mask_str(SPANNED[0])
    assert masked == f"Room {PLACEHOLDER} opens at {PLACEHOLDER}, see {PLACEHOLDER}."
    assert spans == ["4711", "7:45", "https://rooms.example.org/4711?x=1"]  # the final "." is no part of the URL
    assert mask_str(SPANNED[1])[1] == ["ana.lopez+trip@correo.example.es", "0034", "912", "555", "010"]
    assert mask_str(SPANNED[2])[1] == ["2,500", "21.1", "www.maraton.example"]
    for sentence in SPANNED + PLAIN:
        assert restore_str(*mask_str(sentence)) == sentence
    # Placeholders beyond the source's spans are dropped; spans without a placeholder are left out.
    assert restore_str(f"{PLACEHOLDER} und {PLACEHOLDER} {PLACEHOLDER}!", ["3", "4"]) == "3 und 4 !"
    assert restore_str("keine Zahl", ["3"]) == "keine Zahl"


def test_a_training_pair_is_masked_only_when_both_sides_hold_the_same_spans_in_order():
    assert mask_pair_str("Gate 12 at 9:30.", "Flugsteig 12 um 9:30.") == (
        f"Gate {PLACEHOLDER} at {PLACEHOLDER}.", f"Flugsteig {PLACEHOLDER} um {PLACEHOLDER}.")
    assert mask_pair_str("Gate 12 at 9:30.", "Um 9:30 an Flugsteig 12.") == (
        "Gate 12 at 9:30.", "Um 9:30 an Flugsteig 12.")  # another order: kept as it is
    assert mask_pair_str("Three dogs.", "Drei Hunde.") == ("Three dogs.", "Drei Hunde.")
    sources, targets = placeholders.mask_pairs(["5 cats", "7 birds"], ["5 Katzen", "sieben Vögel"])
    assert (sources, targets) == ([f"{PLACEHOLDER} cats", "7 birds"], [f"{PLACEHOLDER} Katzen", "sieben Vögel"])


def test_the_in_graph_rules_equal_the_python_ones():
    sentences = SPANNED + PLAIN + ["日本 2024 年", "x" * 3 + "1" * 40, "a\x00b 12"]
    masked, spans = placeholders.mask(tf.constant(sentences))
    assert [m.decode() for m in masked.numpy()] == [mask_str(s)[0] for s in sentences]
    assert [[x.decode() for x in row] for row in spans.to_list()] == [mask_str(s)[1] for s in sentences]
    outputs = [f"{PLACEHOLDER}{PLACEHOLDER}{PLACEHOLDER} a", "b", f"c {PLACEHOLDER}"] + [""] * (len(sentences) - 3)
    restored = placeholders.restore(tf.constant(outputs), spans).numpy()
    assert [r.decode() for r in restored] == [restore_str(o, mask_str(s)[1]) for o, s in zip(outputs, sentences)]
    pair = placeholders.mask_pair(tf.constant(["Gate 12 at 9:30.", "Gate 12 at 9:30."]),
                                  tf.constant(["Flugsteig 12 um 9:30.", "Um 9:30, Flugsteig 12."]))
    assert [[x.decode() for x in side.numpy()] for side in pair] == [
        list(p) for p in zip(mask_pair_str("Gate 12 at 9:30.", "Flugsteig 12 um 9:30."),
                             mask_pair_str("Gate 12 at 9:30.", "Um 9:30, Flugsteig 12."))]


class _NumberBlindCopier:
    """A model that writes its source back, except that every piece with a digit comes out as the piece of "x":
    a model that never learned to write numbers (the mangled digit strings of the issue)."""

    def __init__(self, tokenizer):
        pieces = [tokenizer.id_to_piece(tf.constant(i)).numpy().decode() for i in range(tokenizer.vocab_size)]
        blind = tokenizer.tokenize(tf.constant("x")).numpy().tolist()[-1]
        self._write = tf.constant([blind if any(c.isdigit() for c in p) else i for i, p in enumerate(pieces)],
                                  tf.int32)
        self.vocab_size, self.max_length = tokenizer.vocab_size, 64

    def encode(self, source_ids, training=False):
        return source_ids

    def init_cache(self, encoder_outputs, source_ids, max_length):
        return {"source": tf.gather(self._write, source_ids)}

    def decode_step(self, step_ids, step, cache, output_matrix=None):
        source = cache["source"]
        token = tf.gather(source, tf.minimum(step, tf.shape(source)[1] - 1), axis=1)
        token = tf.where((step >= tf.shape(source)[1]) | tf.equal(token, 0), 3, token)  # then EOS
        return tf.one_hot(token, self.vocab_size, on_value=10.0, off_value=-10.0), cache


@pytest.mark.parametrize("search", ["beam", "greedy", "sample", "n_best"])
def test_every_search_carries_the_spans_through_and_can_be_turned_off(tokenizer, search):
    assert tokenizer.placeholder_id > 0  # vocabularies are trained with the piece
    model = _NumberBlindCopier(tokenizer)
    kwargs = dict(max_length=64, beam_size=2, sampling_topk=1)
    on, off = Translator(model, tokenizer, **kwargs), Translator(model, tokenizer, placeholders=False, **kwargs)
    batch = tf.constant(SPANNED + ["A dog runs 3 km."])

    def run(translator):
        if search == "beam":
            out = translator.translate(batch)["translations"]
        elif search == "greedy":
            out = translator.translate_greedy(batch)["translations"]
        elif search == "sample":
            out = translator.translate_sampled(batch, tf.constant(1, tf.int64))["translations"]
        else:
            out = translator.translate_n_best(batch)["translations"][:, 0]
        return [t.decode("utf-8") for t in out.numpy()]

    def spans(sentences):
        return [mask_str(s)[1] for s in sentences]

    carried, mangled = run(on), run(off)
    assert spans(carried) == spans(batch.numpy().astype(str).tolist())  # every number and address, in order
    assert all(not any(ch.isdigit() for ch in t) for t in mangled)  # without them: no digit survives
    assert on.get_config()["placeholders"] and not off.get_config()["placeholders"]


def test_scoring_masks_a_pair_as_training_does(model, tokenizer):
    translator = Translator(model, tokenizer, max_length=32)
    plain = Translator(model, tokenizer, max_length=32, placeholders=False)
    masked = plain.score(tf.constant([f"Gate {PLACEHOLDER}."]), tf.constant([f"Flugsteig {PLACEHOLDER}."]))
    scored = translator.score(tf.constant(["Gate 12."]), tf.constant(["Flugsteig 12."]))
    np.testing.assert_allclose(scored["log_prob"].numpy(), masked["log_prob"].numpy(), rtol=1e-6)
    assert tokenizer.placeholder_id in scored["target_ids"].numpy()[0].tolist()


def test_the_savedmodel_carries_spans_through_as_the_translator_and_refuses_to_turn_them_off(model, tokenizer,
                                                                                             tmp_path):
    import json
    import os

    from keras_transformer.decoding.load import open_translator
    from keras_transformer.export import export_saved_model
    from keras_transformer.settings import RunError

    translator = Translator(model, tokenizer, max_length=32, extra_decode_length=5, beam_size=2)
    expected = [t.decode() for t in translator.translate(tf.constant(SPANNED))["translations"].numpy()]
    path = export_saved_model(translator, tmp_path / "export", version=1)
    config = json.loads(open(os.path.join(path, "assets.extra", "export_config.json"), encoding="utf-8").read())
    assert config["decoding"]["placeholders"] is True
    loaded = tf.saved_model.load(path)
    got = [t.decode() for t in loaded.signatures["serving_default"](tf.constant(SPANNED))["translations"].numpy()]
    assert got == expected
    with pytest.raises(RunError, match="placeholders"):
        open_translator(path, placeholders=False)


def test_training_pairs_are_masked_in_memory_and_in_prepared_shards(tokenizer):
    from keras_transformer.data import _tokenize
    from keras_transformer.data.pipeline import prepare_pairs

    sources, targets = ["Gate 12 at 9:30.", "Gate 12 at 9:30.", "Two dogs."], \
        ["Flugsteig 12 um 9:30.", "Um 9:30 an Flugsteig 12.", "Zwei Hunde."]
    expected_sources, expected_targets = placeholders.mask_pairs(sources, targets)
    assert expected_sources[0] != sources[0] and expected_sources[1:] == sources[1:]
    prepared = prepare_pairs(sources, targets, tokenizer, max_length=32)
    want = [tokenizer.encode([s])[0] + [3] for s in expected_sources]
    assert prepared.source_ids.to_list() == want
    assert prepared.target_ids.to_list() == [tokenizer.encode([t])[0] + [3] for t in expected_targets]
    assert tokenizer.placeholder_id in want[0] and tokenizer.placeholder_id not in want[1]
    _tokenize.init_worker(tokenizer.model_bytes)
    shard = _tokenize.tokenize_chunk(sources, targets, 32, "drop")
    records = np.frombuffer(shard["records"], "<i4")
    first = records[shard["offsets"][0] // 4: shard["offsets"][1] // 4]
    assert first[1: 1 + first[0]].tolist() == want[0]  # [S, source ids, target ids]
