#!/usr/bin/env python3
"""REST and gRPC client for a keras_transformer translator served by TensorFlow Serving.

REST (:func:`predict`, :func:`translate`, :func:`model_status`): standard
library only (``urllib``), no TensorFlow needed on the client. Sends the batch
in TF Serving's *columnar* format

    POST {url}/v1/models/{model}[/versions/{version}]:predict
    {"signature_name": "serving_default", "inputs": {"sentences": [...]}}

and returns the ``outputs`` dict (``translations``, ``scores``, ``truncated`` for
``serving_default`` / ``beam_search``; see keras_transformer/export/saved_model.py for the
``greedy``, ``token_ids``, ``n_best`` and ``score`` signatures, and the optional
``sample`` signature). The ``score`` signature also takes ``targets``
(``targets=[...]``, one per sentence; ``--target`` on the command line), ``sample``
an int64 ``seed`` (``seed=...`` / ``--seed``).

gRPC (:func:`predict_grpc`): ``PredictionService/Predict`` through the stub of
``tensorflow-serving-api`` (``pip install 'keras_transformer[serving]'``; it
pulls ``tensorflow`` and ``grpcio``), imported only when the gRPC path is used.
Strings travel as raw bytes (no JSON/base64 round trip) and numeric outputs
keep their dtypes.

Command line::

    python serving/client.py "A man is riding a bike." "Two dogs play."
    echo "A man is riding a bike." | python serving/client.py --signature greedy
    python serving/client.py --url http://host:8501 --model translator --version 2 "..."
    python serving/client.py --grpc localhost:8500 "A man is riding a bike."
    python serving/client.py --signature score --target "Ein Mann fährt Rad." --json "A man is riding a bike."
    python serving/client.py --signature sample --seed 7 "A man is riding a bike."

Tokenization happens in the server (the SentencePiece model is in the graph),
so the client sends raw UTF-8 sentences.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.request
from typing import Any

__all__ = ["predict", "predict_grpc", "translate", "model_status"]

DEFAULT_URL = "http://localhost:8501"
DEFAULT_MODEL = "translator"
DEFAULT_GRPC_TARGET = "localhost:8500"


def _model_url(url: str, model: str, version: int | None) -> str:
    base = f"{url.rstrip('/')}/v1/models/{model}"
    return f"{base}/versions/{int(version)}" if version is not None else base


def _decode_strings(value: Any) -> Any:
    """TF Serving writes non-UTF-8 strings as {"b64": ...}; decode those."""
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"]).decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [_decode_strings(v) for v in value]
    return value


def _request(url: str, payload: dict | None, timeout: float) -> dict:
    data = None if payload is None else json.dumps(payload).encode("utf-8")
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method="POST" if data else "GET"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", errors="replace")
        try:
            body = json.loads(body).get("error", body)
        except ValueError:
            pass
        raise RuntimeError(f"TF Serving returned HTTP {e.code} for {url}: {body}") from None


def _inputs(sentences: list[str], targets: list[str] | None) -> dict[str, list[str]]:
    """The request's inputs: ``sentences`` and, for the ``score`` signature, ``targets``."""
    for name, value in (("sentences", sentences), ("targets", targets)):
        if value is not None and (isinstance(value, str) or not all(isinstance(s, str) for s in value)):
            raise ValueError(f"{name} must be a list of str")
    inputs = {"sentences": list(sentences)}
    if targets is not None:
        if len(targets) != len(sentences):
            raise ValueError(f"{len(sentences)} sentences but {len(targets)} targets: give one target per sentence")
        inputs["targets"] = list(targets)
    return inputs


def predict(
    sentences: list[str],
    url: str = DEFAULT_URL,
    model: str = DEFAULT_MODEL,
    signature: str = "serving_default",
    version: int | None = None,
    timeout: float = 60.0,
    targets: list[str] | None = None,
    seed: int | None = None,
) -> dict[str, list]:
    """Calls one signature of the served translator.

    Args:
        sentences: the source sentences (``str``).
        url: TF Serving REST address.
        model: model name (``name`` in serving/models.config).
        signature: ``serving_default``, ``beam_search``, ``greedy``,
            ``token_ids``, ``n_best``, ``score`` or ``sample`` (exports
            made with ``--sampling``).
        version: a specific version, else the served (latest) one.
        timeout: seconds.
        targets: for ``score``: one translation (``str``) per sentence.
        seed: the ``sample`` signature's ``seed`` input (int), sent when given.

    Returns:
        The signature's outputs, one list per output name (batch first).

    Raises:
        ValueError: if ``sentences`` (or ``targets``) is not a list of str,
            or ``targets`` has another length.
        RuntimeError: with the server's message on an HTTP error.
    """
    payload = {"signature_name": signature, "inputs": _inputs(sentences, targets)}
    if seed is not None:
        payload["inputs"]["seed"] = int(seed)
    result = _request(_model_url(url, model, version) + ":predict", payload, timeout)
    outputs = result["outputs"]
    if not isinstance(outputs, dict):  # a single-output signature comes back bare
        outputs = {"output": outputs}
    return {name: _decode_strings(value) for name, value in outputs.items()}


def predict_grpc(
    sentences: list[str],
    target: str = DEFAULT_GRPC_TARGET,
    model: str = DEFAULT_MODEL,
    signature: str = "serving_default",
    version: int | None = None,
    timeout: float = 60.0,
    channel: Any = None,
    targets: list[str] | None = None,
    seed: int | None = None,
) -> dict[str, list]:
    """Calls one signature of the served translator over gRPC (``PredictionService``).

    Args:
        sentences: the source sentences (``str``).
        target: ``host:port`` of TF Serving's gRPC API (insecure channel).
        model: model name (``name`` in serving/models.config).
        signature: ``serving_default``, ``beam_search``, ``greedy``,
            ``token_ids``, ``n_best``, ``score`` or ``sample`` (exports
            made with ``--sampling``).
        version: a specific version, else the served (latest) one.
        timeout: seconds.
        channel: an existing ``grpc.Channel`` to use instead of ``target``.
        targets: for ``score``: one translation (``str``) per sentence.
        seed: the ``sample`` signature's ``seed`` input (int64 scalar), sent when given.

    Returns:
        The signature's outputs as nested lists (batch first): strings decoded
        as UTF-8 (``str``), numbers as Python ``float``/``int``/``bool``.

    Raises:
        ValueError: if ``sentences`` (or ``targets``) is not a list of str,
            or ``targets`` has another length.
        ImportError: if ``tensorflow-serving-api`` is not installed.
        RuntimeError: with the server's status and message on an RPC error.
    """
    inputs = _inputs(sentences, targets)
    try:
        import grpc
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
    except ImportError as e:
        raise ImportError(
            "the gRPC client needs tensorflow-serving-api: pip install 'keras_transformer[serving]'"
        ) from e

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = int(version)
    for name, values in inputs.items():
        request.inputs[name].CopyFrom(
            tf.make_tensor_proto([s.encode("utf-8") for s in values], dtype=tf.string, shape=[len(values)])
        )
    if seed is not None:
        request.inputs["seed"].CopyFrom(tf.make_tensor_proto(int(seed), dtype=tf.int64))
    own_channel = channel is None
    channel = grpc.insecure_channel(target) if own_channel else channel
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = stub.Predict(request, timeout=timeout)
    except grpc.RpcError as e:
        raise RuntimeError(f"TF Serving gRPC error for {target}: {e.code()}: {e.details()}") from None
    finally:
        if own_channel:
            channel.close()
    outputs = {}
    for name, proto in response.outputs.items():
        array = tf.make_ndarray(proto)
        if array.dtype == object:
            outputs[name] = _decode_bytes(array.tolist())
        else:
            outputs[name] = array.tolist()
    return outputs


def _decode_bytes(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [_decode_bytes(v) for v in value]
    return value


def translate(sentences: list[str], grpc_target: str | None = None, **kwargs: Any) -> list[str]:
    """Translations only (beam search unless ``signature="greedy"``).

    Uses gRPC (:func:`predict_grpc`) when ``grpc_target`` is given, else REST
    (:func:`predict`); ``kwargs`` go to that function.
    """
    if grpc_target is not None:
        return predict_grpc(sentences, target=grpc_target, **kwargs)["translations"]
    return predict(sentences, **kwargs)["translations"]


def model_status(url: str = DEFAULT_URL, model: str = DEFAULT_MODEL, timeout: float = 10.0) -> dict:
    """``GET /v1/models/{model}``: the versions and their state (e.g. AVAILABLE)."""
    return _request(_model_url(url, model, None), None, timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sentences", nargs="*", help="sentences to translate (default: stdin lines)")
    parser.add_argument("--url", default=DEFAULT_URL, help="REST address (default %(default)s)")
    parser.add_argument("--grpc", metavar="HOST:PORT", default=None,
                        help="use gRPC at this address instead of REST (needs tensorflow-serving-api)")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--signature", default="serving_default",
                        help="serving_default, beam_search, greedy, token_ids, n_best, score or sample "
                        "(default %(default)s)")
    parser.add_argument("--target", action="append", default=None,
                        help="for --signature score: a translation of the sentence at the same position (repeat)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the sample signature's seed (default: not sent; sample needs it)")
    parser.add_argument("--version", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--json", action="store_true", help="print every output as JSON")
    args = parser.parse_args(argv)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    common = dict(model=args.model, signature=args.signature, version=args.version, timeout=args.timeout,
                  targets=args.target, seed=args.seed)
    if args.grpc:
        outputs = predict_grpc(sentences, target=args.grpc, **common)
    else:
        outputs = predict(sentences, url=args.url, **common)
    if args.json or "translations" not in outputs:  # e.g. score: numbers only
        print(json.dumps(outputs, ensure_ascii=False, indent=2))
    else:
        for line in outputs.get("translations", []):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
