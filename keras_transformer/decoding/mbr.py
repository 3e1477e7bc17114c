"""Minimum Bayes risk (MBR) selection from beam search's n-best lists.

Beam search (Section 6.1) translates with the hypothesis of the highest
model score. MBR decoding (Kumar and Byrne, 2004; Eikema and Aziz, 2020;
Freitag et al., 2022) translates with the hypothesis that agrees most with
the others, as the model weighs them: of the ``N`` best hypotheses
``h_1..h_N`` of a sentence with beam scores ``s_1..s_N`` (``log P / lp``),

    w_j = softmax(s)_j,        h* = argmax_i  sum_j  w_j * u(h_i, h_j),

where the utility ``u(h, r)`` is a sentence-level metric of ``h`` against
``r`` as a reference (sacreBLEU's chrF, or its sentence BLEU with
effective order), and ``u(h, h) = 100``: a hypothesis agrees fully with
itself. Ties go to the better beam hypothesis, so a list of one gives its
hypothesis, and lists whose hypotheses are all alike give the beam's best.

The selection runs in Python after the search, over the lists of any
translator that gives n-best lists (a model folder, a SavedModel's
``n_best`` signature; :func:`keras_transformer.decoding.corpus.n_best_lines`).
It costs ``N * (N - 1)`` sentence-metric calls per sentence (12 for
``N = 4``), besides a search with a beam of at least ``N``.

Measured on Multi30k with `compact` models of an hour of CPU training: on
the validation set chrF over the 4 best of beam 8 gained 0.27 BLEU on
average over beam 4's best, all of it through the brevity penalty (every
n-gram precision fell; the output grew from 0.96 to 0.98-0.99 of the
references' length); on test2016, whose beam-4 output is near the
references' length, it lost BLEU for all 14 models (mean -0.70) while chrF
rose by about 0.4. So it is off by default and the CPU recipe does not use
it. README "Minimum Bayes risk (MBR) decoding".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MBR_METRICS", "mbr_select", "mbr_translations"]

#: The utilities :func:`mbr_select` knows.
MBR_METRICS = ("chrf", "bleu")


def _metric(name: str):
    from sacrebleu.metrics import BLEU, CHRF

    if name == "chrf":
        return CHRF()
    if name == "bleu":
        return BLEU(effective_order=True)
    raise ValueError(f"MBR metric must be one of {', '.join(MBR_METRICS)}, got {name!r}")


def mbr_select(entries: Sequence[tuple[str, float]], metric: str = "chrf") -> int:
    """The index of the MBR choice among one sentence's hypotheses.

    Args:
        entries: ``(hypothesis, score)`` pairs, best first, with finite beam
            scores (``log P / lp``; the softmax of the scores weighs them).
        metric: the utility, ``"chrf"`` (sacreBLEU chrF, character 6-grams,
            beta 2) or ``"bleu"`` (sacreBLEU sentence BLEU, effective order).

    Returns:
        The index in ``entries`` of the hypothesis with the highest expected
        utility against the others; 0 for a list of one, and the lowest index
        among equals.

    Raises:
        ValueError: for an empty list, an unknown metric, or a score that is
            not finite.
    """
    return _select(list(entries), _metric(metric))


def _select(entries: list[tuple[str, float]], scorer) -> int:
    """:func:`mbr_select` with a sacreBLEU metric object."""
    if not entries:
        raise ValueError("MBR needs at least one hypothesis")
    if len(entries) == 1:
        return 0
    hypotheses = [hypothesis for hypothesis, _ in entries]
    scores = np.asarray([score for _, score in entries], dtype=np.float64)
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"MBR needs finite hypothesis scores, got {scores.tolist()}")
    weights = np.exp(scores - scores.max())
    weights /= weights.sum()
    n = len(hypotheses)
    utility = np.full((n, n), 100.0)
    for i in range(n):
        for j in range(n):
            if i != j:
                utility[i, j] = scorer.sentence_score(hypotheses[i], [hypotheses[j]]).score
    expected = utility @ weights
    return int(np.argmax(expected))


def mbr_translations(n_best: Sequence[Sequence[tuple[str, float]]], candidates: int,
                     metric: str = "chrf") -> list[str]:
    """One translation per sentence: the MBR choice among its ``candidates`` best hypotheses.

    Args:
        n_best: per sentence, ``(hypothesis, score)`` pairs, best first
            (:func:`~keras_transformer.decoding.corpus.n_best_lines`); an
            empty list gives ``""``.
        candidates: how many of the best hypotheses compete (>= 1; 1 gives
            beam search's best).
        metric: the utility (:func:`mbr_select`).

    Returns:
        ``list[str]``, one translation per sentence, in order.

    Raises:
        ValueError: for ``candidates`` < 1 or an unknown metric.
    """
    if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
        raise ValueError(f"MBR candidates must be an int >= 1, got {candidates!r}")
    scorer = _metric(metric)
    out = []
    for entries in n_best:
        entries = list(entries)[:candidates]
        out.append(entries[_select(entries, scorer)][0] if entries else "")
    return out
