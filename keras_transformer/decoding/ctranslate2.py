"""Translating with a CTranslate2 export (the fastest CPU path), as the TF Translator does.

:class:`CTranslate2Translator` runs a directory written by
:func:`keras_transformer.export.export_ctranslate2` (layout:
:mod:`keras_transformer.decoding.ctranslate2_format`) with CTranslate2's
``Translator.translate_batch`` and follows the TF
:class:`~keras_transformer.decoding.Translator`'s conventions: its text
rules (:mod:`keras_transformer.decoding.text`, the Python-string twins),
source = pieces + EOS, the per-sentence output limit of Section 6.1 and our
scores. ``pip install 'keras_transformer[ctranslate2]'``; ``ctranslate2`` is
imported only when a translator is made.

Mismatches handled here: CTranslate2's ``max_decoding_length`` counts
generated tokens (EOS included when it is generated; a hypothesis reaching
it simply stops) and is one number per call, its default
``min_decoding_length=1`` forbids an immediate EOS, and its beam search
normalizes by ``|Y|^alpha`` instead of Wu et al.'s ``((5 + |Y|) / 6)^alpha``;
the class docstring says how each is handled.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from collections.abc import Sequence
from typing import Any

from keras_transformer.decoding.ctranslate2_format import (
    CT2_FILES,
    CT2_RECORD_FILENAME,
    CT2_VOCAB_FILENAME,
    DECODING_KEYS,
    EOS_TOKEN,
    RECORD_FORMAT,
    check_int,
    decoding_settings,
    import_ctranslate2,
    placeholder_token,
)
from keras_transformer.data.placeholders import has_placeholder, mask_str, restore_str
from keras_transformer.decoding.text import copied_through_str, fold_whitespace_str, is_blank_str, valid_str

__all__ = ["CTranslate2Translator"]


def _read_record(model_dir: str) -> dict[str, Any]:
    """The export's record (``keras_transformer.json``) after checking the directory's files and its entries.

    Raises:
        ValueError: for a missing directory or file (naming them), an
            unreadable record, another format, or a missing entry.
    """
    if not os.path.isdir(model_dir):
        raise ValueError(f"not a directory: {model_dir}")
    needed = (*CT2_FILES, CT2_VOCAB_FILENAME, CT2_RECORD_FILENAME)
    missing = [name for name in needed if not os.path.isfile(os.path.join(model_dir, name))]
    if missing:
        raise ValueError(
            f"{model_dir} is not a keras_transformer CTranslate2 export (made by export_ctranslate2): "
            f"missing {', '.join(missing)}"
        )
    path = os.path.join(model_dir, CT2_RECORD_FILENAME)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"unreadable {path}: {e}") from e
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise ValueError(f"{path} is not a {RECORD_FORMAT} record")
    try:
        for key in ("sha256", "vocab_size"):
            record["tokenizer"][key]
        for key in DECODING_KEYS:
            record["decoding"][key]
        record["model_config"]["max_length"], record["vocab_size"]
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path} lacks the entry {e}") from None
    return record


class CTranslate2Translator:
    """Translates sentences with a directory written by :func:`~keras_transformer.export.export_ctranslate2`.

    Follows the TF :class:`keras_transformer.decoding.Translator`'s
    conventions (Section 6.1; the text rules of
    :mod:`keras_transformer.decoding.text`, on Python strings):

    * source = pieces + EOS; a source of more than ``max_length - 1`` pieces
      is translated from its first ``max_length - 1`` pieces and flagged in
      ``truncated`` (never silently);
    * maximum output length per sentence = source length (EOS included) +
      ``extra_decode_length``, capped by ``max_length``, EOS included.
      CTranslate2 takes one ``max_decoding_length`` per call: the batch is
      decoded with its largest limit and the (rare) sentences whose output
      exceeds their own limit are decoded again with it, so every output
      respects its sentence's limit. A hypothesis that reaches the limit
      ends there, without the EOS our search would force;
    * empty or whitespace-only input (ASCII whitespace, Unicode separators)
      gives ``""`` with score 0 and is not sent to the model;
    * unknown input (the TF Translator's rule): a sentence with unknown
      pieces (``unk``, byte fallback) and no known word is copied through
      with its whitespace folded (score 0, ``output_ids`` ``[]``, not sent
      to the model); otherwise only known pieces count toward the output
      limit above;
    * lone surrogates are treated as invalid UTF-8 bytes: U+FFFD;
    * ``beam_size=1`` is greedy search: the same tokens as
      ``Translator.translate_greedy`` up to float rounding (near-ties of
      two logits may break differently).

    Differences of beam search (``beam_size > 1``): CTranslate2 ranks
    finished hypotheses by ``log P / |Y|^alpha`` (``|Y|`` with EOS, as
    ``return_end_token=True`` counts it) where ours uses Wu et al.'s
    ``log P / ((5 + |Y|) / 6)^alpha``, and stops when ``beam_size`` hypotheses
    are finished, so beam outputs can differ from the TF Translator's.
    Scores are reported in our convention: CTranslate2's ``log P`` (recovered
    as ``score * |Y|^alpha``) divided by ``((5 + |Y|) / 6)^alpha``, ``|Y|``
    counting EOS (for a hypothesis cut at the limit, ``log P`` has no EOS term).

    Args:
        model_dir: the exported directory.
        beam_size: beams per sentence (int >= 1, 1 = greedy); default: the
            export's ``decoding`` record.
        length_penalty: alpha >= 0; default: the export's.
        max_length: longest source (pieces + EOS) and output (tokens + EOS),
            int in ``[2, model max_length]``; default: the export's.
        extra_decode_length: int >= 0; default: the export's.
        compute_type: CTranslate2 compute type (``"default"`` keeps the
            exported weight type; e.g. ``"int8"``, ``"float32"``).
        inter_threads: parallel translations (CTranslate2 workers).
        intra_threads: threads per translation (0 = CTranslate2's default).
        device: ``"cpu"`` (default), ``"cuda"`` or ``"auto"``.
        max_batch_size: CTranslate2 sorts a call's sentences by length and
            decodes them in batches of at most this many (0 = all at once).
        no_repeat_ngram_size, repetition_penalty: CTranslate2's repetition
            guard options (off by default).
        placeholders: carry numbers, web and e-mail addresses through, as the
            ``Translator`` does (:mod:`keras_transformer.data.placeholders`;
            vocabularies with the placeholder piece only).

    Raises:
        ImportError: when ctranslate2 is not installed (the message says
            ``pip install 'keras_transformer[ctranslate2]'``).
        ValueError: for a directory that is not one of our exports (naming
            the missing files), a SentencePiece model whose sha256 differs
            from the record's (naming both), or a bad decoding setting.

    Source: CTranslate2's ``Translator.translate_batch``; decoding after
    Section 6.1 of the paper.

    Example:

    >>> translator = CTranslate2Translator("export/ct2", beam_size=1)   # doctest: +SKIP
    >>> translator(["A dog runs."])                                      # doctest: +SKIP
    ['Ein Hund läuft.']
    """

    def __init__(
        self,
        model_dir: str | os.PathLike,
        beam_size: int | None = None,
        length_penalty: float | None = None,
        max_length: int | None = None,
        extra_decode_length: int | None = None,
        compute_type: str = "default",
        inter_threads: int = 1,
        intra_threads: int = 0,
        device: str = "cpu",
        max_batch_size: int = 32,
        no_repeat_ngram_size: int = 0,
        repetition_penalty: float = 1.0,
        placeholders: bool = True,
    ):
        ct2 = import_ctranslate2()
        import sentencepiece as spm

        self.model_dir = os.path.abspath(os.fspath(model_dir))
        self.record = _read_record(self.model_dir)
        with open(os.path.join(self.model_dir, CT2_VOCAB_FILENAME), "rb") as f:
            model_bytes = f.read()
        expected = self.record["tokenizer"]["sha256"]
        actual = hashlib.sha256(model_bytes).hexdigest()
        if actual != expected:
            raise ValueError(
                f"vocabulary mismatch in {self.model_dir}: {CT2_RECORD_FILENAME} records SentencePiece sha256 "
                f"{expected}, but {CT2_VOCAB_FILENAME} has sha256 {actual}"
            )
        given = {"beam_size": beam_size, "length_penalty": length_penalty, "max_length": max_length,
                 "extra_decode_length": extra_decode_length}
        settings = {**self.record["decoding"], **{k: v for k, v in given.items() if v is not None}}
        model_max_length = int(self.record["model_config"]["max_length"])
        settings = decoding_settings("CTranslate2Translator", settings, model_max_length)
        self.max_length = settings["max_length"]
        self.extra_decode_length = settings["extra_decode_length"]
        self.beam_size = settings["beam_size"]
        self.length_penalty = settings["length_penalty"]
        self.max_batch_size = check_int("CTranslate2Translator", "max_batch_size", max_batch_size, 0)
        from keras_transformer.decoding.search.logits import check_repetition_settings

        # CTranslate2's own options of the same names (the Translator's repetition guard).
        self.no_repeat_ngram_size, self.repetition_penalty = check_repetition_settings(
            no_repeat_ngram_size, repetition_penalty)
        self._processor = spm.SentencePieceProcessor()
        self._processor.LoadFromSerializedProto(model_bytes)
        self._vocab_size = int(self._processor.get_piece_size())
        from keras_transformer.data.tokenizer import piece_masks

        self._unknown, self._word = piece_masks(self._processor)
        # Numbers and addresses carried through, as the Translator does (vocabularies with the piece only).
        self.placeholders = bool(placeholders) and has_placeholder(self._processor)
        # CTranslate2's vocabulary: the pieces by id, then the export's placeholders up to the model's size.
        self._pieces = [self._processor.id_to_piece(i) for i in range(self._vocab_size)]
        self._pieces += [placeholder_token(i) for i in range(self._vocab_size, int(self.record["vocab_size"]))]
        self._ids = {piece: i for i, piece in enumerate(self._pieces)}
        self.translator = ct2.Translator(
            self.model_dir, device=device, compute_type=compute_type,
            inter_threads=inter_threads, intra_threads=intra_threads,
        )

    def get_config(self) -> dict[str, Any]:
        """The decoding settings and the model directory (JSON-serializable)."""
        return {"max_length": self.max_length, "extra_decode_length": self.extra_decode_length,
                "beam_size": self.beam_size, "length_penalty": self.length_penalty,
                "no_repeat_ngram_size": self.no_repeat_ngram_size, "repetition_penalty": self.repetition_penalty,
                "placeholders": self.placeholders, "max_batch_size": self.max_batch_size, "model_dir": self.model_dir}

    def _run(self, sources: list[list[int]], steps: int) -> list[tuple[list[int], float]]:
        """One CTranslate2 call: ``(ids without EOS, log P)`` per source, at most ``steps`` tokens."""
        results = self.translator.translate_batch(
            [[self._pieces[i] for i in source] for source in sources],
            max_batch_size=self.max_batch_size,
            beam_size=self.beam_size,
            length_penalty=self.length_penalty,
            max_decoding_length=steps,
            min_decoding_length=0,  # CTranslate2's default 1 would forbid an immediate EOS
            max_input_length=0,  # sources are truncated here, with the flag
            return_scores=True,
            return_end_token=True,  # |Y| counts EOS, as ours does
            no_repeat_ngram_size=self.no_repeat_ngram_size,
            repetition_penalty=self.repetition_penalty,
        )
        outputs = []
        for result in results:
            tokens = result.hypotheses[0]
            log_prob = float(result.scores[0]) * len(tokens) ** self.length_penalty
            if tokens and tokens[-1] == EOS_TOKEN:
                tokens = tokens[:-1]
            outputs.append(([self._ids[t] for t in tokens], log_prob))
        return outputs

    def _decode(self, sources: list[list[int]], limits: list[int]) -> list[tuple[list[int], float]]:
        steps = [limit - 1 for limit in limits]  # tokens before the EOS our search would force
        outputs = self._run(sources, max(steps)) if sources else []
        over = sorted((j for j, (ids, _) in enumerate(outputs) if len(ids) > steps[j]), key=steps.__getitem__)
        for limit, group in itertools.groupby(over, key=steps.__getitem__):
            group = list(group)
            for j, output in zip(group, self._run([sources[j] for j in group], limit)):
                outputs[j] = output
        return outputs

    def translate(self, sentences: Sequence[str]) -> dict[str, list]:
        """Translates a batch of sentences (Section 6.1; beam size 1 = greedy).

        Args:
            sentences: list of ``str`` (any length, empty allowed).

        Returns:
            dict of lists with one entry per input, in order:
            ``translations`` (``str``), ``scores`` (``float``, ``log P /
            lp(Y)`` in our convention, see the class docstring; 0.0 for empty
            and copied input), ``truncated`` (``bool``, the source was cut to
            ``max_length - 1`` pieces) and ``output_ids`` (``list[int]``,
            the output ids ending with EOS, as ``Translator``'s
            ``output_ids`` without padding; ``[]`` for empty and copied input).

        Raises:
            TypeError: if ``sentences`` is a single ``str`` or holds a non-``str``.
        """
        if isinstance(sentences, (str, bytes)):
            raise TypeError("CTranslate2Translator.translate takes a list of str, got one str")
        sentences = list(sentences)
        if not all(isinstance(s, str) for s in sentences):
            raise TypeError("CTranslate2Translator.translate takes a list of str")
        texts = [valid_str(s) for s in sentences]
        spans = [mask_str(t) if self.placeholders else (t, []) for t in texts]
        masked = [m for m, _ in spans]
        n = len(texts)
        out = {"translations": [""] * n, "scores": [0.0] * n, "truncated": [False] * n,
               "output_ids": [[] for _ in range(n)]}
        keep = self.max_length - 1
        jobs = []
        for i, (text, pieces) in enumerate(zip(texts, self._processor.encode(masked) if texts else [])):
            out["truncated"][i] = len(pieces) > keep
            if pieces and not is_blank_str(text):
                pieces = pieces[:keep]
                unknown = [bool(self._unknown[p]) for p in pieces]
                if copied_through_str(unknown, (self._word[p] for p in pieces), text):
                    out["translations"][i] = fold_whitespace_str(text)  # nothing the vocabulary knows: copied
                    continue
                known = len(pieces) - sum(unknown)
                jobs.append((i, pieces, min(known + 1 + self.extra_decode_length, self.max_length)))
        outputs = self._decode([pieces for _, pieces, _ in jobs], [limit for *_, limit in jobs])
        for (i, _, _), (ids, log_prob) in zip(jobs, outputs):
            kept = [t for t in ids if t not in (0, 2) and t < self._vocab_size]
            out["translations"][i] = restore_str(self._processor.decode(kept), spans[i][1])
            out["scores"][i] = log_prob / math.pow((5.0 + len(ids) + 1) / 6.0, self.length_penalty)
            out["output_ids"][i] = ids + [3]
        return out

    def __call__(self, sentences: Sequence[str]) -> list[str]:
        """The translations of :meth:`translate` (``list[str]``, one per input)."""
        return self.translate(sentences)["translations"]
