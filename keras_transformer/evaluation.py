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

An explicit ``tokenize`` (``evaluation.bleu_tokenize``) overrides the choice, e.g.
``intl`` (Unicode punctuation and symbols split everywhere, for mixed
scripts) or ``char``. chrF (Popović, 2015) scores character n-grams and needs
no tokenizer, so it is computed the same way for every language.

**The literature's metric.** Papers on Multi30k (and the WMT16-18 multimodal
tasks) report BLEU on the official ``*.lc.norm.tok.*`` files: lowercased,
punctuation-normalized and tokenized with the Moses scripts
(``lowercase.perl``, ``normalize-punctuation.perl -l xx``, ``tokenizer.perl
-l xx``), scored on those tokens. :func:`tokenized_bleu` computes that figure
with sacremoses (the Python port of the same scripts; no escaping of ``&``,
``<``, quotes) and sacreBLEU on the tokens (``tokenize="none"``), so our
cased detokenized headline can be set next to published numbers. Its
signature is sacreBLEU's with ``tok:none``, prefixed with
``moses-lc-norm-tok:<lang>``. Scripts without spaces (zh, ja, ko) have no
such convention; their figure is not computed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import sacrebleu

from keras_transformer.settings import SettingsMessage

__all__ = [
    "BLEU_TOKENIZERS",
    "moses_lc_tokenize",
    "tokenized_bleu",
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
        tokenized_bleu: BLEU on lowercased, punctuation-normalized,
            Moses-tokenized text (the literature's Multi30k figure,
            :func:`tokenized_bleu`), or None (a target without that convention).
        tokenized_bleu_signature: its signature, or None.
    """

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    num_sentences: int
    bleu_tokenizer: str = "13a"
    tokenized_bleu: float | None = None
    tokenized_bleu_signature: str | None = None

    def __str__(self) -> str:
        tokenized = ""
        if self.tokenized_bleu is not None:
            tokenized = (f"BLEU lowercased, Moses-tokenized (the literature's) = {self.tokenized_bleu:.2f} "
                         f"({self.tokenized_bleu_signature})\n")
        return (
            f"BLEU = {self.bleu:.2f} ({self.bleu_signature})\n"
            f"{tokenized}"
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
        **_tokenized_fields(hypotheses, references, target_lang),
    )


#: Targets without the lowercased Moses-tokenized convention (no spaces between words).
_UNTOKENIZED_LANGUAGES = ("zh", "ja", "ko", "th")


def moses_lc_tokenize(sentences: Sequence[str], lang: str | None = None) -> list[str]:
    """Sentences as the official Multi30k ``*.lc.norm.tok.*`` files hold them.

    Lowercase, then Moses' punctuation normalization and tokenizer for
    ``lang`` (sacremoses, the Python port of ``normalize-punctuation.perl``
    and ``tokenizer.perl``; no XML escaping).

    Args:
        sentences: detokenized text, one string per sentence.
        lang: the language code (default ``en``'s rules).

    Returns:
        The space-separated tokens of each sentence (``list[str]``).
    """
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    lang = _language(lang) or "en"
    normalizer, tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [tokenizer.tokenize(normalizer.normalize(s.lower()), escape=False, return_str=True) for s in sentences]


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str],
                   target_lang: str | None = None) -> tuple[float, str]:
    """BLEU on lowercased, punctuation-normalized, Moses-tokenized text: the figure Multi30k papers report.

    Both sides go through :func:`moses_lc_tokenize`; sacreBLEU then scores
    the tokens as they are (``tokenize="none"``, exp smoothing, one reference).

    Args:
        hypotheses: detokenized system translations.
        references: detokenized references, aligned.
        target_lang: their language (the Moses rules), default ``en``'s.

    Returns:
        ``(bleu, signature)``: the score (0-100) and
        ``"moses-lc-norm-tok:<lang>+<sacreBLEU's signature>"``.

    Raises:
        ValueError: if the lists differ in length or are empty.
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(f"{len(hypotheses)} hypotheses and {len(references)} references: they must align, not empty")
    lang = _language(target_lang) or "en"
    metric = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    score = metric.corpus_score(moses_lc_tokenize(hypotheses, lang), [moses_lc_tokenize(references, lang)])
    return float(score.score), f"moses-lc-norm-tok:{lang}+{metric.get_signature()}"


def _tokenized_fields(hypotheses, references, target_lang) -> dict:
    if _language(target_lang) in _UNTOKENIZED_LANGUAGES:
        return {}
    bleu, signature = tokenized_bleu(hypotheses, references, target_lang)
    return {"tokenized_bleu": bleu, "tokenized_bleu_signature": signature}
