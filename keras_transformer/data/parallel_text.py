"""Parallel text: aligned sentence pairs, and reading them from line-aligned files and TSV files.

Every reader of the package (these, and those of
:mod:`~keras_transformer.data.multi30k`, :mod:`~keras_transformer.data.tatoeba`
and :mod:`~keras_transformer.data.tfds`) returns a :class:`ParallelText`: two
aligned lists of sentences and a :class:`ReadReport` that counts what was read
and what was skipped. The ``iter_*`` readers stream the same pairs one at a
time, for corpora too large for memory.

Bad input policy (``on_error``), the same for every reader:

* ``"raise"`` (default): a ``ValueError`` naming the file and the 1-based line
  (empty line on one side, invalid UTF-8, a TSV line with too few fields).
* ``"skip"``: the pair is dropped, counted in the report (per reason) and the
  first few locations are kept in ``report.examples``.
* Mismatched line counts always raise, in both modes: the alignment of every
  line is then in doubt, so there is nothing safe to skip. The message names
  both files and both counts.
* A missing file raises ``FileNotFoundError`` naming the path.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
from collections.abc import Iterator
from typing import Any

__all__ = [
    "ParallelText",
    "ReadReport",
    "iter_parallel_files",
    "iter_tsv_pairs",
    "read_parallel_files",
    "read_tsv_pairs",
]

_MAX_EXAMPLES = 10


@dataclasses.dataclass
class ReadReport:
    """Counts of one read of parallel text.

    Attributes:
        source: a description of what was read (paths or dataset name).
        pairs_read: pairs (lines) looked at.
        pairs_kept: pairs returned.
        skipped_empty: pairs skipped because a side was empty.
        skipped_invalid_utf8: pairs skipped because a side was not UTF-8.
        skipped_bad_fields: TSV lines skipped for too few fields.
        examples: ``"file:line: reason"`` of the first few skips.
    """

    source: str
    pairs_read: int = 0
    pairs_kept: int = 0
    skipped_empty: int = 0
    skipped_invalid_utf8: int = 0
    skipped_bad_fields: int = 0
    examples: list[str] = dataclasses.field(default_factory=list)

    @property
    def skipped(self) -> int:
        """All skipped pairs."""
        return self.skipped_empty + self.skipped_invalid_utf8 + self.skipped_bad_fields

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict of the counts (and ``skipped``)."""
        return dict(dataclasses.asdict(self), skipped=self.skipped)

    def summary(self) -> str:
        """One line for logs, e.g. ``"train.en|train.de: 29000 read, 29000 kept, 0 skipped"``."""
        text = f"{self.source}: {self.pairs_read} read, {self.pairs_kept} kept, {self.skipped} skipped"
        if self.skipped:
            text += (
                f" (empty={self.skipped_empty}, invalid_utf8={self.skipped_invalid_utf8}, "
                f"bad_fields={self.skipped_bad_fields}; first: {'; '.join(self.examples[:3])})"
            )
        return text


@dataclasses.dataclass
class ParallelText:
    """Aligned sentence pairs: ``sources[i]`` translates to ``targets[i]``.

    Attributes:
        sources: source sentences (``list[str]``).
        targets: target sentences (``list[str]``), same length.
        report: the :class:`ReadReport` of the read.
    """

    sources: list[str]
    targets: list[str]
    report: ReadReport

    def __len__(self) -> int:
        return len(self.sources)


def _check_on_error(on_error: str) -> None:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")


def _open_binary(path: str):
    if not os.path.exists(path):
        raise FileNotFoundError(f"parallel data file not found: {path}")
    if os.path.isdir(path):
        raise ValueError(f"expected a text file but got a directory: {path}")
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


_UTF8_BOM = b"\xef\xbb\xbf"


def _lines(path: str) -> Iterator[bytes]:
    """Lines of a file as bytes, without the line ending (LF or CRLF)."""
    with _open_binary(path) as f:
        for raw in f:
            yield raw.rstrip(b"\r\n")


def _decode(raw: bytes, path: str, number: int) -> tuple[str | None, str | None]:
    """(text, None) or (None, problem) for one line."""
    try:
        return raw.decode("utf-8").strip(), None
    except UnicodeDecodeError as e:
        return None, f"{path}:{number}: invalid UTF-8 ({e.reason} at byte {e.start})"


def _skip_or_raise(report: ReadReport, on_error: str, counter: str, message: str) -> None:
    if on_error == "raise":
        raise ValueError(message + " (pass on_error='skip' to skip and count such pairs)")
    setattr(report, counter, getattr(report, counter) + 1)
    if len(report.examples) < _MAX_EXAMPLES:
        report.examples.append(message)


def iter_parallel_files(
    source_path: str | os.PathLike,
    target_path: str | os.PathLike,
    report: ReadReport,
    on_error: str = "raise",
    max_pairs: int | None = None,
) -> Iterator[tuple[str, str]]:
    """Streams the pairs of two aligned files without holding them in memory.

    The same rules as :func:`read_parallel_files` (which collects this
    generator), for corpora too large for memory (WMT14: 4.5M pairs): lines
    are read and checked one at a time, and ``report`` is updated as they go
    (``pairs_kept`` counts the pairs yielded so far).

    Args:
        source_path: source-language file, UTF-8, one sentence per line
            (``.gz`` is decompressed).
        target_path: target-language file, same format and line count.
        report: the :class:`ReadReport` to update.
        on_error: ``"raise"`` or ``"skip"`` (see module docstring).
        max_pairs: read only the first this many lines (no count check then).

    Yields:
        ``(source, target)`` sentences stripped of surrounding whitespace.

    Raises:
        FileNotFoundError: naming a missing file (before the first pair).
        ValueError: for mismatched line counts (naming both files and both
            counts, in both modes; raised when the shorter file ends), and
            with ``on_error="raise"`` for an empty line on either side or
            invalid UTF-8 (naming file and line).
    """
    _check_on_error(on_error)
    src, tgt = os.fspath(source_path), os.fspath(target_path)
    for p in (src, tgt):
        if not os.path.exists(p):
            raise FileNotFoundError(f"parallel data file not found: {p}")
    return _iter_parallel_files(src, tgt, report, on_error, max_pairs)


def _iter_parallel_files(src, tgt, report, on_error, max_pairs):
    src_lines, tgt_lines = _lines(src), _lines(tgt)
    number = 0
    while max_pairs is None or number < max_pairs:
        a = next(src_lines, None)
        b = next(tgt_lines, None)
        if a is None or b is None:
            if a is None and b is None:
                break
            n_src = number + (0 if a is None else 1 + sum(1 for _ in src_lines))
            n_tgt = number + (0 if b is None else 1 + sum(1 for _ in tgt_lines))
            raise ValueError(
                f"mismatched line counts: {src} has {n_src} lines but {tgt} has {n_tgt} lines; "
                "parallel files must be aligned line by line"
            )
        number += 1
        report.pairs_read += 1
        text_a, problem_a = _decode(a, src, number)
        text_b, problem_b = _decode(b, tgt, number)
        if problem_a or problem_b:
            _skip_or_raise(report, on_error, "skipped_invalid_utf8", problem_a or problem_b)
            continue
        if not text_a or not text_b:
            empty = [p for p, t in ((src, text_a), (tgt, text_b)) if not t]
            _skip_or_raise(
                report, on_error, "skipped_empty", f"{' and '.join(empty)}:{number}: empty line in a parallel pair"
            )
            continue
        report.pairs_kept += 1
        yield text_a, text_b


def _collect(report: ReadReport, pairs: Iterator[tuple[str, str]]) -> ParallelText:
    sources: list[str] = []
    targets: list[str] = []
    for a, b in pairs:
        sources.append(a)
        targets.append(b)
    report.pairs_kept = len(sources)
    return ParallelText(sources, targets, report)


def read_parallel_files(
    source_path: str | os.PathLike,
    target_path: str | os.PathLike,
    on_error: str = "raise",
    max_pairs: int | None = None,
) -> ParallelText:
    """Reads two aligned files, line i of one translating line i of the other.

    Args:
        source_path: source-language file, UTF-8, one sentence per line
            (``.gz`` is decompressed).
        target_path: target-language file, same format and line count.
        on_error: ``"raise"`` or ``"skip"`` (see module docstring).
        max_pairs: read only the first this many lines (no count check then).

    Returns:
        :class:`ParallelText` with sentences stripped of surrounding whitespace.

    Raises:
        FileNotFoundError: naming a missing file.
        ValueError: for mismatched line counts (naming both files and both
            counts, in both modes), and with ``on_error="raise"`` for an empty
            line on either side or invalid UTF-8 (naming file and line).
    """
    src, tgt = os.fspath(source_path), os.fspath(target_path)
    report = ReadReport(source=f"{src} | {tgt}")
    return _collect(report, iter_parallel_files(src, tgt, report, on_error, max_pairs))


def iter_tsv_pairs(
    path: str | os.PathLike,
    report: ReadReport,
    source_column: int = 0,
    target_column: int = 1,
    on_error: str = "raise",
    delimiter: str = "\t",
    max_pairs: int | None = None,
) -> Iterator[tuple[str, str]]:
    """Streams the pairs of a delimited file (the rules of :func:`read_tsv_pairs`, which collects it).

    Args:
        path: UTF-8 file (``.gz`` allowed), one pair per line.
        report: the :class:`ReadReport` to update as lines are read.
        source_column: 0-based column of the source sentence.
        target_column: 0-based column of the target sentence.
        on_error: ``"raise"`` or ``"skip"`` (see module docstring).
        delimiter: field separator.
        max_pairs: read only the first this many lines.

    Yields:
        ``(source, target)`` sentences, stripped.

    Raises:
        FileNotFoundError: naming a missing file (before the first pair).
        ValueError: as :func:`read_tsv_pairs`.
    """
    _check_on_error(on_error)
    if source_column == target_column:
        raise ValueError(f"source_column and target_column must differ, both are {source_column}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"parallel data file not found: {path}")
    return _iter_tsv(path, report, source_column, target_column, on_error, delimiter, max_pairs)


def _iter_tsv(path, report, source_column, target_column, on_error, delimiter, max_pairs):
    needed = max(source_column, target_column) + 1
    blank_run = 0  # empty lines not yet judged: at the end of the file they are no pair (Tatoeba's exports end so)
    for number, raw in enumerate(_lines(path), start=1):
        if max_pairs is not None and number > max_pairs:
            break
        if number == 1 and raw.startswith(_UTF8_BOM):
            raw = raw[len(_UTF8_BOM):]
        if not raw.strip():
            blank_run += 1
            continue
        for blank in range(number - blank_run, number):  # empty lines inside the file follow on_error
            report.pairs_read += 1
            _skip_or_raise(report, on_error, "skipped_bad_fields",
                           f"{path}:{blank}: empty line (expected at least {needed} {delimiter!r}-separated fields)")
        blank_run = 0
        report.pairs_read += 1
        text, problem = _decode(raw, path, number)
        if problem:
            _skip_or_raise(report, on_error, "skipped_invalid_utf8", problem)
            continue
        fields = raw.decode("utf-8").split(delimiter)
        if len(fields) < needed:
            _skip_or_raise(
                report,
                on_error,
                "skipped_bad_fields",
                f"{path}:{number}: expected at least {needed} {delimiter!r}-separated fields, found {len(fields)}",
            )
            continue
        a, b = fields[source_column].strip(), fields[target_column].strip()
        if not a or not b:
            _skip_or_raise(report, on_error, "skipped_empty", f"{path}:{number}: empty sentence in a pair")
            continue
        report.pairs_kept += 1
        yield a, b


def read_tsv_pairs(
    path: str | os.PathLike,
    source_column: int = 0,
    target_column: int = 1,
    on_error: str = "raise",
    delimiter: str = "\t",
) -> ParallelText:
    """Reads sentence pairs from a delimited file (e.g. Tatoeba ``spa.txt``).

    Args:
        path: UTF-8 file (``.gz`` allowed), one pair per line; extra columns
            (e.g. Tatoeba attribution) are ignored, and so are a UTF-8 byte
            order mark at its start and empty lines at its end (an empty
            line inside the file is a bad line).
        source_column: 0-based column of the source sentence
            (``spa.txt``: 0 = English, 1 = Spanish).
        target_column: 0-based column of the target sentence.
        on_error: ``"raise"`` or ``"skip"`` (see module docstring).
        delimiter: field separator.

    Returns:
        :class:`ParallelText`.

    Raises:
        FileNotFoundError: naming a missing file.
        ValueError: with ``on_error="raise"``, naming file and line, for too
            few fields, an empty field or invalid UTF-8; for equal columns.
    """
    report = ReadReport(source=os.fspath(path))
    return _collect(report, iter_tsv_pairs(path, report, source_column, target_column, on_error, delimiter))
