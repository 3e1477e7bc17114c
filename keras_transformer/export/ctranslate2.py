"""Export to CTranslate2: a trained model as a CTranslate2 model directory.

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
  :class:`~keras_transformer.decoding.ctranslate2.CTranslate2Translator` ever
  uses (sources of at most ``max_length`` tokens, outputs of at most
  ``max_length - 1`` decoding steps). A learned table has the model's
  ``max_length`` rows.
* **Layer-norm epsilon.** Ours is 1e-6 (Keras' default is 1e-3); it is read
  from the layers and written to ``config.json``.
* **EOS.** Our source is pieces + EOS: ``add_source_eos=True``.
* **Decoding** (:class:`~keras_transformer.decoding.ctranslate2.CTranslate2Translator`,
  :mod:`keras_transformer.decoding.ctranslate2`): CTranslate2's
  ``max_decoding_length`` counts generated tokens (EOS included when it is
  generated; a hypothesis reaching it simply stops) and is one number per
  call, its default ``min_decoding_length=1`` forbids an immediate EOS, and
  its beam search normalizes by ``|Y|^alpha`` instead of Wu et al.'s
  ``((5 + |Y|) / 6)^alpha``; the translator's docstring says how each is
  handled. Used directly (``ctranslate2.Translator``), an export expects
  pieces without EOS and ``max_decoding_length`` below the table's rows.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from keras_transformer.config import TransformerConfig
from keras_transformer.decoding.ctranslate2_format import (
    BOS_TOKEN,
    CT2_RECORD_FILENAME,
    CT2_VOCAB_FILENAME,
    DECODING_KEYS,
    EOS_TOKEN,
    RECORD_FORMAT,
    UNK_TOKEN,
    decoding_settings,
    import_ctranslate2,
    placeholder_token,
)
from keras_transformer.settings import DEFAULT_BEAM_SIZE

__all__ = [
    "export_ctranslate2",
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
        decoding: defaults of
            :class:`~keras_transformer.decoding.ctranslate2.CTranslate2Translator`,
            a mapping with any of ``max_length`` (int, 2..model.max_length; default
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
    ct2 = import_ctranslate2()
    from ctranslate2.specs import model_spec as ct2_model_spec
    from ctranslate2.specs import transformer_spec

    unknown = sorted(set(decoding or {}) - set(DECODING_KEYS))
    if unknown:
        raise ValueError(f"export_ctranslate2: unknown decoding key(s) {unknown}; known: {list(DECODING_KEYS)}")
    settings = decoding_settings(
        "export_ctranslate2",
        {"max_length": model.max_length, "extra_decode_length": TransformerConfig.extra_decode_length,
         "beam_size": DEFAULT_BEAM_SIZE, "length_penalty": TransformerConfig.length_penalty,
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
    pieces += [placeholder_token(i) for i in range(len(pieces), model.vocab_size)]
    if (pieces[0], pieces[1], pieces[2], pieces[3]) != ("<pad>", UNK_TOKEN, BOS_TOKEN, EOS_TOKEN):
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
    config.bos_token, config.eos_token, config.unk_token, config.decoder_start_token = (
        BOS_TOKEN, EOS_TOKEN, UNK_TOKEN, BOS_TOKEN
    )
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)

    from keras_transformer.export.saved_model import _json_safe

    record = {
        "format": RECORD_FORMAT,
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
