"""Public names imported on first use (PEP 562), shared by the package ``__init__`` modules.

``import keras_transformer`` (and the command line's parser) must not load
TensorFlow before a name that needs it is used; the tokenizing worker
processes of :func:`keras_transformer.data.prepare_corpus` start without it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str],
                 namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a package whose public names live in its modules.

    Args:
        package: the package's ``__name__``.
        exports: public name -> module, absolute (``"keras_transformer.model"``)
            or relative to ``package`` (``".tokenizer"``).
        namespace: the package's ``globals()``: a name, once imported, is
            stored there (later look-ups do not come back here).

    Returns:
        The module-level ``__getattr__`` and ``__dir__`` of PEP 562.

    Raises:
        AttributeError: from ``__getattr__``, for a name the package does not export.
    """

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name], package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
