"""Multi30k Task 1 (Elliott et al., 2016): the English-German corpus of CPU size, found locally or downloaded.

The paper trains on WMT 2014 EN-DE (4.5M pairs, Section 5.1); Multi30k
(29,000 training pairs) is the small corpus used here. Local data comes first
(the data folder, then the download cache:
:mod:`~keras_transformer.data.folders`); the files are downloaded only when
they are missing, and a failed download says exactly which files to put
where. Bad lines follow the ``on_error`` policy of
:mod:`~keras_transformer.data.parallel_text`.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import urllib.error
import urllib.request

from keras_transformer.data.folders import DATA_ENV_VAR, _default_cache_dir, default_data_dir
from keras_transformer.data.parallel_text import ParallelText, read_parallel_files

__all__ = ["MULTI30K_FILES", "MULTI30K_URL", "load_multi30k", "multi30k_files"]

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
    cache_dir = os.fspath(cache_dir) if cache_dir is not None else _default_cache_dir("multi30k")
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
    split: str = "train", data_dir: str | os.PathLike | None = None, source_lang: str = "en", target_lang: str = "de",
    download: bool = True, cache_dir: str | os.PathLike | None = None, on_error: str = "raise", timeout: float = 30.0,
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
        on_error: ``"raise"`` or ``"skip"`` (see :mod:`~keras_transformer.data.parallel_text`).
        timeout: seconds per download request.

    Returns:
        :class:`~keras_transformer.data.parallel_text.ParallelText`.

    Raises:
        ValueError: for an unknown split or language.
        FileNotFoundError: when the files are missing and cannot be downloaded;
            the message lists the exact files and the folders to put them in.
    """
    source_path, target_path = multi30k_files(split, data_dir, source_lang, target_lang, download, cache_dir, timeout)
    return read_parallel_files(source_path, target_path, on_error=on_error)
