"""Export to CTranslate2 and a translator over the exported directory.

CTranslate2 (OpenNMT) runs Transformer inference in C++ with quantized
weights; on a CPU it is the fastest way to serve our models. The export fills
CTranslate2's own model specification (``ctranslate2.specs.TransformerSpec``)
from the Keras weights, so no CTranslate2 converter or training framework is
involved. ``pip install 'keras_transformer[ctranslate2]'``; ``ctranslate2`` is
imported only when one of these functions is called.

Exported directory::

    model.bin, config.json, shared_vocabulary.json   CTranslate2's model
    sentencepiece.model                               our vocabulary (spec.register_file)
    keras_transformer.json                            model config, vocabulary sha256,
                                                      decoding defaults, quantization

Mapping (Keras -> spec; CTranslate2 linear weights are ``[out, in]``, Keras
kernels ``[in, out]``, so every kernel is transposed):

* ``embedding.embeddings`` (tied, Section 3.4) -> ``encoder.embeddings[0]``,
  ``decoder.embeddings`` and ``decoder.projection`` (no bias); untied:
  ``source_embedding``, ``target_embedding``, ``output_projection``;
  ``scale_embeddings`` (x sqrt(d_model));
* sinusoids (Section 3.5) or the learned tables ->
  ``{encoder,decoder}.position_encodings.encodings``;
* ``self_attention`` query, key, value / output -> ``self_attention.linear[0]``
  (fused Q, K, V on the output axis) / ``linear[1]``;
* ``cross_attention`` query / key, value / output -> ``attention.linear[0]`` /
  ``linear[1]`` (fused K, V) / ``linear[2]``;
* ``feed_forward`` inner / output -> ``ffn.linear_0`` / ``ffn.linear_1``;
* ``self_attention_norm``, ``cross_attention_norm``, ``feed_forward_norm`` ->
  ``self_attention.layer_norm``, ``attention.layer_norm``, ``ffn.layer_norm``;
  the pre-LN ``final_norm`` of the encoder/decoder -> ``encoder/decoder.layer_norm``.

The per-sub-layer norms map the same way for pre-LN and post-LN: CTranslate2
applies a sub-layer's ``layer_norm`` to its input when ``pre_norm`` and to
``input + output`` otherwise, exactly as ``EncoderLayer``/``DecoderLayer`` do
with ``norm_first``; only pre-LN has the final norms.

Mismatches handled here:

* **Positions.** CTranslate2's built-in sinusoids are tensor2tensor's
  (``[sin | cos]`` halves, positions from 1); ours interleave sin (even
  dimensions) and cos (odd dimensions) from position 0 (Section 3.5), so the
  table is always written explicitly. CTranslate2 raises "No position
  encodings are defined for positions >= N" beyond a model table, so the
  sinusoidal table has ``max_length + extra_decode_length`` rows: more than
  :class:`CTranslate2Translator` ever uses (sources of at most ``max_length``
  tokens, outputs of at most ``max_length - 1`` decoding steps). A learned
  table has the model's ``max_length`` rows.
* **Layer-norm epsilon.** Ours is 1e-6 (Keras' default is 1e-3); it is read
  from the layers and written to ``config.json``.
* **EOS.** Our source is pieces + EOS: ``add_source_eos=True``.
* **Decoding** (:class:`CTranslate2Translator`): CTranslate2's
  ``max_decoding_length`` counts generated tokens (EOS included when it is
  generated; a hypothesis reaching it simply stops) and is one number per
  call, its default ``min_decoding_length=1`` forbids an immediate EOS, and
  its beam search normalizes by ``|Y|^alpha`` instead of Wu et al.'s
  ``((5 + |Y|) / 6)^alpha``; the translator's docstring says how each is
  handled. Used directly (``ctranslate2.Translator``), an export expects
  pieces without EOS and ``max_decoding_length`` below the table's rows.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import shutil
import tempfile
import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "export_ctranslate2",
    "CTranslate2Translator",
    "QUANTIZATIONS",
    "CT2_RECORD_FILENAME",
    "CT2_VOCAB_FILENAME",
]

#: Accepted ``quantization`` values (CTranslate2's weight types); None = float32 as trained.
QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)
#: Our record in the exported directory.
CT2_RECORD_FILENAME = "keras_transformer.json"
#: The SentencePiece model in the exported directory.
CT2_VOCAB_FILENAME = "sentencepiece.model"
_FORMAT = "keras_transformer.ctranslate2/1"
#: What CTranslate2 itself writes (``TransformerSpec.save`` with one shared vocabulary).
_CT2_FILES = ("model.bin", "config.json", "shared_vocabulary.json")
_INSTALL = "pip install 'keras_transformer[ctranslate2]'"
_DECODING_KEYS = ("max_length", "extra_decode_length", "beam_size", "length_penalty")
_BOS, _EOS, _UNK = "<s>", "</s>", "<unk>"


def _placeholder(i: int) -> str:
    """CTranslate2 token of id ``i`` of a model larger than its SentencePiece vocabulary (never an input)."""
    return f"<keras_transformer_unused_{i}>"


def _import_ctranslate2():
    try:
        import ctranslate2
    except ImportError as e:
        raise ImportError(f"the CTranslate2 export needs the ctranslate2 package: {_INSTALL}") from e
    return ctranslate2


def _check_int(owner: str, name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an int >= {minimum}, got {value!r}")
    return value


def _decoding_settings(owner: str, values: Mapping[str, Any], model_max_length: int) -> dict[str, Any]:
    """Validated ``max_length``, ``extra_decode_length``, ``beam_size``, ``length_penalty``."""
    max_length = _check_int(owner, "max_length", values["max_length"], 2)
    if max_length > model_max_length:
        raise ValueError(f"{owner}: max_length ({max_length}) exceeds the model's max_length ({model_max_length})")
    alpha = values["length_penalty"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha >= 0:
        raise ValueError(f"{owner}: length_penalty must be a number >= 0, got {alpha!r}")
    return {
        "max_length": max_length,
        "extra_decode_length": _check_int(owner, "extra_decode_length", values["extra_decode_length"], 0),
        "beam_size": _check_int(owner, "beam_size", values["beam_size"], 1),
        "length_penalty": float(alpha),
    }


# -- export ---------------------------------------------------------------------------------


def _array(variable) -> np.ndarray:
    import keras

    return np.ascontiguousarray(keras.ops.convert_to_numpy(variable), dtype=np.float32)


def _set_linear(spec, denses) -> None:
    """``spec.weight`` = the transposed kernels of ``denses`` stacked on the output axis (fused)."""
    spec.weight = np.ascontiguousarray(np.concatenate([_array(d.kernel).T for d in denses], axis=0))
    if any(d.bias is not None for d in denses):
        spec.bias = np.concatenate(
            [_array(d.bias) if d.bias is not None else np.zeros([d.units], np.float32) for d in denses]
        )


def _set_norm(spec, norm) -> None:
    width = norm.gamma.shape[-1] if norm.gamma is not None else norm.beta.shape[-1]
    spec.gamma = _array(norm.gamma) if norm.gamma is not None else np.ones([width], np.float32)
    spec.beta = _array(norm.beta) if norm.beta is not None else np.zeros([width], np.float32)


def _set_attention(spec, attention, fused_groups) -> None:
    layers = {"q": attention.query_dense, "k": attention.key_dense, "v": attention.value_dense}
    for linear, group in zip(spec.linear, fused_groups):
        _set_linear(linear, [layers[name] for name in group])
    _set_linear(spec.linear[-1], [attention.output_dense])


def _set_ffn(spec, feed_forward, norm) -> None:
    import keras

    if feed_forward.activation is not keras.activations.relu:
        raise ValueError(
            f"export_ctranslate2: only relu feed-forward networks are supported, got {feed_forward.activation}"
        )
    _set_norm(spec.layer_norm, norm)
    _set_linear(spec.linear_0, [feed_forward.inner_dense])
    _set_linear(spec.linear_1, [feed_forward.output_dense])


def _layer_norms(model) -> list:
    norms = []
    for layer in model.encoder.encoder_layers:
        norms += [layer.self_attention_norm, layer.feed_forward_norm]
    for layer in model.decoder.decoder_layers:
        norms += [layer.self_attention_norm, layer.cross_attention_norm, layer.feed_forward_norm]
    return norms + [n for n in (model.encoder.final_norm, model.decoder.final_norm) if n is not None]


def _position_table(embedding, rows: int) -> np.ndarray:
    """The position encodings of a ``PositionalEmbedding``: its learned table, or our sinusoids of
    positions ``0 .. rows - 1`` (Section 3.5)."""
    from keras_transformer.layers.positional_embedding import sinusoidal_encoding

    if embedding.learned_positions:
        return _array(embedding.position_embeddings)
    return _array(sinusoidal_encoding(np.arange(rows, dtype=np.int32), embedding.d_model, dtype="float32"))


def _to_bfloat16(spec, ct2_model_spec) -> None:
    """Stores the spec's float32 arrays as bfloat16 (``ml_dtypes``, a TensorFlow dependency).

    CTranslate2's own conversion to bfloat16 goes through ``torch``; numpy
    arrays of ``ml_dtypes.bfloat16`` carry the same bytes (the upper half of
    each float32, rounded to nearest even) and the dtype name CTranslate2
    writes, so no torch is needed. ``optimize`` then keeps them (or, for
    ``int8_bfloat16``, quantizes the weight matrices from them).
    """
    import ml_dtypes

    def convert(layer, name, value):
        if isinstance(value, ct2_model_spec.NumpyVariable) and value.array.dtype == np.float32 and value.array.ndim:
            setattr(layer, name.split("/")[-1], ct2_model_spec.NumpyVariable(value.array.astype(ml_dtypes.bfloat16)))

    ct2_model_spec.visit_spec(spec, convert)


def export_ctranslate2(
    model: Any,
    tokenizer: Any,
    output_dir: str | os.PathLike,
    quantization: str | None = None,
    decoding: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> str:
    """Writes ``model`` as a CTranslate2 model directory, through CTranslate2's model spec.

    Builds ``ctranslate2.specs.TransformerSpec.from_config(num_layers,
    num_heads, pre_norm=model.norm_first)``, sets every variable from the
    Keras weights (mapping in the module docstring), validates it, applies
    ``optimize(quantization=...)`` and saves it with the SentencePiece model
    and ``keras_transformer.json``. The directory is written under a
    temporary sibling name and renamed when complete, so ``output_dir`` is
    either the whole export or untouched (an old export is replaced only
    at the end, with ``overwrite``).

    Args:
        model: a trained :class:`keras_transformer.model.Transformer` (any
            ``norm_first``, ``tie_embeddings``, ``learned_positions``; relu
            feed-forward networks).
        tokenizer: its :class:`keras_transformer.data.tokenizer.SubwordTokenizer`
            (pad 0, unk 1, bos 2, eos 3); its pieces, listed by id, are
            CTranslate2's vocabulary (padded with unused placeholder tokens
            up to ``model.vocab_size`` when the model is larger).
        output_dir: the directory to create.
        quantization: None (float32 weights, as trained) or one of
            :data:`QUANTIZATIONS` (CTranslate2 weight types, e.g. ``"int8"``,
            ``"bfloat16"``).
        decoding: defaults of :class:`CTranslate2Translator`, a mapping with
            any of ``max_length`` (int, 2..model.max_length; default
            ``model.max_length``), ``extra_decode_length`` (int >= 0, default
            50, Section 6.1), ``beam_size`` (int >= 1, default 4) and
            ``length_penalty`` (alpha >= 0, default 0.6).
        overwrite: replace an existing ``output_dir``.

    Returns:
        The absolute path of the written directory (``str``).

    Raises:
        ImportError: when ctranslate2 is not installed (the message says
            ``pip install 'keras_transformer[ctranslate2]'``).
        ValueError: for an unknown ``quantization`` (the message lists the
            allowed values), an existing
            ``output_dir`` without ``overwrite`` (naming it), bad ``decoding``
            values or keys, a tokenizer vocabulary larger than the model's,
            layer norms with different epsilons, or a non-relu feed-forward
            network. Nothing is left on disk then.

    Source: CTranslate2's model specification (``ctranslate2/specs/
    transformer_spec.py``) and its converters' variable layout
    (``converters/opennmt_tf.py``, ``opennmt_py.py``).
    """
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; allowed: None, {', '.join(QUANTIZATIONS)}")
    ct2 = _import_ctranslate2()
    from ctranslate2.specs import model_spec as ct2_model_spec
    from ctranslate2.specs import transformer_spec

    unknown = sorted(set(decoding or {}) - set(_DECODING_KEYS))
    if unknown:
        raise ValueError(f"export_ctranslate2: unknown decoding key(s) {unknown}; known: {list(_DECODING_KEYS)}")
    settings = _decoding_settings(
        "export_ctranslate2",
        {"max_length": model.max_length, "extra_decode_length": 50, "beam_size": 4, "length_penalty": 0.6,
         **dict(decoding or {})},
        model.max_length,
    )
    output_dir = os.path.abspath(os.fspath(output_dir))
    if os.path.exists(output_dir) and not overwrite:
        raise ValueError(f"output directory already exists: {output_dir} (pass overwrite=True to replace it)")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ValueError(f"output_dir exists and is not a directory: {output_dir}")
    if tokenizer.vocab_size > model.vocab_size:
        raise ValueError(
            f"tokenizer vocab_size ({tokenizer.vocab_size}) exceeds the model's vocab_size ({model.vocab_size})"
        )
    if not model.built:
        model.build()
    epsilons = {float(norm.epsilon) for norm in _layer_norms(model)}
    if len(epsilons) != 1:
        raise ValueError(
            f"export_ctranslate2: CTranslate2 has one layer-norm epsilon, the model has {sorted(epsilons)}"
        )

    import sentencepiece as spm

    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(tokenizer.model_bytes)
    pieces = [processor.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    pieces += [_placeholder(i) for i in range(len(pieces), model.vocab_size)]
    if (pieces[0], pieces[1], pieces[2], pieces[3]) != ("<pad>", _UNK, _BOS, _EOS):
        raise ValueError(f"export_ctranslate2: pieces 0-3 must be <pad>, <unk>, <s>, </s>, got {pieces[:4]}")

    # -- the spec (Section 3, Figure 1) --
    spec = transformer_spec.TransformerSpec.from_config(model.num_layers, model.num_heads, pre_norm=model.norm_first)
    source = model.embedding if model.tie_embeddings else model.source_embedding
    target = model.embedding if model.tie_embeddings else model.target_embedding
    rows = model.max_length if model.learned_positions else model.max_length + settings["extra_decode_length"]
    spec.encoder.embeddings[0].weight = _array(source.embeddings)
    spec.decoder.embeddings.weight = _array(target.embeddings)
    spec.encoder.scale_embeddings = True  # x sqrt(d_model), Section 3.4
    spec.decoder.scale_embeddings = True
    spec.encoder.position_encodings.encodings = _position_table(source, rows)
    spec.decoder.position_encodings.encodings = positions = _position_table(target, rows)
    if model.tie_embeddings:
        spec.decoder.projection.weight = _array(model.embedding.embeddings)
    else:
        _set_linear(spec.decoder.projection, [model.output_projection])
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.encoder_layers):
        _set_norm(layer_spec.self_attention.layer_norm, layer.self_attention_norm)
        _set_attention(layer_spec.self_attention, layer.self_attention, [("q", "k", "v")])
        _set_ffn(layer_spec.ffn, layer.feed_forward, layer.feed_forward_norm)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.decoder_layers):
        _set_norm(layer_spec.self_attention.layer_norm, layer.self_attention_norm)
        _set_attention(layer_spec.self_attention, layer.self_attention, [("q", "k", "v")])
        _set_norm(layer_spec.attention.layer_norm, layer.cross_attention_norm)
        _set_attention(layer_spec.attention, layer.cross_attention, [("q",), ("k", "v")])
        _set_ffn(layer_spec.ffn, layer.feed_forward, layer.feed_forward_norm)
    if model.norm_first:
        _set_norm(spec.encoder.layer_norm, model.encoder.final_norm)
        _set_norm(spec.decoder.layer_norm, model.decoder.final_norm)
    config = spec.config
    config.layer_norm_epsilon = epsilons.pop()
    config.add_source_bos = False
    config.add_source_eos = True
    config.bos_token, config.eos_token, config.unk_token, config.decoder_start_token = _BOS, _EOS, _UNK, _BOS
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)

    from keras_transformer.export.saved_model import _json_safe

    record = {
        "format": _FORMAT,
        "model_class": f"{type(model).__module__}.{type(model).__name__}",
        "model_config": _json_safe(model.get_config()),
        "vocab_size": int(model.vocab_size),
        "tokenizer": {
            "file": CT2_VOCAB_FILENAME,
            "sha256": tokenizer.vocab_sha256,
            "normalization": tokenizer.normalization,
            "vocab_size": int(tokenizer.vocab_size),
            "pad_id": 0, "unk_id": 1, "bos_id": 2, "eos_id": 3,
        },
        "decoding": settings,
        "position_encodings": {
            "kind": "learned" if model.learned_positions else "sinusoidal, interleaved sin/cos (Section 3.5)",
            "num_positions": int(positions.shape[0]),
        },
        "layer_norm_epsilon": config.layer_norm_epsilon,
        "quantization": quantization,
        "ctranslate2_version": ct2.__version__,
    }

    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    tmp_path = os.path.join(parent, f".{os.path.basename(output_dir)}.tmp-{uuid.uuid4().hex}")
    try:
        with tempfile.TemporaryDirectory() as scratch:
            vocab_path = os.path.join(scratch, CT2_VOCAB_FILENAME)
            with open(vocab_path, "wb") as f:
                f.write(tokenizer.model_bytes)
            spec.register_file(vocab_path)
            spec.validate()
            if quantization in ("bfloat16", "int8_bfloat16"):
                _to_bfloat16(spec, ct2_model_spec)
            spec.optimize(quantization=quantization)
            os.makedirs(tmp_path)
            spec.save(tmp_path)
        with open(os.path.join(tmp_path, CT2_RECORD_FILENAME), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2, sort_keys=True)
    except BaseException:
        shutil.rmtree(tmp_path, ignore_errors=True)
        raise
    old_path = None
    if os.path.exists(output_dir):
        # The old export moves aside and is deleted only once the new one is in place.
        old_path = f"{tmp_path}.old"
        os.rename(output_dir, old_path)
    try:
        os.rename(tmp_path, output_dir)
    except BaseException:
        if old_path is not None:
            os.rename(old_path, output_dir)
        shutil.rmtree(tmp_path, ignore_errors=True)
        raise
    if old_path is not None:
        shutil.rmtree(old_path, ignore_errors=True)
    return output_dir


# -- translation ------------------------------------------------------------------------------


def _valid_text(sentence: str) -> str:
    """``sentence`` with lone surrogates treated as invalid UTF-8 bytes, i.e. replaced by U+FFFD.

    A Python ``str`` cannot hold invalid UTF-8, but it can hold lone
    surrogates (e.g. from ``bytes.decode(errors="surrogateescape")``). They
    are turned back into the bytes they stand for (U+DC80..U+DCFF: the
    escaped byte; other surrogates: their 3-byte encoding), and every invalid
    UTF-8 sequence of the result becomes U+FFFD, as the TF Translator's
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


def _is_blank(sentence: str) -> bool:
    """The TF Translator's ``[\\s\\p{Z}]*``: only ASCII ``\\s`` and Unicode separators."""
    return all(char in " \t\n\r\f" or unicodedata.category(char).startswith("Z") for char in sentence)


def _fold_whitespace(sentence: str) -> str:
    """The TF Translator's copy of a sentence: runs of ``[\\s\\p{Z}]`` as one space, none at the ends."""
    out, space = [], False
    for char in sentence:
        if char in " \t\n\r\f" or unicodedata.category(char).startswith("Z"):
            space = bool(out)
        else:
            if space:
                out.append(" ")
            out.append(char)
            space = False
    return "".join(out)


def _read_record(model_dir: str) -> dict[str, Any]:
    if not os.path.isdir(model_dir):
        raise ValueError(f"not a directory: {model_dir}")
    needed = (*_CT2_FILES, CT2_VOCAB_FILENAME, CT2_RECORD_FILENAME)
    missing = [name for name in needed if not os.path.isfile(os.path.join(model_dir, name))]
    if missing:
        raise ValueError(
            f"{model_dir} is not a keras_transformer CTranslate2 export (made by export_ctranslate2): "
            f"missing {', '.join(missing)}"
        )
    path = os.path.join(model_dir, CT2_RECORD_FILENAME)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"unreadable {path}: {e}") from e
    if not isinstance(record, dict) or record.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a {_FORMAT} record")
    try:
        for key in ("sha256", "vocab_size"):
            record["tokenizer"][key]
        for key in _DECODING_KEYS:
            record["decoding"][key]
        record["model_config"]["max_length"], record["vocab_size"]
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path} lacks the entry {e}") from None
    return record


class CTranslate2Translator:
    """Translates sentences with a directory written by :func:`export_ctranslate2`.

    Follows the TF :class:`keras_transformer.decoding.Translator`'s
    conventions (Section 6.1):

    * source = pieces + EOS; a source of more than ``max_length - 1`` pieces
      is translated from its first ``max_length - 1`` pieces and flagged in
      ``truncated`` (never silently);
    * maximum output length per sentence = source length (EOS included) +
      ``extra_decode_length``, capped by ``max_length``, EOS included.
      CTranslate2 takes one ``max_decoding_length`` per call: the batch is
      decoded with its largest limit and the (rare) sentences whose output
      exceeds their own limit are decoded again with it, so every output
      respects its sentence's limit. A hypothesis that reaches the limit
      ends there, without the EOS our search would force;
    * empty or whitespace-only input (ASCII whitespace, Unicode separators)
      gives ``""`` with score 0 and is not sent to the model;
    * unknown input (the TF Translator's rule): a sentence with unknown
      pieces (``unk``, byte fallback) and no known word is copied through
      with its whitespace folded (score 0, ``output_ids`` ``[]``, not sent
      to the model); otherwise only known pieces count toward the output
      limit above;
    * lone surrogates are treated as invalid UTF-8 bytes: U+FFFD;
    * ``beam_size=1`` is greedy search: the same tokens as
      ``Translator.translate_greedy`` up to float rounding (near-ties of
      two logits may break differently).

    Differences of beam search (``beam_size > 1``): CTranslate2 ranks
    finished hypotheses by ``log P / |Y|^alpha`` (``|Y|`` with EOS, as
    ``return_end_token=True`` counts it) where ours uses Wu et al.'s
    ``log P / ((5 + |Y|) / 6)^alpha``, and stops when ``beam_size`` hypotheses
    are finished, so beam outputs can differ from the TF Translator's.
    Scores are reported in our convention: CTranslate2's ``log P`` (recovered
    as ``score * |Y|^alpha``) divided by ``((5 + |Y|) / 6)^alpha``, ``|Y|``
    counting EOS (for a hypothesis cut at the limit, ``log P`` has no EOS term).

    Args:
        model_dir: the exported directory.
        beam_size: beams per sentence (int >= 1, 1 = greedy); default: the
            export's ``decoding`` record.
        length_penalty: alpha >= 0; default: the export's.
        max_length: longest source (pieces + EOS) and output (tokens + EOS),
            int in ``[2, model max_length]``; default: the export's.
        extra_decode_length: int >= 0; default: the export's.
        compute_type: CTranslate2 compute type (``"default"`` keeps the
            exported weight type; e.g. ``"int8"``, ``"float32"``).
        inter_threads: parallel translations (CTranslate2 workers).
        intra_threads: threads per translation (0 = CTranslate2's default).
        device: ``"cpu"`` (default), ``"cuda"`` or ``"auto"``.
        max_batch_size: CTranslate2 sorts a call's sentences by length and
            decodes them in batches of at most this many (0 = all at once).

    Raises:
        ImportError: when ctranslate2 is not installed (the message says
            ``pip install 'keras_transformer[ctranslate2]'``).
        ValueError: for a directory that is not one of our exports (naming
            the missing files), a SentencePiece model whose sha256 differs
            from the record's (naming both), or a bad decoding setting.

    Source: CTranslate2's ``Translator.translate_batch``; decoding after
    Section 6.1 of the paper.

    Example:

    >>> translator = CTranslate2Translator("export/ct2", beam_size=1)   # doctest: +SKIP
    >>> translator(["A dog runs."])                                      # doctest: +SKIP
    ['Ein Hund läuft.']
    """

    def __init__(
        self,
        model_dir: str | os.PathLike,
        beam_size: int | None = None,
        length_penalty: float | None = None,
        max_length: int | None = None,
        extra_decode_length: int | None = None,
        compute_type: str = "default",
        inter_threads: int = 1,
        intra_threads: int = 0,
        device: str = "cpu",
        max_batch_size: int = 32,
    ):
        ct2 = _import_ctranslate2()
        import sentencepiece as spm

        self.model_dir = os.path.abspath(os.fspath(model_dir))
        self.record = _read_record(self.model_dir)
        with open(os.path.join(self.model_dir, CT2_VOCAB_FILENAME), "rb") as f:
            model_bytes = f.read()
        expected = self.record["tokenizer"]["sha256"]
        actual = hashlib.sha256(model_bytes).hexdigest()
        if actual != expected:
            raise ValueError(
                f"vocabulary mismatch in {self.model_dir}: {CT2_RECORD_FILENAME} records SentencePiece sha256 "
                f"{expected}, but {CT2_VOCAB_FILENAME} has sha256 {actual}"
            )
        given = {"beam_size": beam_size, "length_penalty": length_penalty, "max_length": max_length,
                 "extra_decode_length": extra_decode_length}
        settings = {**self.record["decoding"], **{k: v for k, v in given.items() if v is not None}}
        model_max_length = int(self.record["model_config"]["max_length"])
        settings = _decoding_settings("CTranslate2Translator", settings, model_max_length)
        self.max_length = settings["max_length"]
        self.extra_decode_length = settings["extra_decode_length"]
        self.beam_size = settings["beam_size"]
        self.length_penalty = settings["length_penalty"]
        self.max_batch_size = _check_int("CTranslate2Translator", "max_batch_size", max_batch_size, 0)
        self._processor = spm.SentencePieceProcessor()
        self._processor.LoadFromSerializedProto(model_bytes)
        self._vocab_size = int(self._processor.get_piece_size())
        from keras_transformer.data.tokenizer import piece_masks

        self._unknown, self._word = piece_masks(self._processor)
        # CTranslate2's vocabulary: the pieces by id, then the export's placeholders up to the model's size.
        self._pieces = [self._processor.id_to_piece(i) for i in range(self._vocab_size)]
        self._pieces += [_placeholder(i) for i in range(self._vocab_size, int(self.record["vocab_size"]))]
        self._ids = {piece: i for i, piece in enumerate(self._pieces)}
        self.translator = ct2.Translator(
            self.model_dir, device=device, compute_type=compute_type,
            inter_threads=inter_threads, intra_threads=intra_threads,
        )

    def get_config(self) -> dict[str, Any]:
        """The decoding settings and the model directory (JSON-serializable)."""
        return {"max_length": self.max_length, "extra_decode_length": self.extra_decode_length,
                "beam_size": self.beam_size, "length_penalty": self.length_penalty,
                "max_batch_size": self.max_batch_size, "model_dir": self.model_dir}

    def _run(self, sources: list[list[int]], steps: int) -> list[tuple[list[int], float]]:
        """One CTranslate2 call: ``(ids without EOS, log P)`` per source, at most ``steps`` tokens."""
        results = self.translator.translate_batch(
            [[self._pieces[i] for i in source] for source in sources],
            max_batch_size=self.max_batch_size,
            beam_size=self.beam_size,
            length_penalty=self.length_penalty,
            max_decoding_length=steps,
            min_decoding_length=0,  # CTranslate2's default 1 would forbid an immediate EOS
            max_input_length=0,  # sources are truncated here, with the flag
            return_scores=True,
            return_end_token=True,  # |Y| counts EOS, as ours does
        )
        outputs = []
        for result in results:
            tokens = result.hypotheses[0]
            log_prob = float(result.scores[0]) * len(tokens) ** self.length_penalty
            if tokens and tokens[-1] == _EOS:
                tokens = tokens[:-1]
            outputs.append(([self._ids[t] for t in tokens], log_prob))
        return outputs

    def _decode(self, sources: list[list[int]], limits: list[int]) -> list[tuple[list[int], float]]:
        steps = [limit - 1 for limit in limits]  # tokens before the EOS our search would force
        outputs = self._run(sources, max(steps)) if sources else []
        over = sorted((j for j, (ids, _) in enumerate(outputs) if len(ids) > steps[j]), key=steps.__getitem__)
        for limit, group in itertools.groupby(over, key=steps.__getitem__):
            group = list(group)
            for j, output in zip(group, self._run([sources[j] for j in group], limit)):
                outputs[j] = output
        return outputs

    def translate(self, sentences: Sequence[str]) -> dict[str, list]:
        """Translates a batch of sentences (Section 6.1; beam size 1 = greedy).

        Args:
            sentences: list of ``str`` (any length, empty allowed).

        Returns:
            dict of lists with one entry per input, in order:
            ``translations`` (``str``), ``scores`` (``float``, ``log P /
            lp(Y)`` in our convention, see the class docstring; 0.0 for empty
            and copied input), ``truncated`` (``bool``, the source was cut to
            ``max_length - 1`` pieces) and ``output_ids`` (``list[int]``,
            the output ids ending with EOS, as ``Translator``'s
            ``output_ids`` without padding; ``[]`` for empty and copied input).

        Raises:
            TypeError: if ``sentences`` is a single ``str`` or holds a non-``str``.
        """
        if isinstance(sentences, (str, bytes)):
            raise TypeError("CTranslate2Translator.translate takes a list of str, got one str")
        sentences = list(sentences)
        if not all(isinstance(s, str) for s in sentences):
            raise TypeError("CTranslate2Translator.translate takes a list of str")
        texts = [_valid_text(s) for s in sentences]
        n = len(texts)
        out = {"translations": [""] * n, "scores": [0.0] * n, "truncated": [False] * n,
               "output_ids": [[] for _ in range(n)]}
        keep = self.max_length - 1
        jobs = []
        for i, (text, pieces) in enumerate(zip(texts, self._processor.encode(texts) if texts else [])):
            out["truncated"][i] = len(pieces) > keep
            if pieces and not _is_blank(text):
                pieces = pieces[:keep]
                unknown = [bool(self._unknown[p]) for p in pieces]
                if any(unknown) and not any(self._word[p] for p in pieces):
                    out["translations"][i] = _fold_whitespace(text)  # nothing the vocabulary knows: copied
                    continue
                known = len(pieces) - sum(unknown)
                jobs.append((i, pieces, min(known + 1 + self.extra_decode_length, self.max_length)))
        outputs = self._decode([pieces for _, pieces, _ in jobs], [limit for *_, limit in jobs])
        for (i, _, _), (ids, log_prob) in zip(jobs, outputs):
            kept = [t for t in ids if t not in (0, 2) and t < self._vocab_size]
            out["translations"][i] = self._processor.decode(kept)
            out["scores"][i] = log_prob / math.pow((5.0 + len(ids) + 1) / 6.0, self.length_penalty)
            out["output_ids"][i] = ids + [3]
        return out

    def __call__(self, sentences: Sequence[str]) -> list[str]:
        """The translations of :meth:`translate` (``list[str]``, one per input)."""
        return self.translate(sentences)["translations"]
