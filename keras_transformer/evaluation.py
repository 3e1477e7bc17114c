"""Corpus BLEU and chrF with sacreBLEU (Section 6.1 reports BLEU).

Scores are computed on detokenized, cased text with sacreBLEU's default 13a
tokenization, and always reported with sacreBLEU's signature so that they can
be compared with published numbers (Post, 2018).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import sacrebleu

__all__ = ["Scores", "score_corpus"]


@dataclasses.dataclass(frozen=True)
class Scores:
    """Corpus-level scores of one system output.

    Attributes:
        bleu: sacreBLEU score, 0-100.
        chrf: chrF2 score, 0-100.
        bleu_signature: sacreBLEU's signature string of the BLEU metric.
        chrf_signature: signature of the chrF metric.
        num_sentences: the number of scored sentences.
    """

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    num_sentences: int

    def __str__(self) -> str:
        return (
            f"BLEU = {self.bleu:.2f} ({self.bleu_signature})\n"
            f"chrF = {self.chrf:.2f} ({self.chrf_signature})\n"
            f"sentences = {self.num_sentences}"
        )


def score_corpus(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """Scores detokenized hypotheses against one reference each.

    Args:
        hypotheses: system translations, one string per sentence.
        references: reference translations, aligned with ``hypotheses``.

    Returns:
        :class:`Scores` with BLEU (13a tokenization, cased, exp smoothing) and chrF.

    Raises:
        ValueError: if the two lists differ in length or are empty.
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; they must align")
    if not hypotheses:
        raise ValueError("nothing to score: no hypotheses")
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return Scores(
        bleu=float(bleu_score.score),
        chrf=float(chrf_score.score),
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        num_sentences=len(hypotheses),
    )
