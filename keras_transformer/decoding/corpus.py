"""Translating a corpus: lines in, lines out, in length-sorted batches with a progress bar.

Used by the command line (``run``, ``evaluate``, ``translate``), the notebook
and users' scripts alike, with any of our translators: a
:class:`~keras_transformer.decoding.Translator`'s ``translate`` /
``translate_greedy``, a loaded SavedModel's ``serving_default`` signature, or a
:class:`~keras_transformer.decoding.ctranslate2.CTranslate2Translator`.

Lines are batched by length (the order of their lengths in characters), then
put back in input order: a batch of similar lengths pads little and finishes
its steps together (measured in ``scripts/bench/decode_vs_ctranslate2.py``).

n-best lists (:func:`n_best_lines`, :func:`format_n_best`,
:func:`parse_n_best_line`) use the Moses / fairseq text format, one hypothesis
per line, best first::

    <sentence index, 0-based> ||| <hypothesis> ||| <score>

where the score is beam search's ``log P / lp`` (Wu et al. 2016 length
penalty, Section 6.1), printed with 6 decimals.
"""

from __future__ import annotations

import concurrent.futures
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "translate_lines", "n_best_lines", "format_n_best", "parse_n_best_line", "warn_truncated", "NBEST_SEPARATOR",
]

#: Field separator of an n-best line (Moses, fairseq).
NBEST_SEPARATOR = " ||| "


def _values(x: Any) -> np.ndarray:
    """A tensor's or a list's values as a numpy array."""
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _map_batches(
    fn: Callable[[list[int]], tuple[list[int], list[Any], Any]],
    count: int,
    order: list[int],
    batch_size: int,
    workers: int,
    desc: str,
    progress: bool = True,
    line_offset: int = 0,
) -> tuple[list[Any], list[int]]:
    """Runs ``fn`` over batches of ``order`` with a progress bar; returns (results by index, truncated 1-based lines).

    ``fn(indices)`` returns ``(indices, one result per index, truncated flags)``;
    the truncated line numbers count from ``line_offset + 1``. ``progress``
    False: no bar (a stream translated batch by batch).
    """
    from tqdm import tqdm

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    out: list[Any] = [None] * count
    truncated: list[int] = []
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    with tqdm(total=count, desc=desc, unit="sent", file=sys.stderr, disable=None if progress else True) as bar, \
            concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(fn, batches) if workers > 1 else map(fn, batches)
        for indices, values, flags in results:
            truncated.extend(line_offset + i + 1 for i, flag in zip(indices, flags) if flag)
            for i, value in zip(indices, values):
                out[i] = value
            bar.update(len(indices))
    truncated.sort()
    return out, truncated


def warn_truncated(truncated: list[int], total: int, what: str) -> None:
    """Names (on stderr) the 1-based lines whose text exceeded the model's ``max_length``.

    Args:
        truncated: sorted 1-based line numbers (nothing is printed when empty).
        total: the number of lines.
        what: how those lines were handled, e.g. ``"translated from their
            first max_length - 1 pieces"``.
    """
    if truncated:
        shown = ", ".join(str(n) for n in truncated[:20]) + (", ..." if len(truncated) > 20 else "")
        print(
            f"warning: {len(truncated)} of {total} sentences are longer than the model's max_length and were "
            f"{what} (lines {shown})",
            file=sys.stderr,
            flush=True,
        )


_warn_lines = warn_truncated  # translate_lines' argument of the same name shadows it


def _length_order(lines: Sequence[str], sort_by_length: bool) -> list[int]:
    return sorted(range(len(lines)), key=lambda i: len(lines[i])) if sort_by_length else list(range(len(lines)))


def translate_lines(
    translate_fn: Callable[[Any], dict[str, Any]],
    lines: Sequence[str],
    batch_size: int = 64,
    desc: str = "translating",
    sort_by_length: bool = True,
    workers: int = 1,
    warn_truncated: bool = True,
    progress: bool = True,
    line_offset: int = 0,
) -> list[str]:
    """Translates ``lines`` in batches with a progress bar; returns them in input order.

    Args:
        translate_fn: maps a 1-D ``tf.string`` tensor of ``B`` sentences to a
            dict holding ``"translations"`` (``B`` strings: a ``tf.string``
            tensor, or ``bytes``/``str`` items) and optionally ``"truncated"``
            (``B`` bools), e.g. a Translator's ``translate`` or a SavedModel's
            ``serving_default``.
        lines: sentences (``str``).
        batch_size: sentences per call, int >= 1.
        desc: progress-bar label.
        sort_by_length: batch lines of similar length together (then restore
            the order); False keeps the input order in the batches too.
        workers: batches translated at once, from that many threads (int
            >= 1). On a CPU, decoding a small model uses one core poorly
            (small matrix products, one op after another): with TensorFlow's
            intra-op threads set to 1, ``workers`` = 2 x cores translated
            about 2x the sentences/s of one batch at a time on all cores
            (``scripts/bench/decode_vs_ctranslate2.py``, setting 4x1).
        warn_truncated: print the warning about over-long lines (below);
            False for a caller that translates the same lines again and
            again (validation during training) and has warned once.

    Returns:
        One ``str`` translation per line, in order. Lines whose source was
        longer than the model's ``max_length`` (``truncated`` in the result)
        are named (1-based) in a warning on stderr: their translation is the
        one of the source's first ``max_length - 1`` pieces, never a silent
        cut.

    Raises:
        ValueError: if ``batch_size`` < 1, or ``translate_fn`` returns another
            number of translations than it was given sentences.
    """
    import tensorflow as tf

    lines = list(lines)

    def translate_batch(indices):
        result = translate_fn(tf.constant([lines[i] for i in indices], tf.string))
        translations = _values(result["translations"]).tolist()
        if len(translations) != len(indices):
            raise ValueError(f"translate_fn returned {len(translations)} translations for {len(indices)} sentences")
        flags = _values(result["truncated"]) if "truncated" in result else [False] * len(indices)
        return indices, [_text(t) for t in translations], flags

    out, truncated = _map_batches(
        translate_batch, len(lines), _length_order(lines, sort_by_length), batch_size, workers, desc, progress,
        line_offset,
    )
    if warn_truncated:  # the argument; the function of that name is _warn_lines here
        _warn_lines(truncated, line_offset + len(out), "translated from their first max_length - 1 pieces")
    return out


def n_best_lines(
    n_best_fn: Callable[[Any], dict[str, Any]],
    lines: Sequence[str],
    n: int,
    batch_size: int = 64,
    desc: str = "translating",
    sort_by_length: bool = True,
    workers: int = 1,
    progress: bool = True,
    line_offset: int = 0,
) -> list[list[tuple[str, float]]]:
    """The ``n`` best hypotheses of every line, with their beam-search scores (Section 6.1).

    Args:
        n_best_fn: maps a 1-D ``tf.string`` tensor of ``B`` sentences to a
            dict holding ``"translations"`` ``[B, beam]`` strings and
            ``"scores"`` ``[B, beam]`` float32, best first, ``-inf`` for a
            slot without a hypothesis (and optionally ``"truncated"`` ``[B]``
            bools): a Translator's ``translate_n_best`` or a SavedModel's
            ``n_best`` signature.
        lines: sentences (``str``).
        n: hypotheses per line, ``1 <= n <= beam``.
        batch_size, desc, sort_by_length, workers, progress, line_offset: as
            in :func:`translate_lines`.

    Returns:
        For each line, in order, a list of ``(hypothesis, score)``: the ``n``
        best, in decreasing score; fewer only when fewer hypotheses exist
        (slots scored ``-inf`` are left out: an empty input has one, ``""``
        with score 0). The first hypothesis is :func:`translate_lines`'s
        translation with the same search. Truncated sources are named in a
        warning on stderr, as in :func:`translate_lines`.

    Raises:
        ValueError: if ``n`` < 1 or more than the search's beam size (naming
            both), or ``n_best_fn`` returns another number of rows than it
            was given sentences.
    """
    import tensorflow as tf

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n-best size must be an int >= 1, got {n!r}")
    lines = list(lines)

    def n_best_batch(indices):
        result = n_best_fn(tf.constant([lines[i] for i in indices], tf.string))
        texts, scores = _values(result["translations"]), _values(result["scores"])
        if texts.shape[0] != len(indices) or scores.shape != texts.shape:
            raise ValueError(
                f"n_best_fn returned translations of shape {texts.shape} and scores of shape {scores.shape} for "
                f"{len(indices)} sentences"
            )
        if texts.ndim != 2 or n > texts.shape[1]:
            beam = texts.shape[1] if texts.ndim == 2 else 1
            raise ValueError(f"n-best size {n} exceeds the beam size {beam}: at most {beam} hypotheses per sentence")
        rows = [
            [(_text(text), float(score)) for text, score in zip(row_texts[:n], row_scores[:n]) if score > -np.inf]
            for row_texts, row_scores in zip(texts.tolist(), scores.tolist())
        ]
        flags = _values(result["truncated"]) if "truncated" in result else [False] * len(indices)
        return indices, rows, flags

    out, truncated = _map_batches(
        n_best_batch, len(lines), _length_order(lines, sort_by_length), batch_size, workers, desc, progress,
        line_offset,
    )
    warn_truncated(truncated, line_offset + len(out), "translated from their first max_length - 1 pieces")
    return out


def format_n_best(n_best: Sequence[Sequence[tuple[str, float]]], start: int = 0) -> str:
    """n-best lists as text: ``index ||| hypothesis ||| score`` lines (Moses, fairseq).

    Args:
        n_best: per sentence, ``(hypothesis, score)`` pairs best first (the
            output of :func:`n_best_lines`).
        start: the index of the first sentence (0-based numbering by default).

    Returns:
        The lines, each ending with ``"\n"``; the score with 6 decimals.
    """
    return "".join(
        f"{start + index}{NBEST_SEPARATOR}{text}{NBEST_SEPARATOR}{score:.6f}\n"
        for index, entries in enumerate(n_best)
        for text, score in entries
    )


def parse_n_best_line(line: str) -> tuple[int, str, float]:
    """``(index, hypothesis, score)`` of one line written by :func:`format_n_best`.

    The index is the first field and the score the last, so a hypothesis
    that itself contains ``" ||| "`` is read back whole.

    Raises:
        ValueError: for a line without the three fields, a non-integer index
            or a non-numeric score (quoting the line).
    """
    text = line.rstrip("\n")
    head, sep1, rest = text.partition(NBEST_SEPARATOR)
    middle, sep2, tail = rest.rpartition(NBEST_SEPARATOR)
    try:
        if not (sep1 and sep2):
            raise ValueError
        return int(head), middle, float(tail)
    except ValueError:
        raise ValueError(f"not an n-best line (index ||| hypothesis ||| score): {text!r}") from None
