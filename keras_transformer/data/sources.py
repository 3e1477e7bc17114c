"""Parallel text sources: local files, TSV, Multi30k, Tatoeba Spanish-English and TFDS translation sets.

Every reader returns a :class:`ParallelText`: two aligned lists of sentences and
a :class:`ReadReport` that counts what was read and what was skipped. Local
data comes first; downloads happen only when data is missing and the network
is reachable, and a failed download says exactly which files to put where.

Bad input policy (``on_error``):

* ``"raise"`` (default): a ``ValueError`` naming the file and the 1-based line
  (empty line on one side, invalid UTF-8, a TSV line with too few fields).
* ``"skip"``: the pair is dropped, counted in the report (per reason) and the
  first few locations are kept in ``report.examples``.
* Mismatched line counts always raise, in both modes: the alignment of every
  line is then in doubt, so there is nothing safe to skip. The message names
  both files and both counts.
* A missing file raises ``FileNotFoundError`` naming the path.

The paper trains on WMT 2014 EN-DE (4.5M pairs) and EN-FR (Section 5.1);
Multi30k (Elliott et al., 2016) is the small CPU-sized corpus used here, and
the Tatoeba Spanish-English pairs of manythings.org (:func:`load_tatoeba`)
a second language pair. :func:`load_corpus` opens either by name with its
train/validation/test splits and languages.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import warnings
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

__all__ = [
    "ParallelText",
    "ReadReport",
    "iter_parallel_files",
    "iter_tsv_pairs",
    "iter_tfds_pairs",
    "read_parallel_files",
    "read_tsv_pairs",
    "load_multi30k",
    "multi30k_files",
    "load_tfds_translation",
    "tfds_translation_builder",
    "load_tatoeba",
    "load_corpus",
    "disjoint_split",
    "Corpus",
    "DATASETS",
    "default_data_dir",
    "MULTI30K_URL",
    "MULTI30K_FILES",
]

DATA_ENV_VAR = "KERAS_TRANSFORMER_DATA"
CACHE_ENV_VAR = "KERAS_TRANSFORMER_CACHE"

#: Raw files of the multi30k/dataset GitHub repository (Task 1).
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}.{lang}.gz"
#: split -> (local stem, remote stem).
MULTI30K_FILES = {"train": ("train", "train"), "val": ("val", "val"), "test2016": ("test2016", "test_2016_flickr")}
_MULTI30K_ALIASES = {"validation": "val", "valid": "val", "dev": "val", "test": "test2016", "test_2016_flickr": "test2016"}
#: sha256 of the original .gz files (the multi30k/dataset repository, data/task1/raw/).
_MULTI30K_GZ_SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
}
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
    for number, raw in enumerate(_lines(path), start=1):
        if max_pairs is not None and number > max_pairs:
            break
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
            (e.g. Tatoeba attribution) are ignored.
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


# --------------------------------------------------------------------------- Multi30k


def default_data_dir() -> str | None:
    """The data directory from the environment variable ``KERAS_TRANSFORMER_DATA`` (or ``None``)."""
    return os.environ.get(DATA_ENV_VAR) or None


def _default_cache_dir() -> str:
    base = os.environ.get(CACHE_ENV_VAR) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "keras_transformer"
    )
    return os.path.join(base, "multi30k")


def _multi30k_dir_candidates(data_dir: str | None) -> list[str]:
    dirs = []
    if data_dir:
        dirs += [os.path.join(data_dir, "multi30k"), data_dir]
    return dirs


def _download_multi30k_file(remote: str, local_path: str, timeout: float) -> None:
    """Downloads one raw .gz file, checks its sha256 and writes it decompressed."""
    name, lang = remote.rsplit(".", 1)
    url = MULTI30K_URL.format(name=name, lang=lang)
    with urllib.request.urlopen(url, timeout=timeout) as response:
        payload = response.read()
    expected = _MULTI30K_GZ_SHA256.get(f"{name}.{lang}.gz")
    digest = hashlib.sha256(payload).hexdigest()
    if expected and digest != expected:
        raise ValueError(f"downloaded {url} has sha256 {digest}, expected {expected}")
    data = gzip.decompress(payload)
    directory = os.path.dirname(local_path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".download-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, local_path)


def multi30k_files(
    split: str = "train",
    data_dir: str | os.PathLike | None = None,
    source_lang: str = "en",
    target_lang: str = "de",
    download: bool = True,
    cache_dir: str | os.PathLike | None = None,
    timeout: float = 30.0,
) -> tuple[str, str]:
    """The paths of a Multi30k split's two files, found (or downloaded) as :func:`load_multi30k` does.

    Args:
        split: ``"train"``, ``"val"`` or ``"test2016"`` (or an alias).
        data_dir: folder holding ``multi30k/`` or the files themselves
            (default: ``$KERAS_TRANSFORMER_DATA``).
        source_lang: ``"en"`` or ``"de"``.
        target_lang: the other one.
        download: allow the download when the files are missing.
        cache_dir: where downloads go (also searched).
        timeout: seconds per download request.

    Returns:
        ``(source_path, target_path)``.

    Raises:
        ValueError: for an unknown split or language.
        FileNotFoundError: when the files are missing and cannot be
            downloaded; the message lists the exact files and the folders to
            put them in.
    """
    split = _MULTI30K_ALIASES.get(split, split)
    if split not in MULTI30K_FILES:
        raise ValueError(f"unknown Multi30k split {split!r}; known: {sorted(MULTI30K_FILES)} (+ aliases)")
    if {source_lang, target_lang} != {"en", "de"}:
        raise ValueError(f"Multi30k has languages 'en' and 'de', got source {source_lang!r} target {target_lang!r}")
    data_dir = os.fspath(data_dir) if data_dir is not None else default_data_dir()
    cache_dir = os.fspath(cache_dir) if cache_dir is not None else _default_cache_dir()
    local, remote = MULTI30K_FILES[split]
    names = [f"{local}.{source_lang}", f"{local}.{target_lang}"]
    searched = _multi30k_dir_candidates(data_dir) + [cache_dir]
    for directory in searched:
        if all(os.path.isfile(os.path.join(directory, n)) for n in names):
            return os.path.join(directory, names[0]), os.path.join(directory, names[1])

    problem = "download=False"
    if download:
        try:
            os.makedirs(cache_dir, exist_ok=True)
            for lang, name in zip((source_lang, target_lang), names):
                target = os.path.join(cache_dir, name)
                if not os.path.isfile(target):
                    _download_multi30k_file(f"{remote}.{lang}", target, timeout)
            return os.path.join(cache_dir, names[0]), os.path.join(cache_dir, names[1])
        except (urllib.error.URLError, OSError, ValueError) as e:
            problem = f"download failed: {e}"
    all_files = " ".join(f"{local}.{lang}" for local, _ in MULTI30K_FILES.values() for lang in ("en", "de"))
    urls = ", ".join(MULTI30K_URL.format(name=remote, lang=lang) for lang in (source_lang, target_lang))
    raise FileNotFoundError(
        f"Multi30k split {split!r} not found: need the files {names[0]} and {names[1]} "
        f"(UTF-8, one sentence per line, aligned) in one of: {', '.join(searched)}. ({problem}.) "
        f"Put them there, e.g. gunzip {urls} to {cache_dir}/{names[0]} and {cache_dir}/{names[1]}, "
        f"or pass data_dir / set ${DATA_ENV_VAR} to a folder holding multi30k/ with {all_files}."
    )


def load_multi30k(
    split: str = "train",
    data_dir: str | os.PathLike | None = None,
    source_lang: str = "en",
    target_lang: str = "de",
    download: bool = True,
    cache_dir: str | os.PathLike | None = None,
    on_error: str = "raise",
    timeout: float = 30.0,
) -> ParallelText:
    """Multi30k Task 1 (Elliott et al., 2016) English-German pairs.

    Looks for ``{split}.{lang}`` files in ``data_dir/multi30k``, then
    ``data_dir``, then ``cache_dir``; ``data_dir`` defaults to the environment
    variable ``KERAS_TRANSFORMER_DATA`` (no path relative to the working
    directory is assumed). When nothing is found and ``download`` is true, the
    raw files are fetched from the ``multi30k/dataset`` GitHub repository
    (``data/task1/raw/*.gz``), checked against their sha256 and stored
    decompressed in ``cache_dir`` (default ``$KERAS_TRANSFORMER_CACHE/multi30k``
    or ``~/.cache/keras_transformer/multi30k``).

    Args:
        split: ``"train"`` (29,000), ``"val"`` (1,014) or ``"test2016"``
            (1,000); aliases ``validation``, ``valid``, ``dev``, ``test``.
        data_dir: folder holding ``multi30k/`` or the files themselves.
        source_lang: ``"en"`` or ``"de"``.
        target_lang: the other one.
        download: allow the download when the files are missing.
        cache_dir: where downloads go (also searched).
        on_error: ``"raise"`` or ``"skip"`` (see module docstring).
        timeout: seconds per download request.

    Returns:
        :class:`ParallelText`.

    Raises:
        ValueError: for an unknown split or language.
        FileNotFoundError: when the files are missing and cannot be downloaded;
            the message lists the exact files and the folders to put them in.
    """
    source_path, target_path = multi30k_files(split, data_dir, source_lang, target_lang, download, cache_dir, timeout)
    return read_parallel_files(source_path, target_path, on_error=on_error)


# --------------------------------------------------------------------------- Tatoeba Spanish-English

#: The manythings.org/anki export of 2018-04-07 (118,121 lines ``English<TAB>Spanish``), whose split is documented.
TATOEBA_SPA_ENG_SHA256 = "a2c37762eb7d9a7bf1aa0958bec55f2016ec6aaab6f7c1503822341587df2ba6"
TATOEBA_URL = "http://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip"
_TATOEBA_COLUMNS = {"en": 0, "es": 1}
_SPLIT_ALIASES = {"validation": "valid", "val": "valid", "dev": "valid"}


def disjoint_split(
    sources: list[str], targets: list[str], valid_size: int, test_size: int, seed: int = 0
) -> dict[str, list[int]]:
    """Indices of a seeded train/valid/test split in which held-out sentences never occur in train.

    Corpora such as Tatoeba pair one sentence with several translations (the
    English "Go." with "Ve.", "Vete." and "Vaya."); a random split by pair
    would put the same source sentence in train and test, and score
    memorization. Here pairs are grouped into the connected components of the
    graph linking every source sentence to every target sentence it is paired
    with, and whole components go to one split: no source and no target
    sentence of the valid or test split occurs in train, or in the other
    held-out split, in either translation direction.

    Components are ordered by the sha256 of ``"<seed>\\n<source>\\n<target>"``
    of their first pair (so swapping the sides changes the order: pass the
    sides in one fixed order and swap afterwards) (stable across Python and numpy versions), then each
    goes to test while it fits in what test still lacks, else to valid while
    it fits there, else to train; so the held-out splits get exactly
    ``test_size`` and ``valid_size`` pairs when enough small components
    exist. Pairs keep the file order within a component.

    Args:
        sources: source sentences.
        targets: target sentences, aligned with ``sources``.
        valid_size: pairs held out for validation (int >= 0).
        test_size: pairs held out for test (int >= 0).
        seed: the split's seed (int).

    Returns:
        ``{"train": [...], "valid": [...], "test": [...]}``: indices into
        ``sources``, each list in the (seeded) component order.

    Raises:
        ValueError: for misaligned lists, negative sizes, or held-out sizes
            that the components cannot fill exactly (naming the sizes).
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets; they must align")
    if valid_size < 0 or test_size < 0:
        raise ValueError(f"valid_size and test_size must be >= 0, got {valid_size} and {test_size}")
    if valid_size + test_size >= len(sources):
        raise ValueError(f"cannot hold out {valid_size} + {test_size} pairs of {len(sources)}")
    parent: dict[tuple[int, str], tuple[int, str]] = {}

    def find(node):
        root = node
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[node] != root:  # path compression
            parent[node], node = root, parent[node]
        return root

    for source, target in zip(sources, targets):
        a, b = find((0, source)), find((1, target))
        if a != b:
            parent[a] = b
    components: dict[tuple[int, str], list[int]] = {}
    for index, source in enumerate(sources):
        components.setdefault(find((0, source)), []).append(index)

    def key(members):
        first = members[0]
        return hashlib.sha256(f"{seed}\n{sources[first]}\n{targets[first]}".encode("utf-8")).hexdigest()

    split: dict[str, list[int]] = {"train": [], "valid": [], "test": []}
    for members in sorted(components.values(), key=key):
        if len(split["test"]) + len(members) <= test_size:
            split["test"].extend(members)
        elif len(split["valid"]) + len(members) <= valid_size:
            split["valid"].extend(members)
        else:
            split["train"].extend(members)
    if len(split["test"]) != test_size or len(split["valid"]) != valid_size:
        raise ValueError(
            f"could not hold out exactly {valid_size} valid and {test_size} test pairs from whole groups of "
            f"sentences (got {len(split['valid'])} and {len(split['test'])})"
        )
    return split


def load_tatoeba(
    split: str = "train",
    data_dir: str | os.PathLike | None = None,
    source_lang: str = "es",
    target_lang: str | None = None,
    valid_size: int = 2000,
    test_size: int = 2000,
    seed: int = 0,
    on_error: str = "raise",
) -> ParallelText:
    """Tatoeba Spanish-English pairs (manythings.org/anki ``spa.txt``), split with :func:`disjoint_split`.

    ``spa.txt`` holds one pair per line, ``English<TAB>Spanish`` (later
    exports add a third, attribution column, which is ignored), sorted from
    short to long, with no official split. The split is made here: with the
    defaults, 2,000 pairs for validation and 2,000 for test, the rest
    (114,121 pairs of the 118,121-line 2018-04-07 export) for training; no
    English and no Spanish sentence of valid or test occurs in train, so the
    split is the same for both directions. Each split is in the seeded
    order, so its first N pairs are a random sample (``--limit-test``,
    ``--valid-bleu-sentences``). Another copy of the file (the manythings
    export changes over time) gives another split: a warning says so.

    Looks for ``spa.txt`` in ``data_dir/tatoeba_spa_eng``, then ``data_dir``
    (default: ``$KERAS_TRANSFORMER_DATA``). There is no download: the site
    asks not to be crawled; the message says where the file comes from.

    Args:
        split: ``"train"``, ``"valid"`` (aliases ``validation``, ``val``,
            ``dev``) or ``"test"``.
        data_dir: folder holding ``tatoeba_spa_eng/spa.txt`` or ``spa.txt``.
        source_lang: ``"es"`` (Spanish -> English, default) or ``"en"``.
        target_lang: the other language (default: the one that is not
            ``source_lang``).
        valid_size: validation pairs held out.
        test_size: test pairs held out.
        seed: the split's seed (0 is the documented split).
        on_error: ``"raise"`` or ``"skip"`` (see the module docstring);
            skipped lines are left out before splitting.

    Returns:
        :class:`ParallelText`, sources in ``source_lang``; its report counts
        the lines of the whole file and the pairs kept in this split.

    Raises:
        ValueError: for an unknown split or language, or bad lines with
            ``on_error="raise"`` (naming file and line).
        FileNotFoundError: when ``spa.txt`` is in none of the folders (naming
            them and the download address).
    """
    name = _SPLIT_ALIASES.get(split, split)
    if name not in ("train", "valid", "test"):
        raise ValueError(f"unknown Tatoeba split {split!r}; known: train, valid, test (+ validation, val, dev)")
    target_lang = target_lang or next((lang for lang in _TATOEBA_COLUMNS if lang != source_lang), None)
    if {source_lang, target_lang} != set(_TATOEBA_COLUMNS):
        raise ValueError(f"tatoeba_spa_eng has languages 'es' and 'en', got source {source_lang!r} target {target_lang!r}")
    data_dir = os.fspath(data_dir) if data_dir is not None else default_data_dir()
    searched = [os.path.join(data_dir, "tatoeba_spa_eng"), data_dir] if data_dir else []
    path = next((os.path.join(d, "spa.txt") for d in searched if os.path.isfile(os.path.join(d, "spa.txt"))), None)
    if path is None:
        raise FileNotFoundError(
            f"Tatoeba Spanish-English not found: need spa.txt (UTF-8, English<TAB>Spanish per line) in one of: "
            f"{', '.join(searched) or '(no data folder: pass data_dir or set $' + DATA_ENV_VAR + ')'}. "
            f"It is the file inside {TATOEBA_URL} (from www.manythings.org/anki and tatoeba.org, CC BY 2.0)."
        )
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != TATOEBA_SPA_ENG_SHA256:
        warnings.warn(
            f"{path} is not the 2018-04-07 export (sha256 {digest[:12]}..., expected {TATOEBA_SPA_ENG_SHA256[:12]}...): "
            "its train/valid/test split, and so its scores, differ from the ones documented",
            stacklevel=2,
        )
    # Split on (English, Spanish) whatever the direction, so both directions get the same split.
    pairs = read_tsv_pairs(path, _TATOEBA_COLUMNS["en"], _TATOEBA_COLUMNS["es"], on_error=on_error)
    indices = disjoint_split(pairs.sources, pairs.targets, valid_size, test_size, seed)
    chosen = indices[name]
    english, spanish = [pairs.sources[i] for i in chosen], [pairs.targets[i] for i in chosen]
    report = dataclasses.replace(
        pairs.report,
        source=f"{path} {source_lang}->{target_lang} [{name}: {len(chosen)} of the seed-{seed} split "
        f"{len(indices['train'])}/{len(indices['valid'])}/{len(indices['test'])}]",
        pairs_kept=len(chosen),
    )
    return ParallelText(*((english, spanish) if source_lang == "en" else (spanish, english)), report)


# --------------------------------------------------------------------------- TFDS


def _network_available(url: str = "https://storage.googleapis.com", timeout: float = 5.0) -> bool:
    """True when ``url`` answers within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True  # the server answered
    except (urllib.error.URLError, OSError, ValueError):
        return False


def tfds_translation_builder(
    name: str,
    source_lang: str | None = None,
    target_lang: str | None = None,
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
):
    """The prepared TFDS builder of a translation dataset and its language keys.

    Uses the prepared dataset in ``data_dir`` when there is one; otherwise
    downloads and prepares it if ``download`` is true and the network is
    reachable (WMT14 is several GB).

    Args:
        name: TFDS name with config, e.g. ``"wmt14_translate/de-en"``.
        source_lang: feature key of the source (default: the config's first
            language, e.g. ``de`` for ``de-en``, ``pt`` for ``pt_to_en``).
        target_lang: feature key of the target (default: the other language).
        data_dir: TFDS data directory (default: TFDS's own).
        download: allow download_and_prepare when the data is not prepared.

    Returns:
        ``(builder, source_lang, target_lang)``.

    Raises:
        ImportError: when ``tensorflow_datasets`` is not installed.
        RuntimeError: when the dataset is not prepared and cannot be
            downloaded; the message says how to use local files instead.
        ValueError: for unknown language keys.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:  # pragma: no cover - tfds is installed in the venv
        raise ImportError("load_tfds_translation needs tensorflow_datasets (pip install tensorflow-datasets)") from e
    data_dir = os.fspath(data_dir) if data_dir is not None else None
    builder = tfds.builder(name, data_dir=data_dir)
    keys = list(builder.info.features.keys())
    if source_lang is None or target_lang is None:
        config = name.split("/", 1)[1] if "/" in name else ""
        order = [k for k in config.replace("_to_", "-").split("-") if k in keys] or keys
        source_lang = source_lang or order[0]
        target_lang = target_lang or next(k for k in order + keys if k != source_lang)
    for lang in (source_lang, target_lang):
        if lang not in keys:
            raise ValueError(f"{name} has language features {keys}, not {lang!r}")

    prepared = os.path.exists(os.path.join(os.fspath(builder.data_dir), "dataset_info.json"))
    if not prepared:
        how = (
            "To train without TFDS, use local parallel files: read_parallel_files(source_path, target_path) "
            "(CLI: --train-source/--train-target), read_tsv_pairs(path) or load_multi30k(data_dir=...); or prepare "
            f"the dataset on a machine with network (`tfds build {name} --data_dir DIR`) and pass data_dir=DIR."
        )
        if not download:
            raise RuntimeError(f"TFDS dataset {name} is not prepared in {builder.data_dir} and download=False. {how}")
        if not _network_available():
            raise RuntimeError(
                f"TFDS dataset {name} is not prepared in {builder.data_dir} and the network is unreachable, "
                f"so it cannot be downloaded. {how}"
            )
        try:
            builder.download_and_prepare()
        except Exception as e:  # TFDS raises many kinds
            raise RuntimeError(f"TFDS download_and_prepare({name}) failed: {e}. {how}") from e
    return builder, source_lang, target_lang


def iter_tfds_pairs(
    builder,
    split: str,
    source_lang: str,
    target_lang: str,
    report: ReadReport,
    on_error: str = "raise",
    max_pairs: int | None = None,
) -> Iterator[tuple[str, str]]:
    """Streams the pairs of a prepared TFDS translation split (the rules of :func:`load_tfds_translation`).

    Args:
        builder: from :func:`tfds_translation_builder`.
        split: TFDS split (``"train"``, ``"validation"``, ``"test"``, slices).
        source_lang: feature key of the source.
        target_lang: feature key of the target.
        report: the :class:`ReadReport` to update.
        on_error: ``"raise"`` or ``"skip"`` for empty sentences.
        max_pairs: read at most this many pairs.

    Yields:
        ``(source, target)`` sentences, stripped.

    Raises:
        ValueError: for empty sentences with ``on_error="raise"``, naming the
            example.
    """
    _check_on_error(on_error)
    name = builder.info.full_name  # e.g. wmt14_translate/de-en/1.0.0
    dataset = builder.as_dataset(split=split, shuffle_files=False)
    if max_pairs is not None:
        dataset = dataset.take(max_pairs)
    for number, example in enumerate(dataset.as_numpy_iterator(), start=1):
        report.pairs_read += 1
        texts = []
        for lang in (source_lang, target_lang):
            value = example[lang]
            texts.append((value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)).strip())
        if not texts[0] or not texts[1]:
            _skip_or_raise(report, on_error, "skipped_empty", f"tfds:{name}[{split}] example {number}: empty sentence")
            continue
        report.pairs_kept += 1
        yield texts[0], texts[1]


def load_tfds_translation(
    name: str,
    split: str = "train",
    source_lang: str | None = None,
    target_lang: str | None = None,
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
    on_error: str = "raise",
    max_pairs: int | None = None,
) -> ParallelText:
    """A TFDS translation dataset, e.g. ``wmt14_translate/de-en`` (Section 5.1).

    Uses the prepared dataset in ``data_dir`` when there is one; otherwise
    downloads and prepares it if ``download`` is true and the network is
    reachable (WMT14 is several GB).

    Args:
        name: TFDS name with config, e.g. ``"wmt14_translate/de-en"`` or
            ``"ted_hrlr_translate/pt_to_en"``.
        split: TFDS split (``"train"``, ``"validation"``, ``"test"``, slices).
        source_lang: feature key of the source (default: the config's first
            language, e.g. ``de`` for ``de-en``, ``pt`` for ``pt_to_en``).
        target_lang: feature key of the target (default: the other language).
        data_dir: TFDS data directory (default: TFDS's own).
        download: allow download_and_prepare when the data is not prepared.
        on_error: ``"raise"`` or ``"skip"`` for empty sentences.
        max_pairs: read at most this many pairs.

    Returns:
        :class:`ParallelText`.

    Raises:
        ImportError: when ``tensorflow_datasets`` is not installed.
        RuntimeError: when the dataset is not prepared and cannot be
            downloaded; the message says how to use local files instead.
        ValueError: for unknown language keys, or empty sentences with
            ``on_error="raise"``.
    """
    _check_on_error(on_error)
    builder, source_lang, target_lang = tfds_translation_builder(name, source_lang, target_lang, data_dir, download)
    report = ReadReport(source=f"tfds:{name}[{split}] {source_lang}->{target_lang}")
    pairs = iter_tfds_pairs(builder, split, source_lang, target_lang, report, on_error, max_pairs)
    return _collect(report, pairs)


# --------------------------------------------------------------------------- named corpora


@dataclasses.dataclass
class Corpus:
    """A parallel corpus with its splits and languages, as training and evaluation use it.

    Attributes:
        name: e.g. ``"multi30k"``, ``"tatoeba_spa_eng"`` (or a description
            of the files read).
        train: the training pairs.
        valid: the validation pairs, or None.
        test: the test pairs, or None.
        test_name: the test split's name in messages and file names
            (``"test2016"`` for Multi30k, ``"test"`` otherwise).
        source_lang: source language code, or None when unknown.
        target_lang: target language code, or None (it picks BLEU's
            tokenizer: :func:`keras_transformer.evaluation.bleu_tokenizer_for`).
    """

    name: str
    train: ParallelText
    valid: ParallelText | None
    test: ParallelText | None
    test_name: str = "test"
    source_lang: str | None = None
    target_lang: str | None = None


#: Corpora that :func:`load_corpus` opens by name -> (default source, default target).
DATASETS = {"multi30k": ("en", "de"), "tatoeba_spa_eng": ("es", "en")}


def load_corpus(
    name: str,
    data_dir: str | os.PathLike | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    download: bool = True,
    cache_dir: str | os.PathLike | None = None,
    on_error: str = "raise",
) -> Corpus:
    """A named corpus (:data:`DATASETS`) with its train, validation and test splits.

    ``multi30k``: :func:`load_multi30k` train / val / test2016, English ->
    German by default. ``tatoeba_spa_eng``: :func:`load_tatoeba` train /
    valid / test (the seed-0 split: 2,000 valid and 2,000 test pairs held
    out), Spanish -> English by default.

    Args:
        name: a key of :data:`DATASETS`.
        data_dir: the data folder (default ``$KERAS_TRANSFORMER_DATA``).
        source_lang: default: the corpus's (see :data:`DATASETS`).
        target_lang: default: the other language of the corpus.
        download: Multi30k only: download missing files.
        cache_dir: Multi30k only: where downloads go.
        on_error: ``"raise"`` or ``"skip"`` (see the module docstring).

    Returns:
        :class:`Corpus`.

    Raises:
        ValueError: for an unknown name (listing the known ones) or language.
        FileNotFoundError: when the files are missing (see the loaders).
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    languages = DATASETS[name]
    source_lang = source_lang or (next(l for l in languages if l != target_lang) if target_lang else languages[0])
    target_lang = target_lang or next((l for l in languages if l != source_lang), languages[1])
    if name == "multi30k":
        def load(split):
            return load_multi30k(split, data_dir=data_dir, source_lang=source_lang, target_lang=target_lang,
                                 download=download, cache_dir=cache_dir, on_error=on_error)

        return Corpus(name, load("train"), load("val"), load("test2016"), "test2016", source_lang, target_lang)

    def load(split):
        return load_tatoeba(split, data_dir=data_dir, source_lang=source_lang, target_lang=target_lang,
                            on_error=on_error)

    return Corpus(name, load("train"), load("valid"), load("test"), "test", source_lang, target_lang)
