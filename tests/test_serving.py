"""Serving tests: the exported SavedModel under bad input, new shapes and threads; the
warmup file; serving/start_server.sh (DRY_RUN), serving/models.config and the gRPC
path of serving/client.py against an in-process PredictionService.

The SavedModel is the session's shared export (tests/decoding/_shared.py):
version 1 plain (with a warmup file when tensorflow-serving-api is installed),
version 2 XLA-compiled.
"""

import concurrent.futures
import importlib.util
import os
import shlex
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops for the loaded graph)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START = os.path.join(REPO, "serving", "start_server.sh")
MAX_LENGTH = 20  # shared.EXPORT_KWARGS["max_length"]


def _shared():
    path = os.path.join(REPO, "tests", "decoding", "_shared.py")
    spec = importlib.util.spec_from_file_location("_keras_transformer_shared_loader", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load()


shared = _shared()

LONG = ("A man in a blue shirt is riding a bike down the street near a large building. " * 70)[:5000]
BAD_INPUTS = [
    b"",
    b"   \t  ",
    " \u3000\u00a0\n ".encode(),
    LONG.encode(),
    "Ein Hund läuft. Собака бежит. 犬が走る。 كلب يجري 🐕🏃‍♂️".encode(),
    b"\xff\xfe a dog \xc3\x28 runs \xed\xa0\x80",
    b"A dog runs in the park.",
]


@pytest.fixture(scope="module")
def exported(multi30k_dir, tmp_path_factory):
    model, tokenizer = shared.model_and_tokenizer(shared.spm_path(multi30k_dir, tmp_path_factory))
    return shared.exported(model, tokenizer, tmp_path_factory)


@pytest.fixture(scope="module")
def loaded(exported):
    _, paths = exported
    return tf.saved_model.load(paths[1])


def serve(loaded, sentences, signature="serving_default"):
    out = loaded.signatures[signature](sentences=tf.constant(sentences, tf.string))
    return {name: value.numpy() for name, value in out.items()}


def test_bad_inputs_one_output_each_no_crash(exported, loaded):
    check_bad_inputs(exported, loaded)


def test_bad_inputs_xla_export(exported):
    """The --xla export runs single sentences in XLA and the batch of 7 in graph mode: same answers."""
    _, paths = exported
    xla = tf.saved_model.load(paths[2])
    check_bad_inputs(exported, xla)
    assert serve(xla, [])["translations"].shape == (0,)


def check_bad_inputs(exported, loaded):
    """Every bad input alone and in one batch: one valid-UTF-8 output each, the documented behavior."""
    assert serve(loaded, [])["translations"].shape == (0,)  # an empty batch
    mixed = serve(loaded, BAD_INPUTS)
    assert {k: v.shape for k, v in mixed.items()} == {k: (len(BAD_INPUTS),) for k in mixed}
    for i, sentence in enumerate(BAD_INPUTS):
        alone = serve(loaded, [sentence])
        assert alone["translations"][0] == mixed["translations"][i]  # batching changes nothing
        assert alone["truncated"][0] == mixed["truncated"][i]
        np.testing.assert_allclose(alone["scores"][0], mixed["scores"][i], rtol=1e-4, atol=1e-4)
        mixed["translations"][i].decode("utf-8")  # strict: every output is valid UTF-8
    # Documented behavior: empty/whitespace -> "" with score 0; over-long -> truncated flag.
    assert mixed["translations"][:3].tolist() == [b"", b"", b""]
    assert mixed["scores"][:3].tolist() == [0.0, 0.0, 0.0]
    # truncated <=> more than max_length - 1 pieces (counted by the sentencepiece
    # library on the asset, invalid bytes read as U+FFFD).
    import sentencepiece

    _, paths = exported
    processor = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(paths[1], "assets", "sentencepiece.model"))
    counts = [len(processor.encode(x.decode("utf-8", errors="replace"))) for x in BAD_INPUTS]
    assert counts[3] > 1000 and counts[-1] < MAX_LENGTH - 1
    assert mixed["truncated"].tolist() == [c > MAX_LENGTH - 1 for c in counts]
    assert all(np.isfinite(mixed["scores"]))
    assert all(t for t in mixed["translations"][3:])


def test_invalid_utf8_translates_like_replacement_characters(loaded):
    got = serve(loaded, [b"\xff a dog \xc3", "\ufffd a dog \ufffd".encode()], "token_ids")
    np.testing.assert_array_equal(got["source_ids"][0], got["source_ids"][1])
    np.testing.assert_array_equal(got["output_ids"][0], got["output_ids"][1])


def test_long_input_is_cut_to_max_length(loaded):
    got = serve(loaded, [LONG, "A dog."], "token_ids")
    assert got["source_ids"].shape[1] == MAX_LENGTH  # max_length - 1 pieces + EOS
    assert got["source_ids"][0, -1] == 3 and np.all(got["source_ids"][0] != 0)
    assert got["truncated"].tolist() == [True, False]


def test_loaded_signatures_accept_new_batch_sizes_and_lengths(loaded):
    for batch in (["A dog."], ["Two men play soccer near a big old tree today.", ""], ["A cat."] * 5):
        n = len(batch)
        out = serve(loaded, batch)
        assert out["translations"].shape == (n,) and out["scores"].shape == (n,)
        greedy = serve(loaded, batch, "greedy")
        assert greedy["output_ids"].shape == (n, MAX_LENGTH)
        ids = serve(loaded, batch, "token_ids")
        assert ids["output_ids"].shape == (n, 2, MAX_LENGTH) and ids["scores"].shape == (n, 2)
    # The signatures are concrete functions with a [None] input: nothing to retrace.
    assert loaded.signatures["serving_default"].structured_input_signature[1]["sentences"].shape.as_list() == [None]


def test_threads_get_the_serial_outputs(loaded):
    batches = [[f"A dog number {i} runs.", "Zwei Männer.", "x" * (i + 1)][: 1 + i % 3] for i in range(8)]
    serial = [serve(loaded, b) for b in batches]

    def work(i):
        return [(i, serve(loaded, batches[i])) for _ in range(3)]

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = [r for rs in pool.map(work, range(8)) for r in rs]
    assert len(results) == 24
    for i, out in results:
        assert out["translations"].tolist() == serial[i]["translations"].tolist()
        np.testing.assert_array_equal(out["scores"], serial[i]["scores"])
        np.testing.assert_array_equal(out["truncated"], serial[i]["truncated"])


def test_warmup_requests_replay(exported, loaded):
    prediction_log_pb2 = pytest.importorskip("tensorflow_serving.apis.prediction_log_pb2")
    _, paths = exported
    path = os.path.join(paths[1], "assets.extra", "tf_serving_warmup_requests")
    records = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    assert len(records) == 1
    log = prediction_log_pb2.PredictionLog.FromString(records[0])
    request = log.predict_log.request
    assert request.model_spec.name == "translator"
    assert request.model_spec.signature_name == "serving_default"
    sentences = tf.make_ndarray(request.inputs["sentences"])
    assert [s.decode("utf-8") for s in sentences] == shared.WARMUP_SENTENCES
    out = serve(loaded, sentences.tolist(), request.model_spec.signature_name)
    assert out["translations"].shape == (2,)
    assert not os.path.exists(os.path.join(paths[2], "assets.extra", "tf_serving_warmup_requests"))


# -- serving/ ----------------------------------------------------------------------------


def dry_run(base, **env):
    proc = subprocess.run(["bash", START, str(base)], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, DRY_RUN="1", **env))
    return proc


def test_start_script_dry_run_command(exported, tmp_path):
    base, paths = exported
    proc = dry_run(base, REST_PORT="9501", GRPC_PORT="9500", TF_SERVING_IMAGE="tensorflow/serving:2.21.0")
    assert proc.returncode == 0, proc.stderr
    cmd = shlex.split(proc.stdout)
    models_config = os.path.join(REPO, "serving", "models.config")
    assert cmd[:3] == ["docker", "run", "--rm"]
    assert cmd[cmd.index("-v") + 1] == f"{base}:/models/translator:ro"
    assert f"{models_config}:/models/models.config:ro" in cmd
    assert "9501:8501" in cmd and "9500:8500" in cmd
    image = cmd.index("tensorflow/serving:2.21.0")
    # One thread per request's ops, 2 x cores requests at once; version 2 is XLA-compiled: the XLA flag.
    cores = len(os.sched_getaffinity(0))  # what nproc counts
    threads = ["--tensorflow_intra_op_parallelism=1", f"--tensorflow_inter_op_parallelism={2 * cores}"]
    assert cmd[image + 1:] == ["--model_config_file=/models/models.config", *threads,
                               "--xla_cpu_compilation_enabled=true"]
    assert "versions: 1 2" in proc.stderr

    # Only the plain export: no XLA flag.
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copytree(paths[1], plain / "1")
    cmd = shlex.split(dry_run(plain, TF_INTRA_OP="2", TF_INTER_OP="3").stdout)
    assert cmd[-4:] == ["tensorflow/serving:latest", "--model_config_file=/models/models.config",
                        "--tensorflow_intra_op_parallelism=2", "--tensorflow_inter_op_parallelism=3"]

    # Bad folders: a version folder itself, and a folder without versions.
    bad = dry_run(paths[1])
    assert bad.returncode == 2 and "version folder" in bad.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = dry_run(empty)
    assert bad.returncode == 2 and "no <version>/saved_model.pb" in bad.stderr


def test_models_config_matches_the_mount():
    model_server_config_pb2 = pytest.importorskip("tensorflow_serving.config.model_server_config_pb2")
    from google.protobuf import text_format

    with open(os.path.join(REPO, "serving", "models.config"), encoding="utf-8") as f:
        config = text_format.Parse(f.read(), model_server_config_pb2.ModelServerConfig())
    (model,) = config.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == ("translator", "/models/translator", "tensorflow")
    assert model.model_version_policy.latest.num_versions == 1


def load_client():
    path = os.path.join(REPO, "serving", "client.py")
    spec = importlib.util.spec_from_file_location("serving_client", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_client_rest_path_imports_only_the_standard_library():
    proc = subprocess.run(
        ["python3", "-c", "import sys; sys.path.insert(0, 'serving'); import client; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'grpc', 'numpy')))"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_grpc_client_against_in_process_prediction_service(loaded, capsys):
    grpc = pytest.importorskip("grpc")
    pytest.importorskip("tensorflow_serving.apis.prediction_service_pb2_grpc")
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    requests = []

    class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):  # noqa: N802
            requests.append(request)
            if request.model_spec.name != "translator":
                context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.model_spec.name}")
            out = loaded.signatures[request.model_spec.signature_name](
                **{name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()})
            response = predict_pb2.PredictResponse()
            for name, value in out.items():
                response.outputs[name].CopyFrom(tf.make_tensor_proto(value.numpy()))
            return response

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        client = load_client()
        target = f"127.0.0.1:{port}"
        sentences = ["A dog runs in the park.", "", "Zwei Männer spielen Fußball."]
        got = client.predict_grpc(sentences, target=target, version=1)
        expected = serve(loaded, sentences)
        assert got["translations"] == [t.decode("utf-8") for t in expected["translations"]]
        np.testing.assert_allclose(got["scores"], expected["scores"], rtol=1e-6)
        assert got["truncated"] == [False, False, False]
        assert requests[-1].model_spec.version.value == 1
        assert requests[-1].model_spec.signature_name == "serving_default"
        ids = client.predict_grpc(sentences, target=target, signature="token_ids")
        assert np.asarray(ids["output_ids"]).shape == (3, 2, MAX_LENGTH)
        assert client.translate(sentences, grpc_target=target) == got["translations"]
        targets = ["Ein Hund rennt.", "Ein Hund.", ""]
        scored = client.predict_grpc(sentences, target=target, signature="score", targets=targets)
        expected_scores = loaded.signatures["score"](sentences=tf.constant(sentences), targets=tf.constant(targets))
        np.testing.assert_allclose(scored["score"], expected_scores["score"].numpy(), rtol=1e-6)
        assert set(requests[-1].inputs) == {"sentences", "targets"}
        with pytest.raises(ValueError, match="one target per sentence"):
            client.predict_grpc(sentences, target=target, signature="score", targets=targets[:1])
        assert client.main(["--grpc", target, sentences[0]]) == 0
        assert capsys.readouterr().out.strip() == got["translations"][0]
        with pytest.raises(RuntimeError, match="NOT_FOUND"):
            client.predict_grpc(sentences, target=target, model="other")
    finally:
        server.stop(0)
