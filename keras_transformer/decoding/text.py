r"""The translators' text: sentences in, source and target ids; output ids, sentences out.

The :class:`~keras_transformer.decoding.Translator` (and every SavedModel
exported from it) applies these rules in-graph, with core TF and
``tensorflow_text`` ops on ``tf.string`` tensors;
:class:`~keras_transformer.decoding.ctranslate2.CTranslate2Translator`
applies the same string rules to Python ``str`` with the ``*_str`` twins of
the functions here.

* Source ids are ``pieces + [EOS]`` (package contract), 0-padded on the right.
* **Over-long sources.** A source with more than ``max_length - 1`` pieces is
  truncated to its first ``max_length - 1`` pieces (the model cannot attend
  beyond ``max_length`` positions); this is *never silent*: every signature
  returns ``truncated`` (``[B]`` bool, True for such sentences), and the
  translation is the one of the truncated source.
* **Maximum output length** per sentence = source length (tokens, EOS included)
  + ``extra_decode_length`` (50 in Section 6.1), capped by ``max_length``; the
  output includes EOS. EOS is forced when the limit is reached. Unknown
  pieces (below) do not count toward the source length here.
* **Empty / whitespace-only input** (no pieces, or only whitespace: ASCII
  ``\s`` such as tabs/newlines and Unicode separators ``\p{Z}`` such as
  U+00A0 / U+3000, which the SentencePiece model may otherwise keep as pieces)
  is not sent through the model's answer: its translation is ``""``, its score
  ``0.0``, its ids all 0.
* **Input normalization** is the vocabulary's: the SentencePiece model
  carries its rule (``nmt_nfkc`` for vocabularies trained since it became
  the default: NFKC, Unicode spaces folded, see
  :mod:`keras_transformer.data.tokenizer`), and ``tensorflow_text`` applies
  it in-graph, so a sentence written with tabs, no-break or ideographic
  spaces, repeated or surrounding spaces gets the source ids, hence the
  translation, of its plain form, here and in every export, exactly as the
  training data was prepared.
* **Unknown input.** Pieces the vocabulary lacks (``unk`` and the byte
  pieces of byte fallback: characters never seen in training, e.g. Chinese
  or emoji in an English-German vocabulary) are *unknown*; a model never
  learnt to translate them and tends to repeat itself until the length
  limit. Two rules bound what it writes:

  - a sentence with unknown pieces and no known word (no known piece with a
    letter or digit: ``"你好世界"``, ``"😀👍"``, ``"你好!"``), and a sentence
    without any letter or digit at all (``"-"``, ``"?"``, ``"..."``), is not
    sent through the model's answer: its translation is the input itself, copied through
    with its whitespace folded (``[\s\p{Z}]+`` -> one space, none at the
    ends), its score ``0.0``, its ids all 0; its search stops at once;
  - otherwise unknown pieces do not count toward the output limit: a
    sentence of ``K`` known pieces writes at most ``min(K + 1 +
    extra_decode_length, max_length)`` tokens (EOS included). A sentence
    without unknown pieces (``K`` = all its pieces) keeps exactly the limit
    of Section 6.1, so its translation is unchanged.
* **Invalid UTF-8.** Inputs are transcoded UTF-8 -> UTF-8 in-graph with
  ``errors="replace"`` (``tf.strings.unicode_transcode``, a core op) before
  tokenization: every invalid byte sequence becomes U+FFFD (which the
  SentencePiece model maps to ``unk`` unless it knows it), so invalid bytes
  translate exactly like the same text with U+FFFD in their place. Outputs get
  the same treatment, so every returned string is valid UTF-8 (the REST API
  and JSON clients need it) even for a byte-fallback vocabulary.

Layout: the string rules (:func:`valid_utf8`, :func:`is_blank`,
:func:`fold_whitespace`, and their Python twins :func:`valid_str`,
:func:`is_blank_str`, :func:`fold_whitespace_str`, :func:`copied_through_str`);
the input side
(:func:`piece_tables`, :func:`copied_through`, :func:`source_ids`,
:func:`target_ids`); the output side (:func:`output_texts`,
:func:`n_best_texts`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = [
    "valid_utf8",
    "is_blank",
    "fold_whitespace",
    "valid_str",
    "is_blank_str",
    "fold_whitespace_str",
    "copied_through_str",
    "piece_tables",
    "copied_through",
    "source_ids",
    "target_ids",
    "output_texts",
    "n_best_texts",
]

#: One whitespace character of the rules (RE2): ASCII ``\s`` or a Unicode separator ``\p{Z}``.
_SPACE = r"[\s\p{Z}]"


# -- the string rules on tf.string tensors (in-graph, core TF ops) ---------------------------


def valid_utf8(strings: tf.Tensor) -> tf.Tensor:
    """Replaces every invalid UTF-8 sequence by U+FFFD (in-graph, core TF op).

    Args:
        strings: ``[B]`` ``tf.string``.

    Returns:
        ``[B]`` ``tf.string``, valid UTF-8; valid input is returned unchanged.
    """
    return tf.strings.unicode_transcode(
        strings, input_encoding="UTF-8", output_encoding="UTF-8", errors="replace",
        replacement_char=0xFFFD, replace_control_characters=False,
    )


def is_blank(strings: tf.Tensor) -> tf.Tensor:
    """Whether each string is empty or whitespace only (``[\\s\\p{Z}]*``; core TF op).

    Args:
        strings: ``[B]`` ``tf.string``, valid UTF-8.

    Returns:
        ``[B]`` bool.
    """
    return tf.strings.regex_full_match(strings, _SPACE + "*")


def fold_whitespace(strings: tf.Tensor) -> tf.Tensor:
    """Every run of whitespace (``[\\s\\p{Z}]+``) becomes one space; none at either end (core TF ops).

    Args:
        strings: ``[B]`` ``tf.string``, valid UTF-8.

    Returns:
        ``[B]`` ``tf.string``.
    """
    folded = tf.strings.regex_replace(strings, _SPACE + "+", " ")
    return tf.strings.regex_replace(folded, r"^ | $", "")


# -- the same rules on Python strings (CTranslate2Translator) --------------------------------


def _is_space(char: str) -> bool:
    """``[\\s\\p{Z}]`` for one character: RE2's ASCII ``\\s`` (``[\\t\\n\\f\\r ]``) or a Unicode separator."""
    return char in " \t\n\r\f" or unicodedata.category(char).startswith("Z")


def valid_str(sentence: str) -> str:
    """``sentence`` with lone surrogates treated as invalid UTF-8 bytes, i.e. replaced by U+FFFD.

    A Python ``str`` cannot hold invalid UTF-8, but it can hold lone
    surrogates (e.g. from ``bytes.decode(errors="surrogateescape")``). They
    are turned back into the bytes they stand for (U+DC80..U+DCFF: the
    escaped byte; other surrogates: their 3-byte encoding), and every invalid
    UTF-8 sequence of the result becomes U+FFFD, as :func:`valid_utf8`'s
    ``unicode_transcode(errors="replace")`` does with invalid bytes.
    """
    try:
        sentence.encode("utf-8")
        return sentence
    except UnicodeEncodeError:
        pass
    data = bytearray()
    for char in sentence:
        code = ord(char)
        data += bytes([code - 0xDC00]) if 0xDC80 <= code <= 0xDCFF else char.encode("utf-8", "surrogatepass")
    return bytes(data).decode("utf-8", errors="replace")


def is_blank_str(sentence: str) -> bool:
    """:func:`is_blank`'s ``[\\s\\p{Z}]*``: only ASCII ``\\s`` and Unicode separators."""
    return all(_is_space(char) for char in sentence)


def fold_whitespace_str(sentence: str) -> str:
    """:func:`fold_whitespace` of one sentence: runs of ``[\\s\\p{Z}]`` as one space, none at the ends."""
    out, space = [], False
    for char in sentence:
        if _is_space(char):
            space = bool(out)
        else:
            if space:
                out.append(" ")
            out.append(char)
            space = False
    return "".join(out)


def copied_through_str(unknown: Iterable[bool], word: Iterable[bool], sentence: str = "x") -> bool:
    """:func:`copied_through` of one non-empty sentence: an unknown piece and no known word, or no letter or digit.

    Args:
        unknown, word: its pieces' flags (:func:`piece_tables`).
        sentence: its text (valid UTF-8).
    """
    return (any(unknown) and not any(word)) or not any(char.isalnum() for char in sentence)


# -- input: sentences -> ids ------------------------------------------------------------------


def piece_tables(tokenizer: Any) -> "tuple[np.ndarray, np.ndarray]":
    """The per-id tables of the unknown-input rule: ``(unknown, word)``, two bool ``[vocab_size]`` numpy arrays.

    ``unknown`` marks ``unk`` and the byte-fallback pieces, ``word`` the known
    pieces with a letter or digit (the tokenizer's ``unknown_piece_mask`` and
    ``word_piece_mask``, see :func:`keras_transformer.data.tokenizer.piece_masks`).
    A tokenizer without them has no unknown piece and only word pieces.
    """
    vocab_size = int(tokenizer.vocab_size)
    unknown = getattr(tokenizer, "unknown_piece_mask", None)
    word = getattr(tokenizer, "word_piece_mask", None)
    unknown = np.zeros([vocab_size], bool) if unknown is None else np.asarray(unknown, bool)
    word = np.ones([vocab_size], bool) if word is None else np.asarray(word, bool)
    return unknown, word


def _pieces(tokenizer: Any, strings: tf.Tensor, max_length: int) -> "tuple[tf.RaggedTensor, tf.Tensor]":
    """Pieces int32 ``[B, (n)]`` of valid-UTF-8 ``strings``, cut to ``max_length - 1``; the uncut counts int32 [B]."""
    pieces = tf.cast(tokenizer.tokenize(strings), tf.int32)
    num_pieces = tf.cast(pieces.row_lengths(), tf.int32)
    return pieces[:, :max_length - 1], num_pieces


def _id_column(batch_size: tf.Tensor, token_id: int) -> tf.RaggedTensor:
    """``token_id`` once per row: a ragged int32 ``[B, 1]`` to concatenate with pieces."""
    return tf.RaggedTensor.from_tensor(tf.fill([batch_size, 1], tf.constant(token_id, tf.int32)))


#: A sentence of punctuation, symbols and spaces only (no letter ``\pL``, no digit ``\pN``; RE2 syntax).
NO_WORD_PATTERN = r"[^\pL\pN]*"


def copied_through(unknown: tf.RaggedTensor, word: tf.RaggedTensor, empty: tf.Tensor,
                   sentences: "tf.Tensor | None" = None) -> tf.Tensor:
    """Which sentences are translated as themselves (whitespace folded).

    Those with unknown pieces and no known word, and those without any letter
    or digit (a dash, a question mark, ``"..."``: nothing to translate; a
    model asked anyway invents a sentence).

    Args:
        unknown: bool ragged ``[B, (pieces)]``, the sentence's unknown pieces.
        word: bool ragged ``[B, (pieces)]``, its known pieces with a letter or digit.
        empty: bool ``[B]``, empty or whitespace-only sentences (never copied).
        sentences: the valid-UTF-8 ``[B]`` ``tf.string`` sentences (None: the
            letter-or-digit rule is not applied).

    Returns:
        bool ``[B]``.
    """
    unknown_only = tf.reduce_any(unknown, axis=1) & tf.logical_not(tf.reduce_any(word, axis=1))
    if sentences is not None:
        unknown_only |= tf.strings.regex_full_match(sentences, NO_WORD_PATTERN)
    return unknown_only & tf.logical_not(empty)


def source_ids(
    sentences: tf.Tensor,
    tokenizer: Any,
    max_length: int,
    extra_decode_length: int,
    eos_id: int,
    unknown_pieces: np.ndarray,
    word_pieces: np.ndarray,
) -> dict[str, tf.Tensor]:
    """Tokenizes a batch into model inputs (the rules of the module docstring).

    Args:
        sentences: ``[B]`` ``tf.string``.
        tokenizer: a :class:`~keras_transformer.data.tokenizer.SubwordTokenizer`.
        max_length: longest source, pieces + EOS (Python int >= 2).
        extra_decode_length: output limit = known source pieces + 1 + this.
        eos_id: the EOS id.
        unknown_pieces, word_pieces: :func:`piece_tables`.

    Returns:
        dict with ``source_ids`` int32 [B, S] (pieces + EOS, 0-padded,
        ``S <= max_length``), ``max_decode_lengths`` int32 [B] (known
        source pieces + 1 + extra_decode_length, capped by max_length; 1
        for empty and copied sentences), ``truncated`` bool [B] (more
        than ``max_length - 1`` pieces), ``empty`` bool [B] (no pieces or
        whitespace only) and ``copied`` bool [B] (unknown pieces and no
        known word: translated as the input itself, see the module
        docstring).
    """
    sentences = valid_utf8(sentences)
    blank = is_blank(sentences)
    pieces, num_pieces = _pieces(tokenizer, sentences, max_length)
    truncated = num_pieces > max_length - 1
    batch_size = tf.shape(num_pieces)[0]
    source = tf.concat([pieces, _id_column(batch_size, eos_id)], axis=1).to_tensor(default_value=0)
    unknown = tf.ragged.map_flat_values(tf.gather, tf.constant(unknown_pieces), pieces)
    word = tf.ragged.map_flat_values(tf.gather, tf.constant(word_pieces), pieces)
    known = tf.reduce_sum(tf.cast(tf.logical_not(unknown), tf.int32), axis=1)
    empty = tf.logical_or(tf.equal(num_pieces, 0), blank)
    copied = copied_through(unknown, word, empty, sentences)
    max_decode_lengths = tf.minimum(known + 1 + extra_decode_length, max_length)
    # Nothing to search for: EOS at once.
    max_decode_lengths = tf.where(empty | copied, tf.ones_like(max_decode_lengths), max_decode_lengths)
    return {
        "source_ids": source,
        "max_decode_lengths": max_decode_lengths,
        "truncated": truncated,
        "empty": empty,
        "copied": copied,
    }


def target_ids(targets: tf.Tensor, tokenizer: Any, max_length: int, bos_id: int, eos_id: int) -> dict[str, tf.Tensor]:
    """Tokenizes a batch of targets for teacher forcing (the training contract).

    Args:
        targets: ``[B]`` ``tf.string`` (invalid UTF-8 becomes U+FFFD, as
            for sources).
        tokenizer: a :class:`~keras_transformer.data.tokenizer.SubwordTokenizer`.
        max_length: longest target, pieces + EOS (Python int >= 2).
        bos_id, eos_id: the BOS and EOS ids.

    Returns:
        dict with ``target_in_ids`` int32 [B, T] (BOS + pieces, 0-padded),
        ``target_out_ids`` int32 [B, T] (pieces + EOS, 0-padded),
        ``num_tokens`` int32 [B] (pieces + EOS, ``|Y|`` of the length
        penalty) and ``truncated`` bool [B] (more than ``max_length - 1``
        pieces: the first ``max_length - 1`` are kept, then EOS). ``T <=
        max_length``.
    """
    pieces, num_pieces = _pieces(tokenizer, valid_utf8(targets), max_length)
    keep = max_length - 1
    batch_size = tf.shape(num_pieces)[0]
    return {
        "target_in_ids": tf.concat([_id_column(batch_size, bos_id), pieces], axis=1).to_tensor(default_value=0),
        "target_out_ids": tf.concat([pieces, _id_column(batch_size, eos_id)], axis=1).to_tensor(default_value=0),
        "num_tokens": tf.minimum(num_pieces, keep) + 1,
        "truncated": num_pieces > keep,
    }


# -- output: ids -> sentences -----------------------------------------------------------------


def output_texts(tokenizer: Any, sentences: tf.Tensor, ids: tf.Tensor, copied: tf.Tensor) -> tf.Tensor:
    """Detokenized ``ids`` as valid UTF-8; copied sentences are their whitespace-folded input.

    Args:
        tokenizer: a :class:`~keras_transformer.data.tokenizer.SubwordTokenizer`.
        sentences: ``[B]`` ``tf.string``, the inputs.
        ids: int32 ``[B, L]`` output ids (EOS and 0 after it are dropped by
            the detokenizer).
        copied: bool ``[B]`` (:func:`copied_through`).

    Returns:
        ``[B]`` ``tf.string``.
    """
    translations = valid_utf8(tokenizer.detokenize(ids))
    return tf.where(copied, fold_whitespace(valid_utf8(sentences)), translations)


def n_best_texts(tokenizer: Any, sentences: tf.Tensor, ids: tf.Tensor, copied: tf.Tensor, beam_size: int) -> tf.Tensor:
    """The text of every beam, ``[B, beam_size]`` ``tf.string``; column 0 is :func:`output_texts` of the best.

    Args:
        tokenizer: a :class:`~keras_transformer.data.tokenizer.SubwordTokenizer`.
        sentences: ``[B]`` ``tf.string``, the inputs.
        ids: int32 ``[B, beam_size, L]``, best first.
        copied: bool ``[B]`` (:func:`copied_through`): column 0 is the
            whitespace-folded input.
        beam_size: Python int, the static width of the result.
    """
    shape = tf.shape(ids)
    texts = valid_utf8(tokenizer.detokenize(tf.reshape(ids, [-1, shape[2]])))
    texts = tf.reshape(texts, shape[:2])
    first = output_texts(tokenizer, sentences, ids[:, 0, :], copied)
    texts = tf.concat([first[:, None], texts[:, 1:]], axis=1)
    texts.set_shape([None, beam_size])
    return texts
