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
