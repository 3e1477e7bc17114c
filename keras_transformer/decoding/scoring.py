"""Scoring given translations (forced decoding) over a corpus: filtering parallel data, reranking.

:meth:`keras_transformer.decoding.Translator.score` (and a SavedModel's
``score`` signature) teacher-forces each target through the model (Section
3.1) and returns ``log P(Y|X)`` and the length-normalised score that beam
search ranks hypotheses by (Section 6.1, Wu et al. 2016, Eq. 14)::

    score = log P(Y|X) / lp(Y),    lp(Y) = ((5 + |Y|) / 6) ** alpha,

``|Y|`` counting the target's SentencePiece pieces and EOS. This module reads
aligned files (:func:`read_aligned_lines`), scores them in length-sorted
batches (:func:`score_lines`) and writes one line per pair
(:func:`format_scores`; :func:`parse_score_line` reads it back), tab-separated::

    <score>\t<log_prob>\t<num_tokens>                              (default)
    <score>\t<log_prob>\t<num_tokens>\t<pieces>\t<token log-probs>  (per_token)

``score`` and ``log_prob`` are natural logarithms with 6 decimals;
``num_tokens`` counts pieces + EOS; ``pieces`` are the target's SentencePiece
pieces and the EOS piece (``</s>``), separated by single spaces (a piece never
contains a space: SentencePiece writes word boundaries as ``▁``), and the
token log-probabilities, space-separated, are aligned with them and sum to
``log_prob``. The same line format is used by ``keras-transformer score``.

Empty lines: an empty target is scored as EOS alone (``num_tokens`` 1); an
empty source is scored as the model sees it (EOS alone), not answered
without the model as ``translate`` does (see
:class:`~keras_transformer.decoding.Translator`). A source or target longer
than the model's ``max_length - 1`` pieces is scored from its first
``max_length - 1`` pieces and named in a warning (never silently).
"""

from __future__ import annotations

import dataclasses
import gzip
import os
from collections.abc import Callable, Sequence
from typing import Any

from keras_transformer.decoding.corpus import _map_batches, _values, warn_truncated

__all__ = [
    "PairScore", "decode_lines", "read_text_lines", "read_aligned_lines", "score_lines", "format_scores",
    "parse_score_line",
]


@dataclasses.dataclass(frozen=True)
class PairScore:
    """The forced-decoding score of one (source, target) pair.

    Attributes:
        score: ``log_prob / lp(num_tokens)`` (float, natural log; the scale
            of beam search's scores).
        log_prob: ``log P(target | source)``, the sum of the token
            log-probabilities, EOS included (float, natural log).
        num_tokens: target pieces + EOS (int >= 1).
        truncated: the source or the target had more than ``max_length - 1``
            pieces and was scored from its first ``max_length - 1``.
        pieces: the target's pieces and EOS (``tuple[str, ...]``), or None
            when not asked for.
        token_log_probs: ``log P`` of each of ``pieces`` (``tuple[float,
            ...]``), or None.
    """

    score: float
    log_prob: float
    num_tokens: int
    truncated: bool = False
    pieces: tuple[str, ...] | None = None
    token_log_probs: tuple[float, ...] | None = None


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 text file (plain or ``.gz``), empty lines kept.

    A line ends at ``\\n`` (a ``\\r`` before it is dropped); other Unicode
    line separators (U+2028, form feed) stay inside their line, so line *i*
    of the result is line *i* of the file. Surrounding spaces are kept (the
    tokenizer sees the line as written).

    Args:
        path: the file.

    Returns:
        ``list[str]``, one per line.

    Raises:
        FileNotFoundError: naming a missing file.
        ValueError: for a directory, or a line that is not UTF-8 (naming the
            file, the 1-based line and the byte column).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"file not found: {path}")
    if os.path.isdir(path):
        raise ValueError(f"expected a text file but got a directory: {path}")
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        data = f.read()
    return decode_lines(data, path)


def decode_lines(data: bytes, name: str) -> list[str]:
    """UTF-8 ``data`` as lines, as :func:`read_text_lines` splits a file.

    Args:
        data: the bytes (a file's, or stdin's).
        name: what they are, for the error message (a path, ``"stdin"``).

    Returns:
        ``list[str]``, one per ``\\n``-terminated line (a ``\\r`` before it dropped).

    Raises:
        ValueError: naming ``name``, the 1-based line and the byte column of
            the first invalid UTF-8 sequence.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise ValueError(f"{name}, line {line}: not UTF-8 (invalid byte at column {column})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_aligned_lines(source_path: str | os.PathLike, target_path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Two line-aligned files (line *i* of the target translates line *i* of the source).

    Args:
        source_path: source sentences, UTF-8, one per line (``.gz`` allowed).
        target_path: target sentences, the same number of lines.

    Returns:
        ``(sources, targets)``, two ``list[str]`` of equal length; empty lines
        are kept (they are scored, see the module docstring).

    Raises:
        FileNotFoundError: naming a missing file.
        ValueError: naming the file and line of invalid UTF-8, or both files
            and both line counts when they differ.
    """
    sources, targets = read_text_lines(source_path), read_text_lines(target_path)
    if len(sources) != len(targets):
        raise ValueError(
            f"mismatched line counts: {os.fspath(source_path)} has {len(sources)} lines but "
            f"{os.fspath(target_path)} has {len(targets)} lines; line i of one must translate line i of the other"
        )
    return sources, targets


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def score_lines(
    score_fn: Callable[[Any, Any], dict[str, Any]],
    sources: Sequence[str],
    targets: Sequence[str],
    batch_size: int = 64,
    per_token: bool = False,
    desc: str = "scoring",
    sort_by_length: bool = True,
) -> list[PairScore]:
    """Forced-decoding scores of aligned sentences, in batches with a progress bar.

    Args:
        score_fn: ``(tf.string [B], tf.string [B]) -> dict`` with the outputs
            of :meth:`Translator.score
            <keras_transformer.decoding.Translator.score>` (``score``,
            ``log_prob``, ``num_tokens``, ``truncated``, and for
            ``per_token`` ``target_pieces`` and ``token_log_probs``), e.g. a
            Translator's ``score`` or a SavedModel's ``score`` signature
            (:func:`keras_transformer.decoding.load.open_translator` gives
            either as ``.score``).
        sources: source sentences (``str``).
        targets: ``targets[i]`` a translation of ``sources[i]``.
        batch_size: pairs per call, int >= 1 (the call holds ``[batch,
            target length, vocab]`` float32 logits).
        per_token: also return each target piece and its log-probability.
        desc: progress-bar label.
        sort_by_length: batch pairs of similar length together (less
            padding); results are in input order either way.

    Returns:
        One :class:`PairScore` per pair, in order. Pairs with a side longer
        than the model's ``max_length - 1`` pieces are named (1-based) in a
        warning on stderr.

    Raises:
        ValueError: if ``sources`` and ``targets`` differ in length,
            ``batch_size`` < 1, or ``score_fn`` returns another number of
            scores than it was given pairs.
    """
    import tensorflow as tf

    sources, targets = list(sources), list(targets)
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets: scoring needs aligned pairs")

    def score_batch(indices):
        result = score_fn(
            tf.constant([sources[i] for i in indices], tf.string), tf.constant([targets[i] for i in indices], tf.string)
        )
        scores, log_probs = _values(result["score"]), _values(result["log_prob"])
        num_tokens, flags = _values(result["num_tokens"]), _values(result["truncated"])
        if scores.shape != (len(indices),):
            raise ValueError(f"score_fn returned {scores.shape[0] if scores.ndim else 1} scores for {len(indices)} pairs")
        if per_token:
            pieces, token_log_probs = _values(result["target_pieces"]), _values(result["token_log_probs"])
        rows = []
        for j in range(len(indices)):
            n = int(num_tokens[j])
            extra = {}
            if per_token:
                extra = {
                    "pieces": tuple(_text(p) for p in pieces[j, :n].tolist()),
                    "token_log_probs": tuple(float(x) for x in token_log_probs[j, :n]),
                }
            rows.append(PairScore(float(scores[j]), float(log_probs[j]), n, bool(flags[j]), **extra))
        return indices, rows, flags

    order = list(range(len(sources)))
    if sort_by_length:
        order.sort(key=lambda i: len(sources[i]) + len(targets[i]))
    out, truncated = _map_batches(score_batch, len(sources), order, batch_size, 1, desc)
    warn_truncated(truncated, len(out), "scored from their first max_length - 1 pieces (source or target)")
    return out


def format_scores(scores: Sequence[PairScore], per_token: bool = False) -> str:
    """Score lines (the module docstring's format), each ending with ``"\\n"``.

    Args:
        scores: :class:`PairScore` per pair, e.g. from :func:`score_lines`.
        per_token: add the pieces and their log-probabilities (the scores
            must hold them).

    Returns:
        ``str``: ``score<TAB>log_prob<TAB>num_tokens[<TAB>pieces<TAB>log-probs]``
        per pair, numbers with 6 decimals.

    Raises:
        ValueError: when ``per_token`` is asked of scores without pieces.
    """
    lines = []
    for pair in scores:
        fields = [f"{pair.score:.6f}", f"{pair.log_prob:.6f}", str(pair.num_tokens)]
        if per_token:
            if pair.pieces is None or pair.token_log_probs is None:
                raise ValueError("per_token needs scores computed with per_token=True")
            fields += [" ".join(pair.pieces), " ".join(f"{x:.6f}" for x in pair.token_log_probs)]
        lines.append("\t".join(fields) + "\n")
    return "".join(lines)


def parse_score_line(line: str) -> PairScore:
    """A :class:`PairScore` from one line of :func:`format_scores` (``truncated`` is not in the line: False).

    Raises:
        ValueError: for a line of neither 3 nor 5 tab-separated fields, bad
            numbers, or pieces and log-probabilities of different counts
            (quoting the line).
    """
    text = line.rstrip("\n")
    fields = text.split("\t")
    try:
        if len(fields) not in (3, 5):
            raise ValueError
        score, log_prob, num_tokens = float(fields[0]), float(fields[1]), int(fields[2])
        if len(fields) == 3:
            return PairScore(score, log_prob, num_tokens)
        pieces = tuple(fields[3].split(" "))
        token_log_probs = tuple(float(x) for x in fields[4].split(" "))
        if len(pieces) != len(token_log_probs) or len(pieces) != num_tokens:
            raise ValueError
        return PairScore(score, log_prob, num_tokens, pieces=pieces, token_log_probs=token_log_probs)
    except ValueError:
        raise ValueError(
            f"not a score line (score, log_prob, num_tokens[, pieces, token log-probs], tab-separated): {text!r}"
        ) from None
