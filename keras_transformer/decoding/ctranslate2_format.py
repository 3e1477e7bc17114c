"""The CTranslate2 export's directory: what the exporter writes and the runtime reads.

:func:`keras_transformer.export.ctranslate2.export_ctranslate2` writes it and
:class:`keras_transformer.decoding.ctranslate2.CTranslate2Translator` reads
it; both take the names, tokens and decoding settings from here (the export
sub-package imports decoding, never the other way round)::

    model.bin, config.json, shared_vocabulary.json   CTranslate2's model (CT2_FILES)
    sentencepiece.model                               our vocabulary (CT2_VOCAB_FILENAME)
    keras_transformer.json                            our record (CT2_RECORD_FILENAME,
                                                      format RECORD_FORMAT)

The record's ``decoding`` entry holds the :data:`DECODING_KEYS`, validated by
:func:`decoding_settings`. ``ctranslate2`` is an optional extra
(``pip install 'keras_transformer[ctranslate2]'``), imported only by
:func:`import_ctranslate2`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CT2_RECORD_FILENAME",
    "CT2_VOCAB_FILENAME",
    "RECORD_FORMAT",
    "CT2_FILES",
    "DECODING_KEYS",
    "BOS_TOKEN",
    "EOS_TOKEN",
    "UNK_TOKEN",
    "placeholder_token",
    "import_ctranslate2",
    "check_int",
    "decoding_settings",
]

#: Our record in the exported directory.
CT2_RECORD_FILENAME = "keras_transformer.json"
#: The SentencePiece model in the exported directory.
CT2_VOCAB_FILENAME = "sentencepiece.model"
#: The record's ``format`` entry.
RECORD_FORMAT = "keras_transformer.ctranslate2/1"
#: What CTranslate2 itself writes (``TransformerSpec.save`` with one shared vocabulary).
CT2_FILES = ("model.bin", "config.json", "shared_vocabulary.json")
_INSTALL = "pip install 'keras_transformer[ctranslate2]'"
#: The record's decoding defaults (the settings :func:`decoding_settings` validates).
DECODING_KEYS = ("max_length", "extra_decode_length", "beam_size", "length_penalty")
#: CTranslate2's BOS, EOS and unknown tokens: the SentencePiece pieces of ids 2, 3 and 1.
BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<s>", "</s>", "<unk>"


def placeholder_token(i: int) -> str:
    """CTranslate2 token of id ``i`` of a model larger than its SentencePiece vocabulary (never an input)."""
    return f"<keras_transformer_unused_{i}>"


def import_ctranslate2():
    """The ``ctranslate2`` module.

    Raises:
        ImportError: when it is not installed; the message says
            ``pip install 'keras_transformer[ctranslate2]'``.
    """
    try:
        import ctranslate2
    except ImportError as e:
        raise ImportError(f"the CTranslate2 export needs the ctranslate2 package: {_INSTALL}") from e
    return ctranslate2


def check_int(owner: str, name: str, value: Any, minimum: int) -> int:
    """``value`` if it is an int (not a bool) >= ``minimum``.

    Raises:
        ValueError: ``"<owner>: <name> must be an int >= <minimum>, got <value>"``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an int >= {minimum}, got {value!r}")
    return value


def decoding_settings(owner: str, values: Mapping[str, Any], model_max_length: int) -> dict[str, Any]:
    """Validated ``max_length``, ``extra_decode_length``, ``beam_size``, ``length_penalty``.

    Args:
        owner: the caller, named in the messages.
        values: a mapping with the four :data:`DECODING_KEYS`.
        model_max_length: the model's ``max_length``, the largest ``max_length``.

    Returns:
        dict of ``max_length`` (int in ``[2, model_max_length]``),
        ``extra_decode_length`` (int >= 0), ``beam_size`` (int >= 1) and
        ``length_penalty`` (float >= 0).

    Raises:
        ValueError: naming ``owner`` and the setting.
    """
    max_length = check_int(owner, "max_length", values["max_length"], 2)
    if max_length > model_max_length:
        raise ValueError(f"{owner}: max_length ({max_length}) exceeds the model's max_length ({model_max_length})")
    alpha = values["length_penalty"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha >= 0:
        raise ValueError(f"{owner}: length_penalty must be a number >= 0, got {alpha!r}")
    return {
        "max_length": max_length,
        "extra_decode_length": check_int(owner, "extra_decode_length", values["extra_decode_length"], 0),
        "beam_size": check_int(owner, "beam_size", values["beam_size"], 1),
        "length_penalty": float(alpha),
    }
