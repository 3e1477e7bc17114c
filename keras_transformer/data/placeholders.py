r"""Spans that are never translated: numbers, web and e-mail addresses carried through a placeholder.

A model translates what it saw in training; a digit string, a URL or an
e-mail address it never saw comes out mangled, or as a syllable repeated to
the length limit. Marian and OpenNMT's tokenizer carry such spans through
instead: each span of the source is replaced by one placeholder piece,
:data:`PLACEHOLDER` (``⦅ph⦆``, a user-defined piece of the SentencePiece
vocabulary, so it is one token), the model translates the masked sentence,
and the ``i``-th placeholder of the translation becomes the ``i``-th span of
the source again.

The rules, the same in Python (the ``*_str`` functions: training data, the
prepared shards, the CTranslate2 path) and in-graph (:func:`mask` and
:func:`restore`: the ``Translator`` and every SavedModel):

* **A span** is a match of :data:`SPAN_PATTERN`, leftmost-longest from the
  start: a web address (``http://``, ``https://`` or ``www.`` and what
  follows up to a space, trailing punctuation left out), an e-mail address,
  or a number (ASCII digits, with ``.``, ``,`` or ``:`` between digit
  groups: ``3``, ``1,000``, ``12:30``, ``3.14``).
* **Translating**: every span of the source becomes :data:`PLACEHOLDER`;
  after detokenization the ``i``-th placeholder of the output becomes the
  ``i``-th span, and placeholders beyond the source's spans are dropped (a
  model's invention; spans the output has no placeholder for are left out,
  as a dropped word would be).
* **Training** (and scoring a given pair): a pair is masked only when both
  sides hold the same spans in the same order, so the model learns that the
  ``i``-th placeholder of the target is the ``i``-th of the source; other
  pairs are kept as they are.
* Only a vocabulary that holds :data:`PLACEHOLDER` (:func:`has_placeholder`;
  vocabularies trained with ``placeholders=True``, the default since this
  rule) masks anything: older ones translate as before.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "PLACEHOLDER",
    "SPAN_PATTERN",
    "has_placeholder",
    "mask",
    "mask_pair",
    "mask_pair_str",
    "mask_pairs",
    "mask_str",
    "restore",
    "restore_str",
]

#: The placeholder piece (U+2985, "ph", U+2986: stable under NFKC, so SentencePiece's normalizer keeps it).
PLACEHOLDER = "\u2985ph\u2986"

_NOT_SPACE = r"[^ \t\n\r\f\v]"
_URL = rf"(?:https?://|www\.){_NOT_SPACE}*[^ \t\n\r\f\v.,;:!?'\")\]}}>]"
_EMAIL = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"
_NUMBER = r"[0-9]+(?:[.,:][0-9]+)*"
#: What is carried through: URLs, e-mail addresses, numbers (valid in Python ``re`` and RE2 alike, ASCII classes).
SPAN_PATTERN = f"{_URL}|{_EMAIL}|{_NUMBER}"
_SPAN = re.compile(SPAN_PATTERN)


def has_placeholder(tokenizer: Any) -> bool:
    """Whether ``tokenizer``'s vocabulary holds :data:`PLACEHOLDER` as one piece.

    Args:
        tokenizer: a :class:`~keras_transformer.data.tokenizer.SubwordTokenizer`
            (``placeholder_id``) or a ``sentencepiece.SentencePieceProcessor``.
    """
    placeholder_id = getattr(tokenizer, "placeholder_id", None)
    if placeholder_id is not None:
        return placeholder_id > 0
    if hasattr(tokenizer, "piece_to_id") and hasattr(tokenizer, "unk_id"):
        return tokenizer.piece_to_id(PLACEHOLDER) != tokenizer.unk_id()
    return False


# -- Python ------------------------------------------------------------------------------------


def mask_str(sentence: str) -> tuple[str, list[str]]:
    """``sentence`` with every span replaced by :data:`PLACEHOLDER`, and the spans in order.

    >>> mask_str("Call 555-1234 or see www.example.com.")
    ('Call ⦅ph⦆-⦅ph⦆ or see ⦅ph⦆.', ['555', '1234', 'www.example.com'])
    """
    spans = _SPAN.findall(sentence)
    return (_SPAN.sub(PLACEHOLDER, sentence), spans) if spans else (sentence, [])


def restore_str(text: str, spans: Sequence[str]) -> str:
    """The ``i``-th :data:`PLACEHOLDER` of ``text`` replaced by ``spans[i]``; placeholders beyond them dropped."""
    parts = text.split(PLACEHOLDER)
    out = [parts[0]]
    for i, part in enumerate(parts[1:]):
        out.append(spans[i] if i < len(spans) else "")
        out.append(part)
    return "".join(out)


def mask_pair_str(source: str, target: str) -> tuple[str, str]:
    """Both sides masked when they hold the same spans in the same order, else both unchanged."""
    masked_source, source_spans = mask_str(source)
    if not source_spans:
        return source, target
    masked_target, target_spans = mask_str(target)
    return (masked_source, masked_target) if source_spans == target_spans else (source, target)


def mask_pairs(sources: Sequence[str], targets: Sequence[str]) -> tuple[list[str], list[str]]:
    """:func:`mask_pair_str` of every pair (aligned lists in, aligned lists out)."""
    pairs = [mask_pair_str(s, t) for s, t in zip(sources, targets)]
    return [s for s, _ in pairs], [t for _, t in pairs]


# -- in-graph ----------------------------------------------------------------------------------


def mask(sentences):
    """In-graph :func:`mask_str` of a batch: ``(masked [B] tf.string, spans ragged tf.string [B, (k)])``.

    Core TensorFlow ops only (``RegexReplace``, ``StringSplitV2``), so a
    SavedModel needs no further op library: each span is wrapped in NUL
    characters, and splitting on NUL leaves the spans at the odd positions
    (NULs of the input itself are dropped for that split first).

    Args:
        sentences: ``[B]`` ``tf.string``, valid UTF-8.
    """
    import tensorflow as tf

    wrapped = tf.strings.regex_replace(tf.strings.regex_replace(sentences, "\x00", ""), f"({SPAN_PATTERN})",
                                       "\x00\\1\x00")
    parts = tf.strings.split(wrapped, sep="\x00")  # text, span, text, span, ..., text
    odd = tf.equal(tf.math.floormod(tf.ragged.range(parts.row_lengths()), 2), 1)
    return tf.strings.regex_replace(sentences, SPAN_PATTERN, PLACEHOLDER), tf.ragged.boolean_mask(parts, odd)


def mask_pair(sources, targets):
    """In-graph :func:`mask_pair_str` of aligned ``[B]`` ``tf.string`` batches: ``(sources, targets)``, masked or not."""
    import tensorflow as tf

    masked_sources, source_spans = mask(sources)
    masked_targets, target_spans = mask(targets)
    counts = source_spans.row_lengths()
    # Spans hold no newline, so joined with one they compare as lists.
    same = (counts > 0) & tf.equal(counts, target_spans.row_lengths()) & tf.equal(
        tf.strings.reduce_join(source_spans, axis=1, separator="\n"),
        tf.strings.reduce_join(target_spans, axis=1, separator="\n"))
    return tf.where(same, masked_sources, sources), tf.where(same, masked_targets, targets)


def restore(texts, spans):
    """In-graph :func:`restore_str`: ``[B]`` ``tf.string`` translations with the ``spans`` (ragged ``[B, (k)]``) back.

    Args:
        texts: ``[B]`` ``tf.string``.
        spans: the :func:`mask` spans of the sources, ragged ``tf.string`` ``[B, (k)]``.

    Returns:
        ``[B]`` ``tf.string``.
    """
    import tensorflow as tf

    parts = tf.strings.split(texts, sep=PLACEHOLDER)  # [B, (m + 1)] around m placeholders per row
    slots = parts.row_lengths() - 1
    lengths = tf.concat([slots, tf.cast(spans.row_lengths(), slots.dtype), tf.zeros([1], slots.dtype)], axis=0)
    width = tf.reduce_max(lengths)
    table = spans.to_tensor(default_value="")
    table = tf.pad(table, [[0, 0], [0, width - tf.shape(table, out_type=width.dtype)[1]]], constant_values="")
    # table: [B, width], "" beyond a row's spans
    rows = tf.repeat(tf.range(tf.shape(slots, out_type=tf.int64)[0]), slots)
    columns = tf.ragged.range(slots).flat_values  # 0..m-1 in each row
    fills = tf.gather_nd(table, tf.stack([rows, columns], axis=1))  # the i-th span for the i-th placeholder
    heads = tf.gather(parts.flat_values, tf.gather(parts.row_starts(), rows) + columns)  # the text before each
    filled = tf.RaggedTensor.from_row_lengths(tf.strings.join([heads, fills]), slots)
    last = tf.gather(parts.flat_values, parts.row_limits() - 1)  # the text after the last placeholder
    return tf.strings.join([tf.strings.reduce_join(filled, axis=1), last])
