"""Export tests: TF Serving layout, assets, no Python ops, reload in a fresh process.

The reload runs in a NEW Python process that imports only ``tensorflow`` and
``tensorflow_text`` (as TF Serving or a client would), and its translations
must equal the in-process Translator's.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import Translator
from keras_transformer.export import SIGNATURES, export_saved_model, find_python_ops, saved_model_op_names

SENTENCES = ["A dog runs in the park.", "", "Zwei Männer spielen Fußball."]


def _shared():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decoding", "_shared.py")
    spec = importlib.util.spec_from_file_location("_keras_transformer_shared_loader", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load()


shared = _shared()


@pytest.fixture(scope="module")
def model_and_tokenizer(multi30k_dir, tmp_path_factory):
    return shared.model_and_tokenizer(shared.spm_path(multi30k_dir, tmp_path_factory))


@pytest.fixture(scope="module")
def tokenizer(model_and_tokenizer):
    return model_and_tokenizer[1]


@pytest.fixture(scope="module")
def exported(model_and_tokenizer, tmp_path_factory):
    """Version 1: plain graph (+ warmup file); version 2: XLA-compiled search (shared per session)."""
    model, tokenizer = model_and_tokenizer
    base, paths = shared.exported(model, tokenizer, tmp_path_factory)
    # This module's own translator (same weights and settings) as the reference.
    plain = Translator(model, tokenizer, **shared.EXPORT_KWARGS)
    return base, paths, plain


def test_layout_assets_and_config(exported, tokenizer):
    base, paths, _ = exported
    assert paths[1] == os.path.join(str(base), "1")
    assert sorted(os.listdir(base)) == ["1", "2"]  # no temporary folder left
    for version, path in paths.items():
        assert os.path.isfile(os.path.join(path, "saved_model.pb"))
        assert os.path.isdir(os.path.join(path, "variables"))
        with open(os.path.join(path, "assets", "sentencepiece.model"), "rb") as f:
            assert f.read() == tokenizer.model_bytes
        with open(os.path.join(path, "assets.extra", "export_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        assert config["version"] == version
        assert config["xla_compiled"] is (version == 2)
        assert config["serving_flags"] == (["--xla_cpu_compilation_enabled=true"] if version == 2 else [])
        if version == 2 or importlib.util.find_spec("tensorflow_serving") is None:
            assert config["warmup"] is None
        else:
            assert config["warmup"] == {"file": "assets.extra/tf_serving_warmup_requests",
                                        "signatures": ["serving_default"], "batch_size": 2}
        assert config["decoding"]["beam_size"] == 2 and config["decoding"]["max_length"] == 20
        assert config["model_config"]["vocab_size"] == tokenizer.vocab_size
        assert config["tokenizer"]["sha256"] == tokenizer.vocab_sha256
        assert set(config["signatures"]) == {"serving_default", "beam_search", "greedy", "token_ids", "n_best",
                                             "score"}
        assert config["sampling"] is None  # no sampling settings: no sample signature
        assert set(config["signatures"]["serving_default"]["outputs"]) == {"translations", "scores", "truncated"}
        string_vector = {"dtype": "string", "shape": [None]}
        assert config["signatures"]["serving_default"]["inputs"] == {"sentences": string_vector}
        assert config["signatures"]["score"]["inputs"] == {"sentences": string_vector, "targets": string_vector}
        assert set(config["signatures"]["score"]["outputs"]) == {
            "log_prob", "score", "num_tokens", "token_log_probs", "target_ids", "target_pieces", "truncated"}
        assert config["signatures"]["n_best"]["outputs"]["translations"] == {"dtype": "string", "shape": [None, 2]}


def test_no_python_ops_and_xla_marker(exported):
    from tensorflow.core.protobuf import saved_model_pb2

    _, paths, _ = exported
    for version, path in paths.items():
        assert find_python_ops(path) == []
        proto = saved_model_pb2.SavedModel()
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            proto.ParseFromString(f.read())
        library = proto.meta_graphs[0].graph_def.library.function
        xla = any(fn.attr["_XlaMustCompile"].b for fn in library if "_XlaMustCompile" in fn.attr)
        assert xla is (version == 2)


def test_find_python_ops_detects_py_function(tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda x: tf.py_function(lambda y: y + 1, [x], tf.float32),
                           input_signature=[tf.TensorSpec([], tf.float32)])
    tf.saved_model.save(module, str(tmp_path))
    assert any("EagerPyFunc" in op for op in find_python_ops(tmp_path))


def test_existing_version_is_not_overwritten(exported):
    base, _, plain = exported
    with pytest.raises(ValueError, match="already exists"):
        export_saved_model(plain, base, version=1)
    with pytest.raises(ValueError, match="version"):
        export_saved_model(plain, base, version=-1)
    with pytest.raises(ValueError, match="warmup_sentences"):
        export_saved_model(plain, base, version=7, warmup_sentences="A dog.")
    with pytest.raises(ValueError, match="warmup_signatures"):
        export_saved_model(plain, base, version=7, warmup_sentences=["A dog."], warmup_signatures=("nope",))
    assert not os.path.exists(os.path.join(base, "7"))


def test_overwrite_replaces_the_version_and_leaves_nothing_else(model_and_tokenizer, tmp_path):
    model, tokenizer = model_and_tokenizer
    # The export's own settings (a cached output matrix), so that export_saved_model uses this very object.
    translator = Translator(model, tokenizer, cache_output_matrix=True, **shared.EXPORT_KWARGS)
    base = tmp_path / "serving"
    first = export_saved_model(translator, base, version=4)
    # Each signature's function was traced once: tf.saved_model.save's own trace, not a second one.
    methods = sorted(set(SIGNATURES.values()))
    assert {m: getattr(translator, m).experimental_get_tracing_count() for m in methods} == dict.fromkeys(methods, 1)
    marker = os.path.join(first, "assets.extra", "marker")
    open(marker, "w").close()
    again = export_saved_model(translator, base, version=4, overwrite=True)
    # The second export reuses those traces.
    assert {m: getattr(translator, m).experimental_get_tracing_count() for m in methods} == dict.fromkeys(methods, 1)
    assert again == first and os.path.isfile(os.path.join(again, "saved_model.pb"))
    assert not os.path.exists(marker)  # a new export, not the old folder
    assert sorted(os.listdir(base)) == ["4"]  # no temporary or moved-aside folder left


RELOAD_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import tensorflow as tf
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session
    from tensorflow.python.util import compat

    def registered_ops():
        buf = pywrap_tf_session.TF_GetAllOpList()
        try:
            ops = op_def_pb2.OpList.FromString(compat.as_bytes(pywrap_tf_session.TF_GetBuffer(buf)))
        finally:
            pywrap_tf_session.TF_DeleteBuffer(buf)
        return {op.name for op in ops.op}

    core = registered_ops()  # TensorFlow alone
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
    with_text = registered_ops()
    used = set(json.loads(os.environ["USED_OPS"]))
    results = {"ops": {
        "not_registered": sorted(used - with_text),
        "from_text": sorted(used - core),
        "text_declares": sorted(with_text - core),
    }}
    for path in sys.argv[2:]:
        loaded = tf.saved_model.load(path)
        sentences = tf.constant(json.loads(sys.argv[1]))
        out = loaded.signatures["serving_default"](sentences=sentences)
        results[path] = {
            "signatures": sorted(loaded.signatures),
            "translations": [t.decode("utf-8") for t in out["translations"].numpy()],
            "scores": out["scores"].numpy().tolist(),
            "truncated": out["truncated"].numpy().tolist(),
        }
        if path == sys.argv[2]:  # the other signatures once (the XLA model is slower to start)
            greedy = loaded.signatures["greedy"](sentences=sentences)
            ids = loaded.signatures["token_ids"](sentences=sentences)
            results[path]["greedy"] = [t.decode("utf-8") for t in greedy["translations"].numpy()]
            results[path]["output_ids_shape"] = ids["output_ids"].shape.as_list()
    results["modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "keras_transformer")
    print("RESULT" + json.dumps(results))
    """
)


def test_reload_in_fresh_process_translates(exported):
    _, paths, plain = exported
    used_ops = saved_model_op_names(paths[1]) | saved_model_op_names(paths[2])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", USED_OPS=json.dumps(sorted(used_ops)))
    env.pop("KERAS_BACKEND", None)
    proc = subprocess.run(
        [sys.executable, "-c", RELOAD_SCRIPT, json.dumps(SENTENCES), paths[1], paths[2]],
        capture_output=True, text=True, env=env, timeout=300, cwd="/",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")][-1]
    results = json.loads(line[len("RESULT"):])
    # Every op of every graph and function is registered by TensorFlow core or
    # tensorflow-text; the non-core ones are tensorflow-text's own SentencePiece ops.
    ops = results.pop("ops")
    assert ops["not_registered"] == []
    assert set(ops["from_text"]) <= set(ops["text_declares"])
    # (SentencepieceIdToStringOp: the pieces of the score signature; the same kernel file as the others.)
    assert set(ops["from_text"]) == {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp",
                                     "SentencepieceIdToStringOp"}
    assert {"PyFunc", "PyFuncStateless", "EagerPyFunc"}.isdisjoint(used_ops)
    assert {"StatefulPartitionedCall", "UnicodeTranscode", "TopKV2"} <= used_ops  # the scan sees function bodies
    assert results["modules"] == []  # keras_transformer was not needed (tensorflow itself imports keras)
    expected = plain.translate(tf.constant(SENTENCES))
    expected_greedy = plain.translate_greedy(tf.constant(SENTENCES))
    for path in (paths[1], paths[2]):
        got = results[path]
        assert got["signatures"] == ["beam_search", "greedy", "n_best", "score", "serving_default", "token_ids"]
        assert got["translations"] == [t.decode("utf-8") for t in expected["translations"].numpy()]
        assert got["translations"][1] == ""  # empty input
        assert got["truncated"] == [False, False, False]
        for a, b in zip(got["scores"], expected["scores"].numpy().tolist()):
            assert abs(a - b) < 1e-3
    assert results[paths[1]]["greedy"] == [t.decode("utf-8") for t in expected_greedy["translations"].numpy()]
    assert results[paths[1]]["output_ids_shape"] == [3, 2, 20]


def test_score_and_n_best_signatures_equal_the_python_translator(exported):
    """The exported ``score`` and ``n_best`` signatures give what the in-process Translator gives."""
    import numpy as np

    _, paths, plain = exported
    targets = ["Ein Hund rennt im Park.", "Ein Hund.", ""]
    expected = plain.score(tf.constant(SENTENCES), tf.constant(targets))
    expected_n_best = plain.translate_n_best(tf.constant(SENTENCES))
    for path in (paths[1], paths[2]):
        loaded = tf.saved_model.load(path)
        got = loaded.signatures["score"](sentences=tf.constant(SENTENCES), targets=tf.constant(targets))
        assert set(got) == set(expected)
        for name in expected:
            if expected[name].dtype in (tf.float32,):
                np.testing.assert_allclose(got[name].numpy(), expected[name].numpy(), rtol=1e-5, atol=1e-5)
            else:
                np.testing.assert_array_equal(got[name].numpy(), expected[name].numpy())
        n_best = loaded.signatures["n_best"](sentences=tf.constant(SENTENCES))
        np.testing.assert_array_equal(n_best["translations"].numpy(), expected_n_best["translations"].numpy())
        np.testing.assert_allclose(n_best["scores"].numpy(), expected_n_best["scores"].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(n_best["truncated"].numpy(), expected_n_best["truncated"].numpy())
        with pytest.raises(tf.errors.InvalidArgumentError, match="same number of entries"):
            loaded.signatures["score"](sentences=tf.constant(SENTENCES), targets=tf.constant(targets[:1]))


def load_client():
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), os.pardir, "serving", "client.py")
    spec = importlib.util.spec_from_file_location("serving_client", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rest_client_against_fake_server(exported):
    """serving/client.py speaks TF Serving's columnar REST format (fake server, real translator)."""
    import http.server
    import threading

    _, _, plain = exported
    seen = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen["path"], seen["body"] = self.path, body
            out = plain.translate(tf.constant(body["inputs"]["sentences"]))
            reply = {"outputs": {
                "translations": [t.decode("utf-8") for t in out["translations"].numpy()],
                "scores": out["scores"].numpy().tolist(),
                "truncated": out["truncated"].numpy().tolist(),
            }}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = load_client()
        url = f"http://127.0.0.1:{server.server_port}"
        got = client.translate(SENTENCES, url=url, version=2)
    finally:
        server.shutdown()
    assert seen["path"] == "/v1/models/translator/versions/2:predict"
    assert seen["body"] == {"signature_name": "serving_default", "inputs": {"sentences": SENTENCES}}
    assert got == [t.decode("utf-8") for t in plain.translate(tf.constant(SENTENCES))["translations"].numpy()]
    with pytest.raises(ValueError, match="list of str"):
        client.predict("not a list", url=url)


def test_saved_model_cli_lists_string_to_string_serving_default(exported):
    _, paths, _ = exported
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    if not os.path.isfile(cli):
        pytest.skip(f"saved_model_cli not found next to {sys.executable}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([cli, "show", "--dir", paths[1], "--all"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    start = out.index("signature_def['serving_default']:")
    block = out[start: out.find("signature_def[", start + 1) if "signature_def[" in out[start + 1:] else None]
    inputs, outputs = block.split("The given SavedModel SignatureDef contains the following output(s):")
    assert "inputs['sentences'] tensor_info:" in inputs and "dtype: DT_STRING" in inputs
    assert "shape: (-1)" in inputs
    assert "outputs['translations'] tensor_info:" in outputs
    translations = outputs[outputs.index("outputs['translations']"):].split("outputs[")[1]
    assert "dtype: DT_STRING" in translations and "shape: (-1)" in translations
    assert "Method name is: tensorflow/serving/predict" in block
    for name in ("beam_search", "greedy", "token_ids", "n_best", "score"):
        assert f"signature_def['{name}']" in out
    score = out[out.index("signature_def['score']:"):]
    score = score[: score.find("signature_def[", 1) if "signature_def[" in score[1:] else None]
    assert "inputs['sentences'] tensor_info:" in score and "inputs['targets'] tensor_info:" in score


def test_sample_signature_reproduces_the_python_translator(model_and_tokenizer, tmp_path):
    """A translator with sampling settings exports a `sample` signature: same ids as Python for the same seed."""
    model, tokenizer = model_and_tokenizer
    translator = Translator(model, tokenizer, sampling_topk=5, sampling_temperature=0.8, **shared.EXPORT_KWARGS)
    warmup = ["A dog runs."] if importlib.util.find_spec("tensorflow_serving") else None
    path = export_saved_model(translator, tmp_path / "sampling", version=1, warmup_sentences=warmup,
                              warmup_signatures=("serving_default", "sample"))
    with open(os.path.join(path, "assets.extra", "export_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["sampling"] == {"signature": "sample", "top_k": 5, "top_p": 1.0, "temperature": 0.8}
    assert config["signatures"]["sample"]["inputs"] == {
        "sentences": {"dtype": "string", "shape": [None]}, "seed": {"dtype": "int64", "shape": []},
    }
    assert set(config["signatures"]["sample"]["outputs"]) == {"translations", "output_ids", "truncated"}
    assert find_python_ops(path) == []
    loaded = tf.saved_model.load(path)
    assert sorted(loaded.signatures) == ["beam_search", "greedy", "n_best", "sample", "score", "serving_default",
                                        "token_ids"]
    for seed in (0, 7):
        got = loaded.signatures["sample"](sentences=tf.constant(SENTENCES), seed=tf.constant(seed, tf.int64))
        want = translator.translate_sampled(tf.constant(SENTENCES), tf.constant(seed, tf.int64))
        assert got["output_ids"].numpy().tolist() == want["output_ids"].numpy().tolist()
        assert got["translations"].numpy().tolist() == want["translations"].numpy().tolist()
        assert got["translations"].numpy()[1] == b""  # empty input
    assert not np.array_equal(got["output_ids"].numpy(), loaded.signatures["sample"](
        sentences=tf.constant(SENTENCES), seed=tf.constant(1, tf.int64))["output_ids"].numpy())
    if warmup:
        from tensorflow_serving.apis import prediction_log_pb2

        records = list(tf.data.TFRecordDataset(os.path.join(path, "assets.extra", "tf_serving_warmup_requests")))
        requests = [prediction_log_pb2.PredictionLog.FromString(r.numpy()).predict_log.request for r in records]
        assert [r.model_spec.signature_name for r in requests] == ["serving_default", "sample"]
        assert set(requests[1].inputs) == {"sentences", "seed"}
    # Without sampling settings no sample signature (the shared exports have none), so no warmup of it.
    plain = Translator(model, tokenizer, **shared.EXPORT_KWARGS)
    with pytest.raises(ValueError, match="warmup_signatures"):
        export_saved_model(plain, tmp_path / "plain", warmup_sentences=["A dog."], warmup_signatures=("sample",))
    assert not os.path.exists(tmp_path / "plain")


def test_rest_client_sends_the_seed_of_the_sample_signature(exported):
    """serving/client.py --signature sample --seed S: the REST body carries the seed as the signature's input."""
    import http.server
    import threading

    _, _, plain = exported
    seen = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen["body"] = body
            inputs = body["inputs"]  # the sample signature's inputs, by name
            out = plain.translate_sampled(tf.constant(inputs["sentences"]), tf.constant(inputs["seed"], tf.int64))
            data = json.dumps({"outputs": {"translations": [t.decode("utf-8") for t in out["translations"].numpy()]}})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data.encode())))
            self.end_headers()
            self.wfile.write(data.encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got = load_client().translate(SENTENCES, url=f"http://127.0.0.1:{server.server_port}", signature="sample",
                                      seed=7)
    finally:
        server.shutdown()
    assert seen["body"] == {"signature_name": "sample", "inputs": {"sentences": SENTENCES, "seed": 7}}
    want = plain.translate_sampled(tf.constant(SENTENCES), tf.constant(7, tf.int64))["translations"].numpy()
    assert got == [t.decode("utf-8") for t in want]
