"""Where the data is: the data folder (``$KERAS_TRANSFORMER_DATA``) and the download cache (``$KERAS_TRANSFORMER_CACHE``).

The loaders (:mod:`~keras_transformer.data.multi30k`,
:mod:`~keras_transformer.data.tatoeba`) look in the ``data_dir`` they are
given, else in the data folder of the environment; no path relative to the
working directory is assumed. Downloads go to the cache folder.
"""

from __future__ import annotations

import os

__all__ = ["DATA_ENV_VAR", "CACHE_ENV_VAR", "default_data_dir"]

DATA_ENV_VAR = "KERAS_TRANSFORMER_DATA"
CACHE_ENV_VAR = "KERAS_TRANSFORMER_CACHE"


def default_data_dir() -> str | None:
    """The data directory from the environment variable ``KERAS_TRANSFORMER_DATA`` (or ``None``)."""
    return os.environ.get(DATA_ENV_VAR) or None


def _default_cache_dir(name: str) -> str:
    """The download folder ``name`` in ``$KERAS_TRANSFORMER_CACHE``.

    Without that variable, in ``$XDG_CACHE_HOME/keras_transformer`` or
    ``~/.cache/keras_transformer``.
    """
    base = os.environ.get(CACHE_ENV_VAR) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "keras_transformer"
    )
    return os.path.join(base, name)
