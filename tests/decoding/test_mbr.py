"""Minimum Bayes risk selection from beam search's n-best lists (keras_transformer.decoding.mbr)."""

import math

import pytest
from sacrebleu.metrics import BLEU, CHRF

from keras_transformer.decoding.mbr import mbr_select, mbr_translations
from keras_transformer.settings import DecodingSettings, RunError, RunSettings

DOG = "Ein Hund rennt über die Wiese."
MEN = "Zwei Männer spielen Fußball im Park."
MEN_2 = "Zwei Männer spielen im Park Fußball."
MEN_3 = "Zwei junge Männer spielen Fußball im Park."


def _expected_utilities(entries, metric):
    """sum_j softmax(s)_j * u(h_i, h_j), u(h, h) = 100: the definition, written out with plain floats."""
    top = max(score for _, score in entries)
    weights = [math.exp(score - top) for _, score in entries]
    weights = [w / sum(weights) for w in weights]
    return [sum(w * (100.0 if i == j else metric.sentence_score(h, [r]).score)
                for j, ((r, _), w) in enumerate(zip(entries, weights)))
            for i, (h, _) in enumerate(entries)]


def test_the_hypothesis_the_others_agree_with_wins_over_the_best_scored():
    entries = [(DOG, -1.0), (MEN, -1.1), (MEN_2, -1.3), (MEN_3, -1.4)]
    for name, metric in (("chrf", CHRF()), ("bleu", BLEU(effective_order=True))):
        utilities = _expected_utilities(entries, metric)
        assert mbr_select(entries, name) == utilities.index(max(utilities))
        assert mbr_select(entries, name) != 0  # the dog, alone against three near-copies, loses
        assert utilities[0] < 40.0  # the dog's agreement: its own weight (~0.3) times 100, and little from the rest


def test_a_far_better_score_keeps_beam_search_choice():
    entries = [(DOG, 0.0), (MEN, -20.0), (MEN_2, -20.0)]  # the others weigh e^-20 each
    assert mbr_select(entries) == 0


def test_one_hypothesis_equal_ones_and_the_weights_of_the_scores():
    assert mbr_select([(DOG, -3.0)]) == 0
    assert mbr_select([(MEN, -1.0), (MEN, -1.2), (MEN, -2.0)]) == 0  # ties go to the better beam hypothesis
    # Two hypotheses: each agrees fully with itself and u(a, b) with the other, so the heavier one wins.
    assert mbr_select([(MEN, -1.0), (DOG, -0.5)]) == 1


def test_candidates_cut_each_list_before_choosing():
    n_best = [[(DOG, -1.0), (MEN, -1.1), (MEN_2, -1.3), (MEN_3, -1.4)], [(MEN, -0.5)], []]
    assert mbr_translations(n_best, 1) == [DOG, MEN, ""]  # one candidate: beam search's best
    assert mbr_translations(n_best, 2) == [DOG, MEN, ""]  # two: the heavier (softmax 0.52 against 0.48) wins
    chosen = mbr_translations(n_best, 4)[0]
    assert chosen in (MEN, MEN_2, MEN_3)  # four: the three that agree outweigh the best-scored
    utilities = _expected_utilities(n_best[0], CHRF())
    assert chosen == n_best[0][utilities.index(max(utilities))][0]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="candidates must be an int >= 1, got 0"):
        mbr_translations([[(DOG, 0.0)]], 0)
    with pytest.raises(ValueError, match="must be one of chrf, bleu, got 'ter'"):
        mbr_translations([[(DOG, 0.0)]], 2, "ter")
    with pytest.raises(ValueError, match="finite hypothesis scores"):
        mbr_select([(DOG, 0.0), (MEN, float("-inf"))])
    with pytest.raises(ValueError, match="at least one hypothesis"):
        mbr_select([])


def test_settings_refuse_mbr_beyond_the_beam_with_sampling_or_out_of_range():
    DecodingSettings(beam_size=8, mbr_candidates=4).check()
    DecodingSettings(mbr_candidates=4).check()  # the beam size comes later: the default's, or the export's
    with pytest.raises(RunError, match="decoding.mbr_candidates 5 exceeds decoding.beam_size 4"):
        DecodingSettings(beam_size=4, mbr_candidates=5).check()
    with pytest.raises(RunError, match="excludes decoding.seed"):
        DecodingSettings(mbr_candidates=2, seed=1).check()
    with pytest.raises(RunError, match=r"must be an int >= 0 \(0: off\), got -1"):
        DecodingSettings(mbr_candidates=-1).check()
    with pytest.raises(RunError, match="must be chrf or bleu, got 'ter'"):
        DecodingSettings(mbr_candidates=2, mbr_metric="ter").check()


SENTENCES = ["A dog runs in the park.", "Two men are playing soccer.", "", "A woman in a red coat sings.",
             "A man rides a bike down a hill."]


def _runner(folder, **decoding):
    from keras_transformer.runner import Runner

    settings = RunSettings().replace_in("decoding", workers=1, **decoding)
    return Runner(folder, settings, log=lambda _: None)


def test_the_runner_translates_with_the_mbr_choice_of_its_n_best_lists(model_dir):
    n_best = _runner(model_dir, beam_size=4).translate(SENTENCES, n_best=4)
    beam = _runner(model_dir, beam_size=4).translate(SENTENCES)
    assert [entries[0][0] for entries in n_best] == beam
    for candidates, metric in ((4, "chrf"), (3, "bleu")):
        chosen = _runner(model_dir, beam_size=4, mbr_candidates=candidates, mbr_metric=metric).translate(SENTENCES)
        assert chosen == mbr_translations(n_best, candidates, metric)
    assert _runner(model_dir, beam_size=4, mbr_candidates=1).translate(SENTENCES) == beam
    with pytest.raises(RunError, match="excludes decoding.mbr_candidates"):
        _runner(model_dir, beam_size=4, mbr_candidates=2).translate(SENTENCES, n_best=2)
    with pytest.raises(RunError, match="decoding.mbr_candidates 5 exceeds the beam size 4"):
        _runner(model_dir, mbr_candidates=5).translate(SENTENCES)  # the default beam of a model folder
