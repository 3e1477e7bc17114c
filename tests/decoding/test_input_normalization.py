"""A sentence written with tabs, Unicode spaces, repeated or surrounding spaces translates like its plain form.

Through the Python Translator (graph mode and XLA) and through the session's
exported SavedModel (``_shared.py``: version 1 plain, version 2 XLA), on real
Multi30k test2016 lines: same source ids, same output ids, same translations
and scores. The vocabulary is the session's, trained with the package's
default normalization (SentencePiece ``nmt_nfkc``, stored in the model).
"""

import importlib.util
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the loaded SavedModels)

from keras_transformer.decoding import Translator

HERE = os.path.dirname(os.path.abspath(__file__))


def _shared():
    spec = importlib.util.spec_from_file_location("_keras_transformer_shared_loader", os.path.join(HERE, "_shared.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load()


shared = _shared()

VARIANTS = {
    "tabs": lambda s: s.replace(" ", "\t"),
    "no-break spaces": lambda s: s.replace(" ", "\u00a0"),
    "ideographic spaces": lambda s: s.replace(" ", "\u3000"),
    "thin spaces": lambda s: s.replace(" ", "\u2009"),
    "repeated spaces": lambda s: s.replace(" ", "   "),
    "mixed": lambda s: s.replace(" ", " \t\u00a0\u202f", 2).replace(" ", "\u3000"),
    "surrounding whitespace": lambda s: "\t \u00a0" + s + " \u3000\n",
}


@pytest.fixture(scope="module")
def lines(multi30k_dir):
    with open(multi30k_dir / "test2016.en", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(6)]


@pytest.fixture(scope="module")
def exported(model, tokenizer, tmp_path_factory):
    _, paths = shared.exported(model, tokenizer, tmp_path_factory)
    return {version: tf.saved_model.load(path) for version, path in paths.items()}


def _as_lists(out):
    return {k: v.numpy().tolist() for k, v in out.items()}


def test_the_vocabulary_folds_whitespace(tokenizer):
    assert tokenizer.normalization == "nmt_nfkc"


def test_translator_translates_variants_like_the_plain_form(model, tokenizer, lines):
    translators = {
        "graph": Translator(model, tokenizer, **shared.EXPORT_KWARGS),
        "xla": Translator(model, tokenizer, jit_compile=True, **shared.EXPORT_KWARGS),
    }
    for name, translator in translators.items():
        plain_beam = _as_lists(translator.translate_ids(tf.constant(lines)))
        plain_text = _as_lists(translator.translate(tf.constant(lines)))
        plain_greedy = _as_lists(translator.translate_greedy(tf.constant(lines)))
        assert all(plain_text["translations"])
        for variant_name, variant in VARIANTS.items():
            written = tf.constant([variant(s) for s in lines])
            assert _as_lists(translator.translate_ids(written)) == plain_beam, (name, variant_name)
            assert _as_lists(translator.translate(written)) == plain_text, (name, variant_name)
            assert _as_lists(translator.translate_greedy(written)) == plain_greedy, (name, variant_name)
        # One sentence alone: the XLA translator's XLA path (greedy search of one sentence).
        alone = translator.translate_greedy(tf.constant([lines[0]]))["output_ids"].numpy()
        for variant in VARIANTS.values():
            np.testing.assert_array_equal(
                translator.translate_greedy(tf.constant([variant(lines[0])]))["output_ids"].numpy(), alone
            )


def test_saved_model_translates_variants_like_the_plain_form(exported, lines):
    for version, loaded in exported.items():
        for signature in ("serving_default", "greedy", "token_ids"):
            fn = loaded.signatures[signature]
            plain = _as_lists(fn(sentences=tf.constant(lines)))
            for variant_name, variant in VARIANTS.items():
                got = _as_lists(fn(sentences=tf.constant([variant(s) for s in lines])))
                assert got == plain, (version, signature, variant_name)
            if signature == "greedy":  # one sentence alone (version 2 runs it in XLA)
                alone = _as_lists(fn(sentences=tf.constant([lines[1]])))
                for variant in VARIANTS.values():
                    assert _as_lists(fn(sentences=tf.constant([variant(lines[1])]))) == alone
