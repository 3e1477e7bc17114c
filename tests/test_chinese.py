"""Chinese-English (Tatoeba ``cmn.txt``): the split, a tiny zh -> en run on real pairs, its vocabulary's coverage,
sacreBLEU's ``zh`` tokenizer for en -> zh, an unseen character, and attention plots drawn with a CJK font."""

from __future__ import annotations

import collections
import json
import warnings

import pytest
import tensorflow as tf

from keras_transformer.cli import main
from keras_transformer.data.corpus import load_corpus

#: The running example of the Chinese walkthroughs of the paper: "I love easy courses".
WALKTHROUGH = "我爱水课"


@pytest.fixture(scope="module")
def cmn_dir(data_root):
    path = data_root / "tatoeba_cmn_eng"
    if not (path / "cmn.txt").is_file():
        pytest.skip(f"Tatoeba cmn.txt not found at {path}; set KERAS_TRANSFORMER_DATA to the folder holding it")
    return path


@pytest.fixture(scope="module")
def lines(cmn_dir):
    """(English, Chinese) of every non-empty line of cmn.txt, read here without the library."""
    text = (cmn_dir / "cmn.txt").read_text(encoding="utf-8-sig")  # the file starts with a byte order mark
    return [tuple(line.split("\t")[:2]) for line in text.split("\n") if line]


@pytest.fixture(scope="module")
def corpus(cmn_dir):
    return load_corpus("tatoeba_cmn_eng", data_dir=cmn_dir.parent)


def test_the_split_keeps_every_pair_once_and_no_held_out_sentence_in_train(corpus, lines, cmn_dir):
    assert (corpus.source_lang, corpus.target_lang, corpus.test_name) == ("zh", "en", "test")
    assert len(lines) == 29_155
    assert [len(split) for split in (corpus.train, corpus.valid, corpus.test)] == [27_155, 1_000, 1_000]
    together = collections.Counter()
    for split in (corpus.train, corpus.valid, corpus.test):
        together.update(zip(split.sources, split.targets))
    assert together == collections.Counter((zh, en) for en, zh in lines)  # nothing lost, no BOM, no empty pair
    train = set(corpus.train.sources) | set(corpus.train.targets)
    held_out = corpus.valid.sources + corpus.valid.targets + corpus.test.sources + corpus.test.targets
    assert not [sentence for sentence in held_out if sentence in train]
    reverse = load_corpus("tatoeba_cmn_eng", data_dir=cmn_dir.parent, source_lang="en")
    assert (reverse.source_lang, reverse.target_lang) == ("en", "zh")
    assert reverse.test.sources == corpus.test.targets and reverse.test.targets == corpus.test.sources


@pytest.fixture(scope="module")
def zh_en_run(tmp_path_factory, data_root, cmn_dir):
    """A tiny zh -> en model trained on the first 600 training pairs (float32, one epoch), from the command line."""
    out = tmp_path_factory.mktemp("zh_en") / "run"
    command = [
        "train", "--dataset", "tatoeba_cmn_eng", "--data-dir", str(data_root), "--preset", "tiny",
        "--precision", "float32", "--vocab-size", "1500", "--limit-train", "600", "--epochs", "1",
        "--valid-bleu-sentences", "8", "--model-dir", str(out), "--learning-rate-scale", "0.02",
    ]
    assert main(command) == 0
    return out


@pytest.mark.slow
def test_a_tiny_zh_en_run_covers_every_training_character_and_scores_with_13a(zh_en_run, corpus):
    from keras_transformer.data.tokenizer import SubwordTokenizer

    best = json.loads((zh_en_run / "best_bleu.weights.h5.json").read_text(encoding="utf-8"))
    assert "tok:13a" in best["bleu_signature"] and best["sentences"] == 8  # English target
    tokenizer = SubwordTokenizer(str(zh_en_run / "spm.model"))
    characters = sorted(set("".join(corpus.train.sources[:600] + corpus.train.targets[:600])) - {" "})
    assert len(characters) > 900  # Chinese has many: the vocabulary must still hold each one
    unknown = tokenizer.unknown_piece_mask
    pieces = [tokenizer.tokenize(tf.constant(c)).numpy().tolist() for c in characters]
    uncovered = [c for c, ids in zip(characters, pieces) if any(unknown[i] for i in ids)]
    assert uncovered == []  # character_coverage 1.0: no training character falls back to bytes or <unk>


@pytest.mark.slow
def test_a_chinese_sentence_with_one_unseen_character_is_translated_not_copied(zh_en_run):
    from keras_transformer.runner import Runner

    opened = Runner(zh_en_run, log=lambda _: None).open_translator()
    tokenizer = opened.translator.tokenizer
    unseen = "鼹"  # a mole: not in 600 pairs of everyday sentences
    ids = tokenizer.tokenize(tf.constant(unseen)).numpy().tolist()
    assert sum(bool(tokenizer.unknown_piece_mask[i]) for i in ids) == len(unseen.encode("utf-8"))  # 3 byte pieces
    sentences = [f"我看见了一只{unseen}。", "鼹鼹"]
    out = [t.decode("utf-8") for t in opened.translate(tf.constant(sentences))["translations"].numpy()]
    assert out[0] != sentences[0]  # known words around the unseen character: translated
    assert out[1] == sentences[1]  # only unseen characters: nothing to translate, copied through


@pytest.mark.slow
def test_en_zh_scores_with_sacrebleus_zh_tokenizer(tmp_path, data_root, cmn_dir, capsys):
    out = tmp_path / "en_zh"
    command = [
        "train", "--dataset", "tatoeba_cmn_eng", "--source-lang", "en", "--data-dir", str(data_root),
        "--model-dir", str(out), "--preset", "tiny", "--precision", "float32", "--vocab-size", "1500",
        "--limit-train", "600", "--epochs", "1", "--valid-bleu-sentences", "8", "--learning-rate-scale", "0.02",
    ]
    assert main(command) == 0
    stdout = capsys.readouterr().out
    assert "en -> zh" in stdout and "sacreBLEU tokenizer zh" in stdout
    best = json.loads((out / "best_bleu.weights.h5.json").read_text(encoding="utf-8"))
    assert "tok:zh" in best["bleu_signature"]


@pytest.mark.slow
def test_the_walkthrough_sentence_s_attention_plot_draws_chinese_with_a_cjk_font(zh_en_run, tmp_path):
    from keras_transformer import visualization

    if visualization.cjk_font() is None:
        pytest.skip('no CJK font: pip install "keras_transformer[cjk]"')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot = visualization.plot_attention_heads(zh_en_run / "model.keras", zh_en_run / "spm.model", WALKTHROUGH,
                                                  path=tmp_path / "attention.png")
    assert plot.label_font == visualization.cjk_font()
    assert any(ch in "".join(plot.source_pieces) for ch in WALKTHROUGH)
    assert not [w for w in caught if "missing from font" in str(w.message)]  # matplotlib's missing-glyph warning
    assert (tmp_path / "attention.png").stat().st_size > 10_000


def test_without_a_cjk_font_the_plot_warns_how_to_get_one(monkeypatch):
    from keras_transformer import visualization

    monkeypatch.setattr(visualization, "cjk_font", lambda: None)
    with pytest.warns(UserWarning, match=r"keras_transformer\[cjk\].*fonts-noto-cjk") as caught:
        assert visualization._label_font(["▁我", "爱", "</s>"]) is None
    assert "我爱" in str(caught[0].message)
    assert visualization._label_font(["▁A", "▁dog", "</s>"]) is None  # no CJK piece: no font needed, no warning
