"""Tatoeba sentence pairs (manythings.org/anki exports), split so that no sentence is shared between splits.

The manythings.org exports of Tatoeba have no official split: :func:`disjoint_split`
makes a seeded one in which no held-out sentence occurs in train, and
:func:`load_tatoeba` reads one export (:data:`TATOEBA_PAIRS`: the
Spanish-English ``spa.txt``, a second language pair beside Multi30k, and the
Mandarin Chinese-English ``cmn.txt``, a language written without spaces) and
returns one split of it. An export is described by a ``_TatoebaPair`` (its
folder, file, language, held-out sizes, default direction, the checksum of
the copy whose split is documented, where it comes from); another language
pair is another such description read the same way. There is no download:
the site asks not to be crawled. Bad lines follow the ``on_error`` policy of
:mod:`~keras_transformer.data.parallel_text`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import warnings

from keras_transformer.data.folders import DATA_ENV_VAR, default_data_dir
from keras_transformer.data.parallel_text import ParallelText, read_tsv_pairs

__all__ = ["TATOEBA_PAIRS", "disjoint_split", "load_tatoeba"]

#: The manythings.org/anki export of 2018-04-07 (118,121 lines ``English<TAB>Spanish``), whose split is documented.
TATOEBA_SPA_ENG_SHA256 = "a2c37762eb7d9a7bf1aa0958bec55f2016ec6aaab6f7c1503822341587df2ba6"
TATOEBA_URL = "http://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip"
#: The English-Mandarin export (29,155 lines ``English<TAB>Chinese<TAB>attribution``, a byte order mark first,
#: an empty line last) as copied in ``tatoeba_cmn_eng/`` (its README), whose split is documented.
TATOEBA_CMN_ENG_SHA256 = "aa264a2447b26ab7c9d413f8321f9e2a779fd134b5118306b6e26a3499b3926e"
TATOEBA_CMN_URL = "https://www.manythings.org/anki/cmn-eng.zip"
_SPLIT_ALIASES = {"validation": "valid", "val": "valid", "dev": "valid"}


@dataclasses.dataclass(frozen=True)
class _TatoebaPair:
    """One manythings.org/anki export: ``English<TAB>other language`` per line (a third, attribution column is ignored).

    Attributes:
        dataset: its name (``"tatoeba_spa_eng"``), also its folder in the data folder.
        file: the file's name (``"spa.txt"``).
        lang: the code of the language of the second column (``"es"``); the first is English, ``"en"``.
        language: that language's name in messages (``"Spanish"``).
        export: the date of the export whose split is documented (``"2018-04-07"``).
        sha256: that export's sha256.
        url: where the file comes from (a zip holding it).
        valid_size: validation pairs held out by default.
        test_size: test pairs held out by default.
        source_lang: the default source language (the default target is the other one).
    """

    dataset: str
    file: str
    lang: str
    language: str
    export: str
    sha256: str
    url: str
    valid_size: int = 2000
    test_size: int = 2000
    source_lang: str = ""

    @property
    def columns(self) -> dict[str, int]:
        """Language code -> 0-based column: English first."""
        return {"en": 0, self.lang: 1}


_SPA_ENG = _TatoebaPair("tatoeba_spa_eng", "spa.txt", "es", "Spanish", "2018-04-07", TATOEBA_SPA_ENG_SHA256,
                        TATOEBA_URL, source_lang="es")
# 1,000 + 1,000 held out of 29,155: a test set of about 6,000 English words, 93% of the pairs left for training.
_CMN_ENG = _TatoebaPair("tatoeba_cmn_eng", "cmn.txt", "zh", "Chinese", "2024-03-22", TATOEBA_CMN_ENG_SHA256, TATOEBA_CMN_URL, 1000, 1000, source_lang="zh")
#: The exports :func:`load_tatoeba` reads, by dataset name.
TATOEBA_PAIRS = {pair.dataset: pair for pair in (_SPA_ENG, _CMN_ENG)}


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
    source_lang: str | None = None,
    target_lang: str | None = None,
    *,
    dataset: str = "tatoeba_spa_eng",
    seed: int = 0,
    valid_size: int | None = None,
    test_size: int | None = None,
    on_error: str = "raise",
) -> ParallelText:
    """Tatoeba pairs of one manythings.org/anki export (:data:`TATOEBA_PAIRS`), split with :func:`disjoint_split`.

    ``tatoeba_spa_eng`` (``spa.txt``) holds one pair per line,
    ``English<TAB>Spanish`` (later exports add a third, attribution column,
    which is ignored), sorted from short to long, with no official split.
    The split is made here: with the defaults, 2,000 pairs for validation and
    2,000 for test, the rest (114,121 pairs of the 118,121-line 2018-04-07
    export) for training; Spanish -> English by default.
    ``tatoeba_cmn_eng`` (``cmn.txt``, ``English<TAB>Chinese<TAB>attribution``,
    simplified characters written without spaces): 1,000 pairs for
    validation and 1,000 for test, the rest (27,155 of 29,155) for training;
    Chinese -> English by default (``source_lang="en"``: English -> Chinese).
    No English and no other-language sentence of valid or test occurs in
    train, so the split is the same for both directions. Each split is in
    the seeded order, so its first N pairs are a random sample
    (``--limit-test``, ``--valid-bleu-sentences``). Another copy of the file
    (the manythings export changes over time) gives another split: a warning
    says so.

    Looks for the file in ``data_dir/<dataset>``, then ``data_dir``
    (default: ``$KERAS_TRANSFORMER_DATA``). There is no download: the site
    asks not to be crawled; the message says where the file comes from.

    Args:
        split: ``"train"``, ``"valid"`` (aliases ``validation``, ``val``,
            ``dev``) or ``"test"``.
        data_dir: folder holding ``<dataset>/<file>`` or ``<file>``.
        source_lang: ``"es"``/``"zh"`` or ``"en"`` (default: the export's,
            ``es`` and ``zh``).
        target_lang: the other language (default: the one that is not
            ``source_lang``).
        valid_size: validation pairs held out (default: the export's).
        test_size: test pairs held out (default: the export's).
        seed: the split's seed (0 is the documented split).
        on_error: ``"raise"`` or ``"skip"`` (see
            :mod:`~keras_transformer.data.parallel_text`);
            skipped lines are left out before splitting.
        dataset: a key of :data:`TATOEBA_PAIRS`.

    Returns:
        :class:`~keras_transformer.data.parallel_text.ParallelText`, sources in
        ``source_lang``; its report counts the lines of the whole file and the
        pairs kept in this split.

    Raises:
        ValueError: for an unknown dataset, split or language, or bad lines
            with ``on_error="raise"`` (naming file and line).
        FileNotFoundError: when the file is in none of the folders (naming
            them and the download address).
    """
    if dataset not in TATOEBA_PAIRS:
        raise ValueError(f"unknown Tatoeba export {dataset!r}; known: {', '.join(TATOEBA_PAIRS)}")
    pair = TATOEBA_PAIRS[dataset]
    if source_lang is None:
        source_lang = "en" if target_lang == pair.lang else pair.source_lang
    return _load_pair(pair, split, data_dir, source_lang, target_lang,
                      pair.valid_size if valid_size is None else valid_size,
                      pair.test_size if test_size is None else test_size, seed, on_error)


def _load_pair(pair: _TatoebaPair, split, data_dir, source_lang, target_lang, valid_size, test_size, seed,
               on_error) -> ParallelText:
    """:func:`load_tatoeba` of the export ``pair`` (the same arguments, rules and errors)."""
    name = _SPLIT_ALIASES.get(split, split)
    if name not in ("train", "valid", "test"):
        raise ValueError(f"unknown Tatoeba split {split!r}; known: train, valid, test (+ validation, val, dev)")
    columns = pair.columns
    target_lang = target_lang or next((lang for lang in columns if lang != source_lang), None)
    if {source_lang, target_lang} != set(columns):
        raise ValueError(
            f"{pair.dataset} has languages {pair.lang!r} and 'en', got source {source_lang!r} target {target_lang!r}"
        )
    data_dir = os.fspath(data_dir) if data_dir is not None else default_data_dir()
    searched = [os.path.join(data_dir, pair.dataset), data_dir] if data_dir else []
    path = next((os.path.join(d, pair.file) for d in searched if os.path.isfile(os.path.join(d, pair.file))), None)
    if path is None:
        raise FileNotFoundError(
            f"Tatoeba {pair.language}-English not found: need {pair.file} (UTF-8, English<TAB>{pair.language} per "
            f"line) in one of: "
            f"{', '.join(searched) or '(no data folder: pass data_dir or set $' + DATA_ENV_VAR + ')'}. "
            f"It is the file inside {pair.url} (from www.manythings.org/anki and tatoeba.org, CC BY 2.0)."
        )
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != pair.sha256:
        warnings.warn(
            f"{path} is not the {pair.export} export (sha256 {digest[:12]}..., expected {pair.sha256[:12]}...): "
            "its train/valid/test split, and so its scores, differ from the ones documented",
            stacklevel=3,  # the caller of load_tatoeba
        )
    # Split on (English, other language) whatever the direction, so both directions get the same split.
    pairs = read_tsv_pairs(path, columns["en"], columns[pair.lang], on_error=on_error)
    indices = disjoint_split(pairs.sources, pairs.targets, valid_size, test_size, seed)
    chosen = indices[name]
    english, other = [pairs.sources[i] for i in chosen], [pairs.targets[i] for i in chosen]
    report = dataclasses.replace(
        pairs.report,
        source=f"{path} {source_lang}->{target_lang} [{name}: {len(chosen)} of the seed-{seed} split "
        f"{len(indices['train'])}/{len(indices['valid'])}/{len(indices['test'])}]",
        pairs_kept=len(chosen),
    )
    return ParallelText(*((english, other) if source_lang == "en" else (other, english)), report)
