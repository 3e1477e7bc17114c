"""Corpus BLEU and chrF with sacreBLEU (Section 6.1 reports BLEU), for any target language.

Scores are computed on detokenized, cased text and always reported with
sacreBLEU's signature, so that they can be compared with published numbers
(Post, 2018). BLEU counts word n-grams, so the words must first be found:
sacreBLEU's ``13a`` tokenizer (mteval-v13a, the WMT standard) splits on
spaces and punctuation, which does not work for scripts written without
spaces. The tokenizer is therefore chosen by the target language, with
sacreBLEU's own mapping (``sacrebleu.metrics.BLEU(trg_lang=...)``, the rule of
``sacrebleu -l xx-zh``):

=============  ===========  =====================================================
target         tokenizer    needs
=============  ===========  =====================================================
``zh``         ``zh``       nothing (splits CJK characters, 13a elsewhere)
``ja``         ``ja-mecab`` ``pip install 'sacrebleu[ja]'`` (MeCab + IPAdic)
``ko``         ``ko-mecab`` ``pip install 'sacrebleu[ko]'`` (MeCab-ko + its dictionary)
anything else  ``13a``      nothing
=============  ===========  =====================================================

An explicit ``tokenize`` (CLI ``--bleu-tokenize``) overrides the choice, e.g.
``intl`` (Unicode punctuation and symbols split everywhere, for mixed
scripts) or ``char``. chrF (Popović, 2015) scores character n-grams and needs
no tokenizer, so it is computed the same way for every language.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import sacrebleu

from keras_transformer.settings import SettingsMessage

__all__ = [
    "BLEU_TOKENIZERS",
    "MissingTokenizerPackages",
    "Scores",
    "bleu_metric",
    "bleu_tokenizer_for",
    "score_corpus",
]

#: The tokenizer names sacreBLEU accepts (``--bleu-tokenize`` choices).
BLEU_TOKENIZERS = tuple(sacrebleu.metrics.BLEU.TOKENIZERS)
#: language -> tokenizer: sacreBLEU's own map (``BLEU._TOKENIZER_MAP``, with its 2.x content as a fallback).
_LANGUAGE_TOKENIZERS = dict(getattr(sacrebleu.metrics.BLEU, "_TOKENIZER_MAP", {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}))
#: tokenizer -> the pip extra that installs what it needs.
_EXTRAS = {"ja-mecab": "ja", "ko-mecab": "ko"}


class MissingTokenizerPackages(SettingsMessage, ImportError):
    """A BLEU tokenizer needs packages that are not installed (the message names the pip command)."""


def _language(code: str | None) -> str:
    """The primary language subtag, lower case: ``"zh-Hans"`` -> ``"zh"``, ``"JA_JP"`` -> ``"ja"``, None -> ``""``."""
    return (code or "").strip().lower().replace("_", "-").split("-")[0]


def bleu_tokenizer_for(target_lang: str | None = None, tokenize: str | None = None) -> str:
    """The sacreBLEU tokenizer name used for ``target_lang`` (or ``tokenize`` when given).

    Args:
        target_lang: a language code (``"de"``, ``"zh"``, ``"zh-Hans"``,
            ``"ja"``, ``"ko"``, ...; case and region ignored) or None.
        tokenize: an explicit tokenizer name, which wins.

    Returns:
        ``tokenize`` if given, else sacreBLEU's choice for the language:
        ``zh`` -> ``"zh"``, ``ja`` -> ``"ja-mecab"``, ``ko`` -> ``"ko-mecab"``,
        any other or None -> ``"13a"``.

    Raises:
        ValueError: for a ``tokenize`` sacreBLEU does not know (naming the known ones).
    """
    if tokenize is not None:
        if tokenize not in BLEU_TOKENIZERS:
            raise ValueError(f"unknown BLEU tokenizer {tokenize!r}; sacreBLEU knows {', '.join(BLEU_TOKENIZERS)}")
        return tokenize
    language = _language(target_lang)
    return _LANGUAGE_TOKENIZERS.get(language, "13a")


def bleu_metric(target_lang: str | None = None, tokenize: str | None = None) -> sacrebleu.metrics.BLEU:
    """sacreBLEU's BLEU metric for ``target_lang`` (see the module docstring), checked to be usable.

    Call it before a long job (training) to fail early when the tokenizer's
    packages are missing.

    Args:
        target_lang: the target language code, or None.
        tokenize: an explicit sacreBLEU tokenizer name, or None.

    Returns:
        A ``sacrebleu.metrics.BLEU`` (cased, ``exp`` smoothing, the tokenizer
        of :func:`bleu_tokenizer_for`).

    Raises:
        ValueError: for an unknown ``tokenize``.
        MissingTokenizerPackages: when ``ja-mecab`` / ``ko-mecab`` lack their
            packages; the message gives the ``pip install`` command.
        OSError: when a SentencePiece-based tokenizer (``flores101``,
            ``flores200``, ``spm``) cannot download its model (message says so).
    """
    name = bleu_tokenizer_for(target_lang, tokenize)
    try:
        return sacrebleu.metrics.BLEU(tokenize=name, trg_lang=_language(target_lang))
    except RuntimeError as error:  # sacreBLEU's "requires extra dependencies"
        if name not in _EXTRAS:
            raise
        raise MissingTokenizerPackages(
            f"the BLEU tokenizer {name!r} (target language {target_lang!r}) needs packages that are not installed: "
            f"pip install 'sacrebleu[{_EXTRAS[name]}]' (or choose another tokenizer with "
            "{evaluation.bleu_tokenize}, e.g. intl)"
        ) from error
    except OSError as error:  # flores/spm download their SentencePiece model on first use
        raise OSError(f"the BLEU tokenizer {name!r} could not fetch its SentencePiece model: {error}") from error


@dataclasses.dataclass(frozen=True)
class Scores:
    """Corpus-level scores of one system output.

    Attributes:
        bleu: sacreBLEU score, 0-100.
        chrf: chrF2 score, 0-100.
        bleu_signature: sacreBLEU's signature string of the BLEU metric
            (``tok:`` names the tokenizer).
        chrf_signature: signature of the chrF metric.
        num_sentences: the number of scored sentences.
        bleu_tokenizer: the sacreBLEU tokenizer BLEU used (``"13a"``, ``"zh"``, ...).
    """

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    num_sentences: int
    bleu_tokenizer: str = "13a"

    def __str__(self) -> str:
        return (
            f"BLEU = {self.bleu:.2f} ({self.bleu_signature})\n"
            f"chrF = {self.chrf:.2f} ({self.chrf_signature})\n"
            f"sentences = {self.num_sentences}"
        )


def score_corpus(
    hypotheses: Sequence[str],
    references: Sequence[str],
    target_lang: str | None = None,
    tokenize: str | None = None,
) -> Scores:
    """Scores detokenized hypotheses against one reference each (sacreBLEU BLEU and chrF).

    Args:
        hypotheses: system translations, one string per sentence.
        references: reference translations, aligned with ``hypotheses``.
        target_lang: the language of the translations; picks BLEU's
            tokenizer (``zh``, ``ja-mecab``, ``ko-mecab``, else ``13a``).
        tokenize: an explicit sacreBLEU tokenizer (overrides ``target_lang``'s).

    Returns:
        :class:`Scores` with BLEU (cased, exp smoothing, the chosen tokenizer)
        and chrF.

    Raises:
        ValueError: if the two lists differ in length or are empty, or for an
            unknown ``tokenize``.
        MissingTokenizerPackages: see :func:`bleu_metric`.
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; they must align")
    if not hypotheses:
        raise ValueError("nothing to score: no hypotheses")
    bleu = bleu_metric(target_lang, tokenize)
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return Scores(
        bleu=float(bleu_score.score),
        chrf=float(chrf_score.score),
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        num_sentences=len(hypotheses),
        bleu_tokenizer=bleu_tokenizer_for(target_lang, tokenize),
    )
