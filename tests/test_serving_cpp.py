"""The export under TensorFlow's C++ SavedModel loader, as TF Serving loads it.

``serving/cpp/translate.cc`` (compiled once per module by ``serving/cpp/build.py``
against the installed TensorFlow wheel) loads tensorflow-text's SentencePiece op
library and the SavedModel with ``tensorflow::LoadSavedModel`` and the ``serve`` tag,
then runs one batch read from stdin through the ``serving_default`` SignatureDef,
with no Python in the process. Its translations must equal, line for line, those of
``tf.saved_model.load(path).signatures["serving_default"]`` on the same batch: real
Multi30k sentences mixed with bad inputs (empty, whitespace only, invalid UTF-8,
5,000 characters).

The export is the session's shared tiny one (tests/decoding/_shared.py): version 1
plain, version 2 XLA-compiled. The program mirrors tensorflow_model_server's
``--xla_cpu_compilation_enabled`` (off by default): the XLA export's XLA path
(searches of at most ``xla_max_rows`` decoding rows) must fail without it, as in
the server, and match Python with it.

The C++ tests are skipped when ``g++`` is not on PATH. One check needs no compiler:
the variables that the signatures read must be the ones the SavedModel's saver
restores, since the C++ loader (unlike ``tf.saved_model.load``) initializes variables
only through that saver.
"""

import functools
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops for the Python reference)

from tensorflow.core.protobuf import saved_model_pb2

from keras_transformer.export import saved_model_op_names

REPO = pathlib.Path(__file__).resolve().parents[1]
BUILD_PY = REPO / "serving" / "cpp" / "build.py"
RUN_TIMEOUT = 600  # seconds per run of the binary (a loaded machine; a run takes a few)

needs_gxx = pytest.mark.skipif(
    shutil.which("g++") is None,
    reason="g++ is not on PATH: cannot compile serving/cpp/translate.cc (install g++ to run the C++ loader tests)",
)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shared():
    return _load("_keras_transformer_shared_loader", REPO / "tests" / "decoding" / "_shared.py").load()


shared = _shared()
cpp_build = _load("_keras_transformer_serving_cpp_build", BUILD_PY)

NUM_REAL = 12
LONG = ("Two young men in red shirts are playing football on a green field near the river. " * 70)[:5000]
#: Bad inputs, inserted among the real sentences at these positions.
BAD_INPUTS = {
    0: b"",
    3: b"   \t ",
    6: b"caf\xe9 au lait",  # Latin-1, not UTF-8
    9: LONG.encode(),
}


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    """The program, compiled once for this module into a fresh folder."""
    return cpp_build.build(tmp_path_factory.mktemp("serving_cpp") / "translate")


@pytest.fixture(scope="module")
def op_libraries():
    return cpp_build.tensorflow_text_op_libraries()


@pytest.fixture(scope="module")
def exported(multi30k_dir, tmp_path_factory):
    """``(base, {1: plain path, 2: XLA path})``, the session's shared export."""
    model, tokenizer = shared.model_and_tokenizer(shared.spm_path(multi30k_dir, tmp_path_factory))
    return shared.exported(model, tokenizer, tmp_path_factory)


@pytest.fixture(scope="module")
def real_sentences(multi30k_dir):
    """The first Multi30k validation sentences (English), as UTF-8 bytes."""
    with open(multi30k_dir / "val.en", encoding="utf-8") as f:
        lines = [f.readline().rstrip("\r\n") for _ in range(NUM_REAL)]
    assert all(lines), "val.en has fewer lines than expected or empty lines"
    return [line.encode("utf-8") for line in lines]


@pytest.fixture(scope="module")
def batch(real_sentences):
    sentences = list(real_sentences)
    for position, bad in sorted(BAD_INPUTS.items()):
        sentences.insert(position, bad)
    assert not any(b"\n" in s for s in sentences)
    return sentences


@functools.cache
def _loaded(path):
    """``tf.saved_model.load(path)``, once per export in this module (no test here seeds TensorFlow, which would
    drop the SentencePiece resources of what was loaded before)."""
    return tf.saved_model.load(path)


def _python_translations(path, sentences, signature="serving_default"):
    """``translations`` of the signature in this (Python) process, as a list of bytes."""
    loaded = _loaded(path)
    outputs = loaded.signatures[signature](sentences=tf.constant(sentences, dtype=tf.string, shape=[len(sentences)]))
    return [bytes(t) for t in outputs["translations"].numpy()]


def _run(binary, path, stdin, op_libraries, *args):
    command = [str(binary), str(path), *[a for lib in op_libraries for a in ("--op-library", lib)], *args]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(command, input=stdin, capture_output=True, timeout=RUN_TIMEOUT, env=env)


def _output_lines(result):
    """stdout split into lines; every line (the last one too) must end with '\\n'."""
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-3000:]
    if not result.stdout:
        return []
    assert result.stdout.endswith(b"\n")
    return result.stdout[:-1].split(b"\n")


@needs_gxx
def test_plain_export_matches_python_line_for_line(binary, op_libraries, exported, batch):
    _, paths = exported
    expected = _python_translations(paths[1], batch)
    assert len(expected) == len(batch)

    lines = _output_lines(_run(binary, paths[1], b"\n".join(batch) + b"\n", op_libraries))

    assert len(lines) == len(batch)  # one output per input, the bad ones too
    assert lines == expected
    for line in lines:
        line.decode("utf-8")  # valid UTF-8, strictly
    # The comparison is not vacuous: blank inputs give "", real ones various translations.
    assert expected[0] == b"" and expected[3] == b""
    real = [t for i, t in enumerate(expected) if i not in BAD_INPUTS]
    assert len(set(real)) > len(real) // 2 and all(real)


@needs_gxx
def test_empty_stdin_is_an_empty_batch(binary, op_libraries, exported):
    _, paths = exported
    assert _python_translations(paths[1], []) == []
    result = _run(binary, paths[1], b"", op_libraries)
    assert _output_lines(result) == []
    assert result.stdout == b""


@needs_gxx
def test_bad_path_fails_naming_it(binary, op_libraries, tmp_path):
    missing = tmp_path / "no_such_model" / "1"
    result = _run(binary, missing, b"A dog runs.\n", op_libraries)
    assert result.returncode != 0
    assert result.stdout == b""
    assert str(missing).encode() in result.stderr


@needs_gxx
def test_sentencepiece_op_library_is_what_the_export_needs(binary, op_libraries, exported):
    _, paths = exported
    export_ops = {op for op in saved_model_op_names(paths[1]) if op.startswith("Sentencepiece")}
    assert export_ops == set(cpp_build.SENTENCEPIECE_OPS)
    assert len(op_libraries) == 1 and os.path.isfile(op_libraries[0])
    with open(op_libraries[0], "rb") as f:
        data = f.read()
    assert all(op.encode() + b"\0" in data for op in export_ops)
    # Without the library the C++ loader cannot even load the graph (as a server
    # without tensorflow-text's kernels), so the successful runs above used it.
    result = _run(binary, paths[1], b"A dog runs.\n", [])
    assert result.returncode != 0
    assert b"Op type not registered 'Sentencepiece" in result.stderr


@needs_gxx
def test_xla_export_runs_only_with_xla_cpu_compilation_enabled(binary, op_libraries, exported, real_sentences):
    _, paths = exported
    with open(os.path.join(paths[2], "assets.extra", "export_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["xla_compiled"] is True
    # Searches of at most xla_max_rows decoding rows take the XLA-compiled search: with the default
    # (4), a single sentence's greedy and beam search (the test model has 2 beams: 2 rows).
    rows = config["decoding"]["xla_max_rows"]
    assert rows == 4
    sentences = real_sentences[:1]
    stdin = sentences[0]  # no final newline: the line still counts

    for signature in ("greedy", "serving_default"):
        refused = _run(binary, paths[2], stdin, op_libraries, "--signature", signature)
        assert refused.returncode != 0
        assert b"XLA compilation disabled" in refused.stderr  # TF Serving's default
        assert refused.stdout == b""
        expected = _python_translations(paths[2], sentences, signature)
        lines = _output_lines(_run(binary, paths[2], stdin, op_libraries, "--signature", signature,
                                   "--xla_cpu_compilation_enabled"))
        assert lines == expected and len(lines) == 1 and all(lines)
    # Larger searches (5 sentences: 5 greedy rows, 10 beam rows) run in graph mode: no flag needed.
    batch = b"\n".join(real_sentences[:5])
    for signature in ("greedy", "serving_default"):
        out = _output_lines(_run(binary, paths[2], batch, op_libraries, "--signature", signature))
        assert out == _python_translations(paths[2], real_sentences[:5], signature)


@needs_gxx
def test_build_is_cached(binary):
    mtime = binary.stat().st_mtime_ns
    assert cpp_build.build(binary) == binary
    assert binary.stat().st_mtime_ns == mtime  # not recompiled
    record = json.loads(binary.with_name(binary.name + ".build.json").read_text(encoding="utf-8"))
    assert record["tensorflow_version"] == tf.__version__
    other = dict(record, tensorflow_version="0.0.0")
    assert not cpp_build._is_fresh(binary, other)
    assert cpp_build._is_fresh(binary, record)


def _variable_handles(nodes, node_name):
    """Shared names of the VarHandleOp nodes feeding ``node_name``."""
    names = (i.lstrip("^").split(":")[0] for i in nodes[node_name].input)
    return {nodes[n].attr["shared_name"].s.decode() for n in names if nodes[n].op == "VarHandleOp"}


@pytest.mark.parametrize("version", [1, 2])
def test_signatures_read_only_variables_the_saver_restores(exported, version):
    """What the C++ loader needs: it restores variables with the MetaGraph's saver only.

    ``tf.saved_model.load`` restores variables through the object graph, so Python
    works even when the signatures capture variables that the saver never restores
    (Keras 3 variables not tracked as ``tf.Variable``s); the C++ loader and TF Serving
    then fail with "Could not find variable".
    """
    _, paths = exported
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(pathlib.Path(paths[version], "saved_model.pb").read_bytes())
    (meta_graph,) = proto.meta_graphs
    nodes = {n.name: n for n in meta_graph.graph_def.node}
    restored = _variable_handles(nodes, meta_graph.saver_def.restore_op_name)
    for name, signature in meta_graph.signature_def.items():
        if name.startswith("__"):
            continue
        callers = {t.name.split(":")[0] for t in signature.outputs.values()}
        read = set().union(*(_variable_handles(nodes, caller) for caller in callers))
        assert read, name
        unrestored = sorted(read - restored)
        assert not unrestored, (
            f"signature {name!r} of version {version} reads {len(unrestored)} of its {len(read)} variables "
            f"that the SavedModel's saver does not restore (the saver restores {len(restored)} others), "
            f"e.g. {unrestored[:3]}: TF Serving's C++ loader leaves them uninitialized"
        )
