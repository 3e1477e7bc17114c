"""Translating a corpus: lines in, lines out, in length-sorted batches with a progress bar.

Used by the command line (``run``, ``evaluate``, ``translate``), the notebook
and users' scripts alike, with any of our translators: a
:class:`~keras_transformer.decoding.Translator`'s ``translate`` /
``translate_greedy``, a loaded SavedModel's ``serving_default`` signature, or a
:class:`~keras_transformer.export.ctranslate2.CTranslate2Translator`.

Lines are batched by length (the order of their lengths in characters), then
put back in input order: a batch of similar lengths pads little and finishes
its steps together (measured in ``scripts/bench/decode_vs_ctranslate2.py``).
"""

from __future__ import annotations

import concurrent.futures
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["translate_lines"]


def _values(x: Any) -> np.ndarray:
    """A tensor's or a list's values as a numpy array."""
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def translate_lines(
    translate_fn: Callable[[Any], dict[str, Any]],
    lines: Sequence[str],
    batch_size: int = 64,
    desc: str = "translating",
    sort_by_length: bool = True,
    workers: int = 1,
    warn_truncated: bool = True,
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
    from tqdm import tqdm

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    lines = list(lines)
    order = sorted(range(len(lines)), key=lambda i: len(lines[i])) if sort_by_length else list(range(len(lines)))
    out: list[str | None] = [None] * len(lines)
    truncated: list[int] = []
    def translate_batch(indices):
        result = translate_fn(tf.constant([lines[i] for i in indices], tf.string))
        translations = _values(result["translations"]).tolist()
        if len(translations) != len(indices):
            raise ValueError(f"translate_fn returned {len(translations)} translations for {len(indices)} sentences")
        flags = _values(result["truncated"]) if "truncated" in result else [False] * len(indices)
        return indices, translations, flags

    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    with tqdm(total=len(lines), desc=desc, unit="sent", file=sys.stderr, disable=None) as bar, \
            concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(translate_batch, batches) if workers > 1 else map(translate_batch, batches)
        for indices, translations, flags in results:
            truncated.extend(i + 1 for i, flag in zip(indices, flags) if flag)
            for i, text in zip(indices, translations):
                out[i] = text.decode("utf-8") if isinstance(text, bytes) else text
            bar.update(len(indices))
    if truncated and warn_truncated:
        truncated.sort()
        shown = ", ".join(str(n) for n in truncated[:20]) + (", ..." if len(truncated) > 20 else "")
        print(
            f"warning: {len(truncated)} of {len(out)} sentences are longer than the model's max_length and were "
            f"translated from their first max_length - 1 pieces (lines {shown})",
            file=sys.stderr,
            flush=True,
        )
    return out
