#!/usr/bin/env python3
"""REST client for a keras_transformer translator served by TensorFlow Serving.

Standard library only (``urllib``): no TensorFlow needed on the client. Sends
the batch in TF Serving's *columnar* format

    POST {url}/v1/models/{model}[/versions/{version}]:predict
    {"signature_name": "serving_default", "inputs": {"sentences": [...]}}

and returns the ``outputs`` dict (``translations``, ``scores``, ``truncated`` for
``serving_default`` / ``beam_search``; see keras_transformer/export.py for the
``greedy`` and ``token_ids`` signatures).

Command line::

    python serving/client.py "A man is riding a bike." "Two dogs play."
    echo "A man is riding a bike." | python serving/client.py --signature greedy
    python serving/client.py --url http://host:8501 --model translator --version 2 "..."

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

__all__ = ["predict", "translate", "model_status"]

DEFAULT_URL = "http://localhost:8501"
DEFAULT_MODEL = "translator"


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


def predict(
    sentences: list[str],
    url: str = DEFAULT_URL,
    model: str = DEFAULT_MODEL,
    signature: str = "serving_default",
    version: int | None = None,
    timeout: float = 60.0,
) -> dict[str, list]:
    """Calls one signature of the served translator.

    Args:
        sentences: the source sentences (``str``).
        url: TF Serving REST address.
        model: model name (``name`` in serving/models.config).
        signature: ``serving_default``, ``beam_search``, ``greedy`` or ``token_ids``.
        version: a specific version, else the served (latest) one.
        timeout: seconds.

    Returns:
        The signature's outputs, one list per output name (batch first).

    Raises:
        ValueError: if ``sentences`` is not a list of str.
        RuntimeError: with the server's message on an HTTP error.
    """
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise ValueError("sentences must be a list of str")
    payload = {"signature_name": signature, "inputs": {"sentences": list(sentences)}}
    result = _request(_model_url(url, model, version) + ":predict", payload, timeout)
    outputs = result["outputs"]
    if not isinstance(outputs, dict):  # a single-output signature comes back bare
        outputs = {"output": outputs}
    return {name: _decode_strings(value) for name, value in outputs.items()}


def translate(sentences: list[str], **kwargs: Any) -> list[str]:
    """Translations only (beam search unless ``signature="greedy"``); see :func:`predict`."""
    return predict(sentences, **kwargs)["translations"]


def model_status(url: str = DEFAULT_URL, model: str = DEFAULT_MODEL, timeout: float = 10.0) -> dict:
    """``GET /v1/models/{model}``: the versions and their state (e.g. AVAILABLE)."""
    return _request(_model_url(url, model, None), None, timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sentences", nargs="*", help="sentences to translate (default: stdin lines)")
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--signature", default="serving_default")
    parser.add_argument("--version", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--json", action="store_true", help="print every output as JSON")
    args = parser.parse_args(argv)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    outputs = predict(sentences, url=args.url, model=args.model, signature=args.signature,
                      version=args.version, timeout=args.timeout)
    if args.json:
        print(json.dumps(outputs, ensure_ascii=False, indent=2))
    else:
        for line in outputs.get("translations", []):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
