"""SavedModel export of a :class:`~keras_transformer.decoding.Translator` for TF Serving.

Layout written by :func:`export_saved_model` (the TF Serving convention: one
numeric folder per servable version)::

    <export_dir>/<version>/
        saved_model.pb
        variables/...
        assets/sentencepiece.model          tf.saved_model.Asset: the shared vocabulary
        assets.extra/export_config.json     decoding + model config, XLA flag, signatures
        assets.extra/tf_serving_warmup_requests   optional (``warmup_sentences``)

Signatures (all take ``sentences``: ``[None]`` ``tf.string``; ``score`` also
``targets``: ``[None]`` ``tf.string``, one per sentence; ``sample`` also
``seed``: an int64 scalar):

==================  =============================================================
``serving_default``  beam search: ``translations`` [B] string, ``scores`` [B]
                     float32, ``truncated`` [B] bool
``beam_search``      the same function as ``serving_default``
``greedy``           ``translations`` [B] string, ``output_ids`` [B, L] int32,
                     ``truncated`` [B] bool
``token_ids``        n-best ids: ``source_ids`` [B, S] int32, ``output_ids``
                     [B, beam, L] int32, ``scores`` [B, beam] float32,
                     ``truncated`` [B] bool
``n_best``           n-best texts: ``translations`` [B, beam] string,
                     ``scores`` [B, beam] float32 (best first, ``-inf`` for a
                     slot without a hypothesis), ``truncated`` [B] bool
``score``            forced decoding of ``targets``: ``log_prob`` [B],
                     ``score`` [B] (``log_prob / lp``), ``num_tokens`` [B]
                     int32, ``token_log_probs`` [B, T], ``target_ids`` [B, T]
                     int32, ``target_pieces`` [B, T] string, ``truncated`` [B]
``sample``           optional (``sampling``): sampled translations for
                     back-translation, ``Translator.translate_sampled``:
                     ``translations`` [B] string, ``output_ids`` [B, L]
                     int32, ``truncated`` [B] bool; top-k, top-p and
                     temperature fixed at export (``export_config.json``,
                     ``"sampling"``), the same seed gives the same output
==================  =============================================================

(:meth:`keras_transformer.decoding.Translator.translate_n_best` and
:meth:`~keras_transformer.decoding.Translator.score` document the outputs.)

The graph holds only TensorFlow core and tensorflow-text ops (tokenization is
in-graph; no ``PyFunc``), so a server or a Python process needs nothing but
``tensorflow`` and ``tensorflow_text`` to load it. When the translator was built
with ``jit_compile=True`` the encoder + search run in an XLA-compiled function
(``_XlaMustCompile``); ``export_config.json`` records ``"xla_compiled": true``
and TF Serving must then run with ``--xla_cpu_compilation_enabled=true``
(``serving/start_server.sh`` reads the record and adds the flag).

Warmup (optional): with ``warmup_sentences`` the export also writes TF
Serving's ``assets.extra/tf_serving_warmup_requests`` (a TFRecord of
``PredictionLog`` protos, one ``PredictRequest`` per warmup signature), which
the server replays before marking the version AVAILABLE, so the first real
request does not pay for graph initialization (and, for an XLA export, for the
compilation of that batch shape). It needs ``tensorflow-serving-api`` (the
``serving`` extra).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from typing import Any

import tensorflow as tf

__all__ = [
    "export_saved_model",
    "find_python_ops",
    "saved_model_op_names",
    "SIGNATURES",
    "SAMPLE_SIGNATURE",
    "CONFIG_FILENAME",
    "VOCAB_ASSET_NAME",
    "WARMUP_FILENAME",
]

#: Signature name -> Translator method.
SIGNATURES = {
    "serving_default": "translate",
    "beam_search": "translate",
    "greedy": "translate_greedy",
    "token_ids": "translate_ids",
    "n_best": "translate_n_best",
    "score": "score",
}
#: The optional sampling signature (``export_saved_model(sampling=...)``) -> Translator method.
SAMPLE_SIGNATURE = ("sample", "translate_sampled")
#: File written in ``assets.extra/``.
CONFIG_FILENAME = "export_config.json"
#: TF Serving's warmup file in ``assets.extra/``.
WARMUP_FILENAME = "tf_serving_warmup_requests"
#: File name of the SentencePiece model in ``assets/``.
VOCAB_ASSET_NAME = "sentencepiece.model"
#: Ops that call back into Python and cannot run in TF Serving.
_PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})


class _ExportModule(tf.Module):
    """Root object of the SavedModel: the translator's functions, its weights and the vocabulary asset.

    The weights are tracked as the ``tf.Variable`` objects the functions read
    (``keras.Variable.value``), not through the Keras model: tracked through a
    Keras 3 model, the SavedModel's saver restores a second, unused copy of
    every variable under another name, so TensorFlow's C++ loader (the one TF
    Serving uses) runs the signatures on uninitialized variables ("Could not
    find variable transformer/..."), while Python's ``tf.saved_model.load``,
    which restores through the object graph, works. ``tests/test_serving_cpp.py``
    loads every export with the C++ loader.
    """

    def __init__(self, translator: Any, vocab_path: str, sampling: bool = False):
        import keras

        super().__init__(name="keras_transformer_translator")
        self.tokenizer = translator.tokenizer
        self.model_variables = [v.value if isinstance(v, keras.Variable) else v for v in translator.model.variables]
        # The translator's own [d_model, vocab] copy of the output projection (Translator(cache_output_matrix)).
        self.output_matrix = translator.output_matrix
        self.translate = translator.translate
        self.translate_greedy = translator.translate_greedy
        self.translate_ids = translator.translate_ids
        self.translate_n_best = translator.translate_n_best
        self.score = translator.score
        if sampling:
            self.translate_sampled = translator.translate_sampled
        self.sentencepiece_model = tf.saved_model.Asset(vocab_path)


def _json_safe(value: Any) -> Any:
    """``value`` if JSON-serializable, else its ``repr`` (recursively for containers)."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _read_saved_model_proto(saved_model_dir: str | os.PathLike):
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(os.fspath(saved_model_dir), "saved_model.pb")
    if not os.path.isfile(path):
        raise ValueError(f"no saved_model.pb in {saved_model_dir}")
    proto = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def saved_model_op_names(saved_model_dir: str | os.PathLike) -> set[str]:
    """Every op type used by a SavedModel (all meta graphs and function libraries).

    Nodes that call a function of the graph's own library (by its name) are not
    ops and are left out; the functions' bodies are scanned instead.

    Args:
        saved_model_dir: folder holding ``saved_model.pb``.

    Returns:
        ``set[str]`` of op type names (e.g. ``"MatMul"``,
        ``"SentencepieceTokenizeOp"``).

    Raises:
        ValueError: if there is no ``saved_model.pb`` in ``saved_model_dir``.
    """
    proto = _read_saved_model_proto(saved_model_dir)
    ops = set()
    for meta_graph in proto.meta_graphs:
        graph = meta_graph.graph_def
        functions = {f.signature.name for f in graph.library.function}
        nodes = list(graph.node)
        for function in graph.library.function:
            nodes += list(function.node_def)
        ops.update(n.op for n in nodes if n.op not in functions)
    return ops


def find_python_ops(saved_model_dir: str | os.PathLike) -> list[str]:
    """Names of Python-callback ops (``PyFunc``, ``EagerPyFunc``...) in a SavedModel.

    Scans every meta graph's nodes and every function of its library.

    Args:
        saved_model_dir: folder holding ``saved_model.pb``.

    Returns:
        ``list[str]`` of ``"<function or graph>/<node>:<op>"``; empty when the
        graph only uses ops that a server can run.

    Raises:
        ValueError: if there is no ``saved_model.pb`` in ``saved_model_dir``.
    """
    return _python_ops_in(_read_saved_model_proto(saved_model_dir))


def _python_ops_in(proto: Any) -> list[str]:
    """:func:`find_python_ops` of an already parsed ``SavedModel`` proto."""
    found = []
    for meta_graph in proto.meta_graphs:
        graph = meta_graph.graph_def
        found += [f"graph/{n.name}:{n.op}" for n in graph.node if n.op in _PYTHON_OPS]
        for function in graph.library.function:
            found += [
                f"{function.signature.name}/{n.name}:{n.op}" for n in function.node_def if n.op in _PYTHON_OPS
            ]
    return found


def _signature_summary(proto: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """Every signature's inputs and outputs as the SavedModel holds them (its ``signature_def``).

    Returns:
        ``{signature: {"inputs": {name: {"dtype": str, "shape": list or None}}, "outputs": {...}}}``;
        an unknown dimension is ``None``, an unknown rank a ``None`` shape.
    """

    def spec(info):
        shape = info.tensor_shape
        dims = None if shape.unknown_rank else [d.size if d.size >= 0 else None for d in shape.dim]
        return {"dtype": tf.dtypes.as_dtype(info.dtype).name, "shape": dims}

    summary = {}
    for name, signature in proto.meta_graphs[0].signature_def.items():
        if name.startswith("__"):  # the SavedModel's own initializer, not a signature
            continue
        summary[name] = {
            "inputs": {key: spec(info) for key, info in sorted(signature.inputs.items())},
            "outputs": {key: spec(info) for key, info in sorted(signature.outputs.items())},
        }
    return summary


def export_saved_model(
    translator: Any,
    export_dir: str | os.PathLike,
    version: int = 1,
    overwrite: bool = False,
    warmup_sentences: list[str] | None = None,
    warmup_signatures: tuple[str, ...] = ("serving_default",),
    model_name: str = "translator",
    sampling: bool | None = None,
) -> str:
    """Writes ``translator`` as a TF Serving SavedModel ``<export_dir>/<version>/``.

    The version folder is first written under a hidden temporary name inside
    ``export_dir`` and renamed when complete, so a running TF Serving (which
    polls ``export_dir`` for numeric folders) never loads a half-written model.

    Args:
        translator: a :class:`keras_transformer.decoding.Translator`.
        export_dir: the model base path (TF Serving's ``base_path``); created if
            missing.
        version: servable version, Python int >= 0 (TF Serving serves the
            highest by default).
        overwrite: replace an existing ``<export_dir>/<version>/``.
        warmup_sentences: optional non-empty list of ``str``: write
            ``assets.extra/tf_serving_warmup_requests`` with one batch of these
            sentences per signature in ``warmup_signatures`` (needs
            ``tensorflow-serving-api``).
        warmup_signatures: signature names replayed at warmup.
        model_name: the served model name written in the warmup requests
            (``name`` in serving/models.config).
        sampling: add the ``sample`` signature (``translate_sampled``, with
            the translator's ``sampling_topk``, ``sampling_topp`` and
            ``sampling_temperature``, recorded as ``"sampling"`` in
            ``export_config.json``). None (default): add it when the
            translator was built with other sampling settings than the
            defaults (0, 1.0, 1.0); pass True for plain sampling from the
            model's distribution.

    XLA: whether the search is XLA-compiled is the translator's choice
    (``Translator(jit_compile=...)``); it is recorded as ``xla_compiled`` and
    ``serving_flags`` in ``export_config.json``.

    Output matrix: a model with tied embeddings is exported with the
    translator's ``[d_model, vocab]`` copy of its pre-softmax projection
    (``Translator(cache_output_matrix=True)``; a translator without one is
    rebuilt with :meth:`~keras_transformer.decoding.Translator.with_settings`):
    the exported weights never change, and a single sentence decodes about
    1.2x faster. The SavedModel grows by ``4 * d_model * vocab_size`` bytes
    (8 MB for the ``small`` preset, 76 MB for ``base`` with 37,000 pieces).

    Returns:
        The path of the version folder (``str``).

    Raises:
        ValueError: for a bad ``version``, an existing version folder without
            ``overwrite``, bad ``warmup_sentences``/``warmup_signatures``, or
            a graph that contains Python-callback ops (which
            TF Serving cannot run; nothing is left on disk then).
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"version must be an int >= 0, got {version!r}")
    export_dir = os.path.abspath(os.fspath(export_dir))
    final_path = os.path.join(export_dir, str(version))
    if os.path.exists(final_path) and not overwrite:
        raise ValueError(f"export version folder already exists: {final_path} (pass overwrite=True to replace it)")
    if translator.output_matrix is None and getattr(translator.model, "tie_embeddings", False):
        translator = translator.with_settings(cache_output_matrix=True)
    if sampling is None:
        sampling = (translator.sampling_topk, translator.sampling_topp, translator.sampling_temperature) != (0, 1.0, 1.0)
    sampling = bool(sampling)
    if warmup_sentences is not None:
        if (isinstance(warmup_sentences, str) or not warmup_sentences
                or not all(isinstance(x, str) for x in warmup_sentences)):
            raise ValueError("warmup_sentences must be a non-empty list of str")
        allowed = sorted(SIGNATURES) + ([SAMPLE_SIGNATURE[0]] if sampling else [])
        unknown = [name for name in warmup_signatures if name not in allowed]
        if unknown or not warmup_signatures:
            raise ValueError(f"warmup_signatures must be among {allowed}, got {list(warmup_signatures)}")
        _warmup_modules()  # fail before writing anything if the package is missing
    os.makedirs(export_dir, exist_ok=True)

    tmp_path = os.path.join(export_dir, f".tmp-{version}-{uuid.uuid4().hex}")
    with tempfile.TemporaryDirectory() as vocab_dir:
        vocab_path = os.path.join(vocab_dir, VOCAB_ASSET_NAME)
        with open(vocab_path, "wb") as f:
            f.write(translator.tokenizer.model_bytes)
        root = _ExportModule(translator, vocab_path, sampling)
        methods = dict(SIGNATURES, **dict([SAMPLE_SIGNATURE])) if sampling else SIGNATURES
        # The tf.functions themselves, not concrete functions traced here: tf.saved_model.save traces
        # them inside its save context, and a trace from outside it would not be reused (tf.function's
        # cache key holds the save context), so every signature would be traced twice.
        functions = {name: getattr(translator, method) for name, method in methods.items()}
        try:
            tf.saved_model.save(root, tmp_path, signatures=functions)
            proto = _read_saved_model_proto(tmp_path)
            python_ops = _python_ops_in(proto)
            if python_ops:
                raise ValueError(
                    "the exported graph calls back into Python, which TF Serving cannot run: "
                    + ", ".join(python_ops[:10])
                )
            warmup = None
            if warmup_sentences is not None:
                warmup = {"file": f"assets.extra/{WARMUP_FILENAME}", "signatures": list(warmup_signatures),
                          "batch_size": len(warmup_sentences)}
            signatures = _signature_summary(proto)
            _write_config(tmp_path, translator, version, signatures, warmup, sampling)
            if warmup_sentences is not None:
                inputs = {name: list(signatures[name]["inputs"]) for name in warmup_signatures}
                _write_warmup(tmp_path, list(warmup_sentences), inputs, model_name)
        except BaseException:
            shutil.rmtree(tmp_path, ignore_errors=True)
            raise

    old_path = None
    if os.path.exists(final_path):
        # Move the old version aside (a hidden, non-numeric name TF Serving ignores) so the
        # version is missing only between two renames, not while a folder is deleted.
        old_path = os.path.join(export_dir, f".old-{version}-{os.getpid()}")
        os.rename(final_path, old_path)
    os.rename(tmp_path, final_path)
    if old_path is not None:
        shutil.rmtree(old_path, ignore_errors=True)
    return final_path


def _write_config(path: str, translator: Any, version: int, signatures: dict[str, Any],
                  warmup: dict[str, Any] | None = None, sampling: bool = False) -> None:
    import tensorflow_text

    model = translator.model
    try:
        model_config = model.get_config()
    except Exception:  # not every contract-following model has a config
        model_config = None
    tokenizer = translator.tokenizer
    xla = bool(translator.jit_compile)
    record = {
        "format": "keras_transformer.export/1",
        "version": version,
        "xla_compiled": xla,
        "serving_flags": ["--xla_cpu_compilation_enabled=true"] if xla else [],
        "warmup": warmup,
        "decoding": _json_safe(translator.get_config()),
        # The `sample` signature's settings (null: no such signature).
        "sampling": {
            "signature": SAMPLE_SIGNATURE[0],
            "top_k": translator.sampling_topk,
            "top_p": translator.sampling_topp,
            "temperature": translator.sampling_temperature,
        } if sampling else None,
        "model_class": f"{type(model).__module__}.{type(model).__name__}",
        "model_config": _json_safe(model_config),
        "tokenizer": {
            "asset": f"assets/{VOCAB_ASSET_NAME}",
            "vocab_size": int(tokenizer.vocab_size),
            "sha256": getattr(tokenizer, "vocab_sha256", None),
            "normalization": getattr(tokenizer, "normalization", None),
            "pad_id": int(tokenizer.pad_id),
            "bos_id": int(tokenizer.bos_id),
            "eos_id": int(tokenizer.eos_id),
        },
        "signatures": signatures,
        "tensorflow_version": tf.__version__,
        "tensorflow_text_version": getattr(tensorflow_text, "__version__", None),
    }
    extra = os.path.join(path, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    with open(os.path.join(extra, CONFIG_FILENAME), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, sort_keys=True)


def _warmup_modules():
    try:
        from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2
    except ImportError as e:
        raise ValueError(
            "warmup_sentences needs tensorflow-serving-api (pip install 'keras_transformer[serving]')"
        ) from e
    return model_pb2, predict_pb2, prediction_log_pb2


def _write_warmup(path: str, sentences: list[str], signatures: dict[str, list[str]], model_name: str) -> None:
    """Writes ``assets.extra/tf_serving_warmup_requests`` (TFRecord of PredictionLog).

    ``signatures`` maps each warmup signature to its input names; every input
    gets ``sentences`` (``score`` scores each warmup sentence as its own
    target: the numbers do not matter, the graph is initialized).
    """
    model_pb2, predict_pb2, prediction_log_pb2 = _warmup_modules()
    extra = os.path.join(path, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(extra, WARMUP_FILENAME)) as writer:
        for signature, input_names in signatures.items():
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
            )
            for input_name in input_names:
                if input_name == "seed":  # the sample signature's int64 scalar
                    request.inputs[input_name].CopyFrom(tf.make_tensor_proto(0, dtype=tf.int64))
                else:
                    request.inputs[input_name].CopyFrom(
                        tf.make_tensor_proto([s.encode("utf-8") for s in sentences], dtype=tf.string)
                    )
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
