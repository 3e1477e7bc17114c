"""CTranslate2 export: weight mapping, greedy equality with the TF Translator, round trip, bad input.

Two small models are TRAINED for a few hundred steps on real Multi30k pairs
(random weights give near-tied logits, so greedy equality would be luck):
pre-LN with tied embeddings and sinusoids, and post-LN (the paper's layout)
with untied embeddings and learned positions, so every branch of the mapping
is exercised. The vocabulary is this module's own 1,000-piece SentencePiece
model (sentences of ~15 pieces train faster than with the shared 300-piece
one).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.config import get_preset  # noqa: E402
from keras_transformer.data.pipeline import make_dataset, prepare_pairs  # noqa: E402
from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece  # noqa: E402
from keras_transformer.decoding import Translator  # noqa: E402
from keras_transformer.decoding.ctranslate2 import CTranslate2Translator  # noqa: E402
from keras_transformer.decoding.ctranslate2_format import CT2_RECORD_FILENAME, CT2_VOCAB_FILENAME  # noqa: E402
from keras_transformer.evaluation import score_corpus  # noqa: E402
from keras_transformer.export import QUANTIZATIONS, export_ctranslate2  # noqa: E402

MAX_LENGTH = 64
EXTRA = 50
TRAIN_PAIRS = 10_000
# Each clears the guards below by a margin (post-LN at half the rate: 199 distinct outputs of 200, BLEU 4.4, on an
# AVX2-only AMD EPYC; at the full rate the same steps gave 105 on an AVX512 CPU but 33 there, under the guard of 50).
TRAIN_STEPS = {"pre_ln": 250, "post_ln": 250}
NUM_VALID = 200


def _read(path, n):
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in itertools.islice(f, n)]


@pytest.fixture(scope="module")
def spm_model(multi30k_dir, tmp_path_factory):
    lines = [_read(multi30k_dir / "train.en", 5000), _read(multi30k_dir / "train.de", 5000)]
    return train_sentencepiece(lines, tmp_path_factory.mktemp("ct2_spm"), vocab_size=1000)


@pytest.fixture(scope="module")
def pairs(multi30k_dir):
    return _read(multi30k_dir / "train.en", TRAIN_PAIRS), _read(multi30k_dir / "train.de", TRAIN_PAIRS)


@pytest.fixture(scope="module")
def valid(multi30k_dir):
    return _read(multi30k_dir / "val.en", NUM_VALID), _read(multi30k_dir / "val.de", NUM_VALID)


def _train(spm_model, pairs, steps, learning_rate_scale=2.0, **overrides):
    """A d_model-64, 2+2-layer model after ``steps`` steps of 1,024-token batches (~0.1 s each on 2 cores)."""
    from keras_transformer import training

    keras.utils.set_random_seed(0)
    tokenizer = SubwordTokenizer(spm_model)  # after seeding (the seed clears its SentencePiece resource)
    config = get_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=MAX_LENGTH, d_model=64, dff=256,
                        num_heads=4, warmup_steps=100, batch_tokens=1024, **overrides)
    data = make_dataset(prepare_pairs(*pairs, tokenizer, max_length=MAX_LENGTH), batch_tokens=1024, seed=0)
    model = training.build_model(config)
    training.compile_model(model, config, jit_compile=False, learning_rate_scale=learning_rate_scale)
    model.fit(data.repeat(), steps_per_epoch=steps, epochs=1, verbose=0)
    return model


@pytest.fixture(scope="module")
def models(spm_model, pairs, tmp_path_factory):
    """name -> (model, float32 export dir)."""
    out = {}
    for name, overrides in {
        "pre_ln": dict(norm_first=True),
        # Post-LN trains less stably: at the full rate or above, its outputs barely depend on the input on some CPUs.
        "post_ln": dict(norm_first=False, tie_embeddings=False, learned_positions=True, learning_rate_scale=0.5),
    }.items():
        model = _train(spm_model, pairs, TRAIN_STEPS[name], **overrides)
        path = export_ctranslate2(model, SubwordTokenizer(spm_model), tmp_path_factory.mktemp(name) / "ct2",
                                  decoding=dict(max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=1))
        out[name] = (model, path)
    return out


@pytest.fixture
def tokenizer(spm_model, models):
    """A fresh tokenizer per test: seeding (in the training above) clears tensorflow_text's SentencePiece resource."""
    return SubwordTokenizer(spm_model)


def _pieces(tokenizer, ids):
    return [tokenizer._processor.id_to_piece(i) for i in ids]


@pytest.mark.parametrize("name", ["pre_ln", "post_ln"])
def test_teacher_forced_log_probs_match(models, tokenizer, valid, name):
    """Every mapped weight is right: CTranslate2's per-token log-probs of the reference equal ours."""
    model, path = models[name]
    sources, targets = tokenizer.encode(valid[0][:8]), tokenizer.encode(valid[1][:8])
    scored = ctranslate2.Translator(path).score_batch(
        [_pieces(tokenizer, s) for s in sources], [_pieces(tokenizer, t) for t in targets]
    )
    for source, target, result in zip(sources, targets, scored):
        logits = model((tf.constant([source + [3]]), tf.constant([[2] + target])), training=False)
        log_probs = tf.nn.log_softmax(logits[0]).numpy()
        ours = [log_probs[t, token] for t, token in enumerate(target + [3])]
        assert len(result.log_probs) == len(ours)
        np.testing.assert_allclose(result.log_probs, ours, atol=2e-4)


@pytest.mark.parametrize("name", ["pre_ln", "post_ln"])
def test_greedy_equals_tf_translator(models, tokenizer, valid, name):
    model, path = models[name]
    sources, references = valid
    reference = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=1)
    tf_out = reference.translate_greedy(tf.constant(sources))
    tf_ids = [[int(i) for i in row if i] for row in tf_out["output_ids"].numpy()]
    tf_text = [t.decode("utf-8") for t in tf_out["translations"].numpy()]
    out = CTranslate2Translator(path, beam_size=1, intra_threads=1).translate(sources)
    same_ids = sum(a == b for a, b in zip(tf_ids, out["output_ids"])) / len(sources)
    same_text = sum(a == b for a, b in zip(tf_text, out["translations"])) / len(sources)
    tf_bleu, ct2_bleu = score_corpus(tf_text, references).bleu, score_corpus(out["translations"], references).bleu
    print(f"{name}: identical ids {same_ids:.1%}, strings {same_text:.1%}, BLEU tf {tf_bleu:.2f} ct2 {ct2_bleu:.2f}")
    assert len(set(tf_text)) >= 0.25 * len(sources)  # outputs depend on the input (a degenerate model: a few)
    assert same_ids >= 0.99 and same_text >= 0.99
    assert abs(tf_bleu - ct2_bleu) <= 0.2
    # A trained model: real German words, not a random model's noise.
    # Outputs that depend on the input (a degenerate model repeats a few sentences, which would
    # hide a wrong cross-attention).
    assert tf_bleu > 1.0 and len(set(tf_text)) > NUM_VALID // 4
    assert sum(t.split()[0] in ("Ein", "Eine", "Zwei", "Drei", "Der", "Die", "Das", "Mehrere")
               for t in out["translations"] if t) > NUM_VALID // 2


def test_per_sentence_limit_and_scores_follow_tf(models, tokenizer, valid):
    """A short output limit (source + 3) cuts sentences exactly as the TF greedy search does, and the
    greedy scores, converted to our length penalty, equal the TF beam-1 scores."""
    model, path = models["pre_ln"]
    sources = valid[0][:80]
    reference = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=3, beam_size=1)
    tf_out = reference.translate_greedy(tf.constant(sources))
    tf_ids = [[int(i) for i in row if i] for row in tf_out["output_ids"].numpy()]
    limits = [min(len(p) + 1 + 3, MAX_LENGTH) for p in tokenizer.encode(sources)]
    assert sum(len(ids) == limit for ids, limit in zip(tf_ids, limits)) >= 5  # the limit really cuts some
    translator = CTranslate2Translator(path, beam_size=1, extra_decode_length=3, length_penalty=0.6, intra_threads=1)
    calls = []
    run = translator._run
    translator._run = lambda batch, steps: calls.append(steps) or run(batch, steps)
    out = translator.translate(sources)
    assert calls[0] == max(limits) - 1 and len(calls) > 1  # the batch's largest limit, then re-runs with smaller
    assert sum(a == b for a, b in zip(tf_ids, out["output_ids"])) >= len(sources) - 1
    assert all(len(ids) <= limit for ids, limit in zip(out["output_ids"], limits))

    # Scores: sentences that ended with a generated EOS (a cut hypothesis has no EOS term in CTranslate2).
    tf_scores = reference.translate(tf.constant(sources))["scores"].numpy()
    compared = [i for i, (ids, limit) in enumerate(zip(tf_ids, limits))
                if len(ids) < limit and ids == out["output_ids"][i]]
    assert len(compared) >= 10
    for i in compared:
        assert out["scores"][i] == pytest.approx(float(tf_scores[i]), abs=2e-3)


def test_beam_search_gives_sane_translations(models, valid):
    """Beam 4 differs from ours in its length normalization (|Y|^alpha vs Wu et al.), so no equality:
    real translations, scores <= 0, at least as likely as greedy in most sentences."""
    _, path = models["pre_ln"]
    sources = valid[0][:20]
    beam = CTranslate2Translator(path, beam_size=4, length_penalty=0.6, intra_threads=1).translate(sources)
    greedy = CTranslate2Translator(path, beam_size=1, length_penalty=0.6, intra_threads=1).translate(sources)
    assert len(beam["translations"]) == 20 and all(beam["translations"])
    assert all(s <= 0 for s in beam["scores"])
    assert sum(b >= g - 1e-4 for b, g in zip(beam["scores"], greedy["scores"])) >= 15


def test_export_layout_and_record(models, tokenizer):
    model, path = models["pre_ln"]
    assert sorted(os.listdir(path)) == sorted(
        ["model.bin", "config.json", "shared_vocabulary.json", CT2_VOCAB_FILENAME, CT2_RECORD_FILENAME]
    )
    assert not [n for n in os.listdir(os.path.dirname(path)) if n != "ct2"]  # no temporary sibling left
    with open(os.path.join(path, CT2_VOCAB_FILENAME), "rb") as f:
        assert f.read() == tokenizer.model_bytes
    with open(os.path.join(path, CT2_RECORD_FILENAME), encoding="utf-8") as f:
        record = json.load(f)
    assert record["tokenizer"]["sha256"] == tokenizer.vocab_sha256
    assert record["decoding"] == {"max_length": MAX_LENGTH, "extra_decode_length": EXTRA, "beam_size": 1,
                                  "length_penalty": 0.6}
    assert record["model_config"]["norm_first"] is True and record["model_config"]["d_model"] == 64
    assert record["position_encodings"]["num_positions"] == MAX_LENGTH + EXTRA
    assert record["quantization"] is None and record["ctranslate2_version"] == ctranslate2.__version__
    assert record["layer_norm_epsilon"] == pytest.approx(1e-6)
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["add_source_eos"] is True and config["add_source_bos"] is False
    assert config["layer_norm_epsilon"] == pytest.approx(1e-6)
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    with open(os.path.join(path, "shared_vocabulary.json"), encoding="utf-8") as f:
        vocabulary = json.load(f)
    assert vocabulary[:4] == ["<pad>", "<unk>", "<s>", "</s>"] and len(vocabulary) == tokenizer.vocab_size
    # Learned positions: the table is the model's own (max_length rows).
    with open(os.path.join(models["post_ln"][1], CT2_RECORD_FILENAME), encoding="utf-8") as f:
        assert json.load(f)["position_encodings"] == {"kind": "learned", "num_positions": MAX_LENGTH}


def test_overwrite_and_bad_arguments(models, tokenizer, tmp_path):
    model, _ = models["pre_ln"]
    target = tmp_path / "out"
    export_ctranslate2(model, tokenizer, target)
    (target / "marker").write_text("old")
    with pytest.raises(ValueError, match=f"already exists: {target}"):
        export_ctranslate2(model, tokenizer, target)
    assert (target / "marker").exists()
    export_ctranslate2(model, tokenizer, target, overwrite=True, decoding={"beam_size": 3})
    assert not (target / "marker").exists()
    assert CTranslate2Translator(target).beam_size == 3
    with pytest.raises(ValueError, match="int8_float16"):  # the message lists the allowed values
        export_ctranslate2(model, tokenizer, tmp_path / "q", quantization="int4")
    with pytest.raises(ValueError, match="unknown decoding key"):
        export_ctranslate2(model, tokenizer, tmp_path / "d", decoding={"beam": 2})
    with pytest.raises(ValueError, match="max_length"):
        export_ctranslate2(model, tokenizer, tmp_path / "d", decoding={"max_length": MAX_LENGTH + 1})
    assert sorted(os.listdir(tmp_path)) == ["out"]  # failures leave nothing behind
    with pytest.raises(ValueError, match="beam_size"):
        CTranslate2Translator(target, beam_size=0)
    assert set(QUANTIZATIONS) >= {"int8", "float16", "float32"}


def test_missing_ctranslate2_names_the_extra(models, tokenizer, tmp_path, monkeypatch):
    model, _ = models["pre_ln"]
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ImportError, match=r"pip install 'keras_transformer\[ctranslate2\]'"):
        export_ctranslate2(model, tokenizer, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_package_import_does_not_import_ctranslate2():
    code = "import sys, keras_transformer.export as e; e.export_ctranslate2; print('ctranslate2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_not_an_export_is_refused(models, tmp_path, spm_model, multi30k_dir):
    _, path = models["pre_ln"]
    with pytest.raises(ValueError, match="not a keras_transformer CTranslate2 export.*missing model.bin"):
        CTranslate2Translator(tmp_path)
    plain = tmp_path / "plain_ct2"
    shutil.copytree(path, plain)
    os.remove(plain / CT2_RECORD_FILENAME)
    with pytest.raises(ValueError, match=f"missing {CT2_RECORD_FILENAME}"):
        CTranslate2Translator(plain)
    other = tmp_path / "other_vocab"
    shutil.copytree(path, other)
    other_spm = train_sentencepiece(_read(multi30k_dir / "train.en", 300), tmp_path / "o", vocab_size=100)
    shutil.copy(other_spm, other / CT2_VOCAB_FILENAME)
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        CTranslate2Translator(other)
    with pytest.raises(ValueError, match="not a directory"):
        CTranslate2Translator(tmp_path / "nowhere")


def test_int8_export_translates(models, tokenizer, valid, tmp_path):
    model, path = models["pre_ln"]
    int8 = export_ctranslate2(model, tokenizer, tmp_path / "int8", quantization="int8")
    assert os.path.getsize(os.path.join(int8, "model.bin")) < 0.5 * os.path.getsize(os.path.join(path, "model.bin"))
    with open(os.path.join(int8, CT2_RECORD_FILENAME), encoding="utf-8") as f:
        assert json.load(f)["quantization"] == "int8"
    sources = valid[0][:100]
    quantized = CTranslate2Translator(int8, intra_threads=1)(sources)
    full = CTranslate2Translator(path, intra_threads=1)(sources)
    assert len(quantized) == 100 and all(quantized)
    # Sane. This barely trained model's near-ties make int8 rounding flip words, after which a sentence goes
    # its own way (chrF of int8 against float32 translations moved from 40 to 31 with float32 rounding changes
    # in training), hence relative checks over 100 sentences: int8 follows the float32 translation of each
    # sentence far more than that of its neighbour, and scores about as well against the references.
    agreement = score_corpus(quantized, full).chrf
    neighbour = score_corpus(quantized, full[1:] + full[:1]).chrf
    references = valid[1][:100]
    int8_chrf, full_chrf = score_corpus(quantized, references).chrf, score_corpus(full, references).chrf
    print(f"chrF of int8 against float32 translations: {agreement:.1f} (shifted by one sentence: {neighbour:.1f}); "
          f"against the references: int8 {int8_chrf:.1f}, float32 {full_chrf:.1f}")
    assert agreement > neighbour + 5
    assert int8_chrf > full_chrf - 5


def test_bad_input(models, tokenizer, valid):
    model, path = models["pre_ln"]
    translator = CTranslate2Translator(path, intra_threads=1)
    assert translator.translate([]) == {"translations": [], "scores": [], "truncated": [], "output_ids": []}
    long_line = " ".join(valid[0])[:5000]
    assert len(long_line) == 5000
    batch = ["", "  \t ", "\u3000\u00a0", long_line, "A dog \udcff runs \ud800.", valid[0][0]]
    out = translator.translate(batch)
    assert all(len(values) == len(batch) for values in out.values())
    assert out["translations"][:3] == ["", "", ""] and out["scores"][:3] == [0.0, 0.0, 0.0]
    assert out["truncated"] == [False, False, False, True, False, False]
    assert out["translations"][3] and out["translations"][4] and out["translations"][5]
    assert len(out["output_ids"][3]) <= MAX_LENGTH
    assert translator(batch) == out["translations"]
    with pytest.raises(TypeError, match="list of str"):
        translator.translate("A dog.")

    # The TF Translator treats the same batch the same way; the invalid bytes it sees are the
    # ones the surrogates stand for (\udcff = byte 0xff; \ud800 = its 3-byte encoding).
    reference = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=1)
    raw = [s.encode("utf-8") for s in batch[:4]] + [b"A dog \xff runs \xed\xa0\x80.", batch[5].encode("utf-8")]
    tf_out = reference.translate_greedy(tf.constant(raw))
    assert [t.decode("utf-8") for t in tf_out["translations"].numpy()] == out["translations"]
    assert tf_out["truncated"].numpy().tolist() == out["truncated"]


def test_unknown_input_follows_the_tf_translator(models, tokenizer, spm_model):
    """Unseen scripts without a known word are copied through; mixed input is bounded by its known pieces."""
    import sentencepiece as spm

    model, path = models["pre_ln"]
    translator = CTranslate2Translator(path, beam_size=1, intra_threads=1)
    batch = ["你好世界，今天天气很好。", " 😀 👍\u3000🐶 ", "Ein Hund 你好世界 läuft.", "A dog runs."]
    out = translator.translate(batch)
    assert out["translations"][:2] == ["你好世界，今天天气很好。", "😀 👍 🐶"]
    assert out["scores"][:2] == [0.0, 0.0] and out["output_ids"][:2] == [[], []]
    processor = spm.SentencePieceProcessor(model_file=spm_model)
    known = sum(1 for i in processor.encode(batch[2]) if i != processor.unk_id())
    assert 1 <= len(out["output_ids"][2]) <= known + 1 + EXTRA
    reference = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=1)
    tf_out = reference.translate_greedy(tf.constant(batch))
    assert [t.decode("utf-8") for t in tf_out["translations"].numpy()] == out["translations"]


def test_a_line_without_letters_or_digits_comes_back_as_itself(models, tokenizer):
    """A dash, a question mark, an ellipsis: nothing to translate, in CTranslate2 as in the TF translator."""
    model, path = models["pre_ln"]
    batch = ["-", " ? ", "...", "— !", "«»", "A dog runs."]
    out = CTranslate2Translator(path, beam_size=1, intra_threads=1).translate(batch)
    assert out["translations"][:5] == ["-", "?", "...", "— !", "«»"] and out["scores"][:5] == [0.0] * 5
    reference = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=1)
    assert [t.decode("utf-8") for t in reference.translate_greedy(tf.constant(batch))["translations"].numpy()] \
        == out["translations"]


def test_numbers_and_addresses_are_carried_through_as_in_the_tf_translator(models, tokenizer):
    """The placeholder rule in Python (CTranslate2's path) gives the in-graph rule's translations."""
    from keras_transformer.data.placeholders import mask_str

    model, path = models["pre_ln"]
    batch = ["A man in shirt 23 runs 5 km.", "See www.example.com or mail a@b.example at 10:30.", "A dog runs."]
    assert all(mask_str(s)[1] for s in batch[:2])
    out = CTranslate2Translator(path, beam_size=1, intra_threads=1).translate(batch)
    reference = Translator(model, tokenizer, max_length=MAX_LENGTH, extra_decode_length=EXTRA, beam_size=1)
    assert reference.placeholders and CTranslate2Translator(path, beam_size=1).get_config()["placeholders"]
    assert [t.decode("utf-8") for t in reference.translate_greedy(tf.constant(batch))["translations"].numpy()] \
        == out["translations"]
    off = CTranslate2Translator(path, beam_size=1, intra_threads=1, placeholders=False).translate(batch)
    unmasked = reference.with_settings(placeholders=False)  # in a name: tf.function methods hold it weakly
    plain = unmasked.translate_greedy(tf.constant(batch))["translations"]
    assert [t.decode("utf-8") for t in plain.numpy()] == off["translations"]


def test_the_repetition_guard_is_ctranslate2s_own(models, valid):
    _, path = models["pre_ln"]
    guarded = CTranslate2Translator(path, beam_size=2, intra_threads=1, no_repeat_ngram_size=2)
    for ids in guarded.translate(valid[0][:40])["output_ids"]:
        bigrams = list(zip(ids, ids[1:]))
        assert len(bigrams) == len(set(bigrams))
    assert guarded.get_config()["no_repeat_ngram_size"] == 2


def test_bfloat16_export_without_torch(models, tokenizer, valid, tmp_path):
    """bfloat16 weights are written through ml_dtypes (no torch): half the float32 bytes, same greedy output."""
    model, _ = models["pre_ln"]
    full = export_ctranslate2(model, tokenizer, tmp_path / "f32")
    half = export_ctranslate2(model, tokenizer, tmp_path / "bf16", quantization="bfloat16")
    size = lambda path: os.path.getsize(os.path.join(path, "model.bin"))  # noqa: E731
    assert 0.45 < size(half) / size(full) < 0.6
    sentences = valid[0][:20]
    got = CTranslate2Translator(half, beam_size=1).translate(sentences)
    want = CTranslate2Translator(full, beam_size=1).translate(sentences)
    assert all(got["translations"])
    # bfloat16 weights keep 8 bits of mantissa: the greedy ids agree on most positions (a wrong conversion,
    # e.g. bytes read as float32, agrees on almost none). Near-ties of this tiny model flip some tokens, after
    # which a sentence goes its own way: 20 real sentences keep the measure stable.
    same = sum(a == b for x, y in zip(got["output_ids"], want["output_ids"]) for a, b in zip(x, y))
    assert same >= 0.5 * sum(len(y) for y in want["output_ids"])
    assert sum(x[:3] == y[:3] for x, y in zip(got["output_ids"], want["output_ids"])) >= 15


def test_n_best_and_score_are_refused_with_the_reason(models, tmp_path, capsys):
    """CTranslate2 ranks by log P / |Y|^alpha: no n-best list or score in our convention, and the error says so."""
    from keras_transformer.cli import main
    from keras_transformer.decoding.load import open_translator

    _, path = models["pre_ln"]
    opened = open_translator(path)
    assert opened.n_best is None and opened.score is None
    with pytest.raises(ValueError, match=r"CTranslate2 export, which gives no n-best lists.*\|Y\|\^alpha"):
        opened.require("n_best")
    with pytest.raises(ValueError, match="CTranslate2 export, which cannot score"):
        opened.require("score")
    source = tmp_path / "in.en"
    source.write_text("A dog runs.\n", encoding="utf-8")
    assert main(["translate", "--model", str(path), "--input", str(source), "--n-best", "1"]) == 2
    assert "gives no n-best lists" in capsys.readouterr().err
    assert main(["score", "--model", str(path), "--source", str(source), "--target", str(source)]) == 2
    assert "cannot score" in capsys.readouterr().err
