"""Input the vocabulary never saw: bounded output through the Translator and the SavedModel.

The rule (``keras_transformer/decoding/text.py``): a sentence with
unknown pieces (``unk``, byte-fallback bytes) and no known word is copied
through (whitespace folded), score 0, ids 0; otherwise the output holds at
most ``min(K + 1 + extra_decode_length, max_length)`` tokens, EOS included,
``K`` = known source pieces. Expectations are computed with the
``sentencepiece`` library and ``unicodedata``, not with the Translator.

Normal sentences must translate exactly as before the rule: the fixed-seed
tiny model's translations recorded with the code before it
(``data/translations_before.json``, written by ``_before_after.py``) are
compared with today's on real Multi30k test2016 lines.
"""

import importlib.util
import json
import os
import pathlib

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the loaded SavedModels)

from keras_transformer.decoding import Translator

HERE = pathlib.Path(__file__).resolve().parent
CHINESE = "你好世界，今天天气很好。"
EMOJI = "😀👍🐶"
MAX_LENGTH, EXTRA = 32, 10


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_keras_transformer_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _folded(text):
    """The copy the rule promises: whitespace runs as one space, none at the ends."""
    return " ".join(text.split())


def test_normal_sentences_translate_as_before(multi30k_dir, tmp_path):
    """Today's translations of the fixed-seed tiny model equal the ones recorded before the rule.

    First in this file: it seeds TensorFlow, which would drop the SentencePiece
    resources of translators traced earlier.
    """
    before = json.loads((HERE / "data" / "translations_before.json").read_text(encoding="utf-8"))
    now = _load("_before_after").translations(multi30k_dir, tmp_path)
    assert now["vocab_sha256"] == before["vocab_sha256"]  # the same (identity) vocabulary as then
    assert now["sources"] == before["sources"]
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    normal = [i for i, s in enumerate(now["sources"]) if processor.unk_id() not in processor.encode(s)]
    assert len(normal) >= 20
    for path in ("beam", "greedy", "xla_greedy", "model_dir"):
        for i in normal:
            assert now[path]["translations"][i] == before[path]["translations"][i], (path, now["sources"][i])
    for path in ("beam", "greedy"):
        for i in normal:
            assert now[path]["output_ids"][i] == before[path]["output_ids"][i], (path, i)
    # The unseen-script inputs looped before ("the the the ...") and are copied through now.
    unseen = [i for i, s in enumerate(now["sources"]) if not any(c.isascii() for c in s)]
    assert [now["sources"][i] for i in unseen] == _load("_before_after").UNSEEN
    for path in ("beam", "greedy", "xla_greedy", "model_dir"):
        for i in unseen:
            assert now[path]["translations"][i] == now["sources"][i]
            assert before[path]["translations"][i] != now["sources"][i]
    assert max(len(before["model_dir"]["translations"][i].split()) for i in unseen) >= 20


@pytest.fixture(scope="module")
def byte_fallback(multi30k_dir, tmp_path_factory):
    """(model, tokenizer, processor) with a 1000-piece byte-fallback vocabulary (unseen text becomes bytes)."""
    import keras

    from keras_transformer.config import get_preset
    from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece
    from keras_transformer.model import Transformer

    lines = []
    for lang in ("en", "de"):
        with open(multi30k_dir / f"train.{lang}", encoding="utf-8") as f:
            lines += [next(f).strip() for _ in range(3000)]
    path = train_sentencepiece(lines, tmp_path_factory.mktemp("bf_spm"), vocab_size=1000, byte_fallback=True)
    keras.utils.set_random_seed(7)
    model = Transformer(**get_preset("tiny", vocab_size=1000, max_length=MAX_LENGTH).model_kwargs())
    model((tf.constant([[5, 6, 3]]), tf.constant([[2, 7]])))
    return model, SubwordTokenizer(path), spm.SentencePieceProcessor(model_file=path)


def _known(processor, text):
    """(known pieces, all pieces) of ``text``, at most MAX_LENGTH - 1 (the Translator's cut)."""
    ids = processor.encode(text)[: MAX_LENGTH - 1]
    return sum(1 for i in ids if not (processor.is_unknown(i) or processor.is_byte(i))), len(ids)


def _length(ids):
    """Output tokens up to and including EOS."""
    ids = list(ids)
    return ids.index(3) + 1 if 3 in ids else len([i for i in ids if i])


@pytest.fixture(scope="module")
def translators(byte_fallback):
    model, tokenizer, _ = byte_fallback
    kwargs = dict(max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=2, length_penalty=0.6)
    return {"graph": Translator(model, tokenizer, **kwargs),
            "xla": Translator(model, tokenizer, jit_compile=True, **kwargs)}


@pytest.fixture(scope="module")
def saved_model(translators, tmp_path_factory):
    """The XLA translator exported and loaded: single-sentence greedy runs in XLA, the rest in graph mode."""
    from keras_transformer.export import export_saved_model

    path = export_saved_model(translators["xla"], tmp_path_factory.mktemp("bf_export"), version=1)
    with open(os.path.join(path, "assets.extra", "export_config.json"), encoding="utf-8") as f:
        assert "unknown_input" in json.load(f)["decoding"]
    return tf.saved_model.load(path)


def _paths(translators, saved_model):
    """(name, beam fn, greedy fn) for every path: Translator graph/XLA, SavedModel signatures."""
    def signature(name):
        return lambda batch: saved_model.signatures[name](sentences=batch)

    return [
        ("translator graph", translators["graph"].translate, translators["graph"].translate_greedy),
        ("translator xla", translators["xla"].translate, translators["xla"].translate_greedy),
        ("saved model", signature("serving_default"), signature("greedy")),
    ]


@pytest.mark.parametrize("text", [CHINESE, EMOJI, "  🐶\u3000🐱 ", "你好!"])
def test_unseen_script_without_known_words_is_copied_through(byte_fallback, translators, saved_model, text):
    _, tokenizer, processor = byte_fallback
    ids = processor.encode(text)
    assert any(processor.is_byte(i) for i in ids)  # the vocabulary never saw these characters
    assert not tokenizer.word_piece_mask[ids].any()
    for name, beam, greedy in _paths(translators, saved_model):
        for batch in ([text], [text, "A dog runs."]):  # alone (XLA greedy) and in a batch (graph mode)
            out = beam(tf.constant(batch))
            assert out["translations"].numpy()[0].decode("utf-8") == _folded(text), name
            assert out["scores"].numpy()[0] == 0.0, name
            g = greedy(tf.constant(batch))
            assert g["translations"].numpy()[0].decode("utf-8") == _folded(text), name
            assert not g["output_ids"].numpy()[0].any(), name
    ids_out = saved_model.signatures["token_ids"](sentences=tf.constant([text]))
    assert not ids_out["output_ids"].numpy().any() and ids_out["scores"].numpy().tolist() == [[0.0, 0.0]]


def test_before_the_rule_these_inputs_looped(byte_fallback):
    """Without the rule the random model writes to its limit: all pieces + 1 + extra tokens."""
    model, tokenizer, processor = byte_fallback
    translator = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=1)
    inputs = translator.source_ids(tf.constant([CHINESE, EMOJI]))
    old_limits = [min(len(processor.encode(t)[: MAX_LENGTH - 1]) + 1 + EXTRA, MAX_LENGTH) for t in (CHINESE, EMOJI)]
    ids = translator._greedy_core(inputs["source_ids"], tf.constant(old_limits)).numpy()
    assert [_length(row) for row in ids] == old_limits == [32, 24]
    assert inputs["copied"].numpy().tolist() == [True, True]
    assert inputs["max_decode_lengths"].numpy().tolist() == [1, 1]


@pytest.mark.parametrize("text", ["Ein Hund " + CHINESE + " läuft.", "A dog 🐶🐱🐭🐹 runs on the beach."])
def test_mixed_input_output_is_bounded_by_known_pieces(byte_fallback, translators, saved_model, text):
    _, _, processor = byte_fallback
    known, pieces = _known(processor, text)
    bound = min(known + 1 + EXTRA, MAX_LENGTH)
    assert bound < min(pieces + 1 + EXTRA, MAX_LENGTH)  # tighter than before the rule
    for name, beam, greedy in _paths(translators, saved_model):
        for batch in ([text], [text, "Two men."]):
            g = greedy(tf.constant(batch))["output_ids"].numpy()[0]
            assert 1 <= _length(g) <= bound, name
            out = beam(tf.constant(batch))
            assert out["translations"].numpy()[0].decode("utf-8") != _folded(text), name  # translated, not copied
    ids = saved_model.signatures["token_ids"](sentences=tf.constant([text]))["output_ids"].numpy()[0]
    assert all(_length(row) <= bound for row in ids if row.any())


def test_a_vocabulary_without_the_masks_changes_nothing(model, tokenizer):
    """A tokenizer-like object without piece masks: every piece counts as known, nothing is copied."""

    class Plain:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            if name in ("unknown_piece_mask", "word_piece_mask"):
                raise AttributeError(name)
            return getattr(self._inner, name)

    translator = Translator(model, Plain(tokenizer), max_length=20, extra_decode_length=5, beam_size=1)
    inputs = translator.source_ids(tf.constant([CHINESE, "A dog."]))
    pieces = tokenizer.encode([CHINESE, "A dog."])
    assert inputs["copied"].numpy().tolist() == [False, False]
    np.testing.assert_array_equal(inputs["max_decode_lengths"].numpy(), [min(len(p) + 6, 20) for p in pieces])
