"""translate as a filter: stdin, a pipe or a named pipe given as --input, each translation written when ready."""

import os
import queue
import subprocess
import sys
import threading

import pytest

from keras_transformer.decoding.stream import batches_as_they_arrive, is_stream
from keras_transformer.settings import RunError


def test_batches_hold_the_lines_already_arrived_and_name_a_bad_line(tmp_path):
    read, write = os.pipe()
    reader = os.fdopen(read, "rb")
    batches = batches_as_they_arrive(reader, batch_size=2, name="the pipe")
    os.write(write, b"one\ntwo\r\nthree\n")
    assert next(batches) == ["one", "two"]  # at most batch_size lines
    assert next(batches) == ["three"]  # what has arrived, without waiting for more
    os.write(write, "vier\u2028still four\nfive".encode() + b"\xff\n")
    assert next(batches) == ["vier\u2028still four"]
    os.close(write)
    with pytest.raises(RunError, match=r"the pipe, line 5: not UTF-8 \(invalid byte at column 5\); the 4 lines "
                                       r"before it were translated"):
        next(batches)


def test_pipes_and_devices_are_streams_regular_files_are_not(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    regular = tmp_path / "in.txt"
    regular.write_text("a\n")
    assert is_stream("-") and is_stream(fifo) and is_stream("/dev/stdin") and not is_stream(regular)
    with pytest.raises(RunError, match="input file not found"):
        is_stream(tmp_path / "missing")
    with pytest.raises(RunError, match="is a folder"):
        is_stream(tmp_path)


@pytest.fixture(scope="module")
def export(model_and_tokenizer, tmp_path_factory):
    shared = sys.modules["keras_transformer_tests_shared"]  # tests/decoding/_shared.py, loaded by conftest.py
    model, tokenizer = model_and_tokenizer
    return shared.exported(model, tokenizer, tmp_path_factory)[1][1]


def _reader(process):
    lines = queue.Queue()

    def read():
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_translate_from_stdin_writes_each_translation_before_the_input_ends(export):
    process = subprocess.Popen([sys.executable, "-m", "keras_transformer.cli", "translate", "--model", export],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    out = _reader(process)
    try:
        process.stdin.write("A dog runs.\n")
        process.stdin.flush()
        first = out.get(timeout=240)  # the input is still open: a line in, its translation out
        process.stdin.write("Two men play soccer.\n\n")
        process.stdin.flush()
        second, empty = out.get(timeout=120), out.get(timeout=120)
    finally:
        process.stdin.close()
        process.wait(timeout=120)
    assert process.returncode == 0, process.stderr.read()[-2000:]
    assert first.endswith("\n") and second.endswith("\n") and empty == "\n"
    # The same lines from a file translate the same way.
    whole = subprocess.run([sys.executable, "-m", "keras_transformer.cli", "translate", "--model", export],
                           input="A dog runs.\nTwo men play soccer.\n\n", capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert whole.stdout == first + second + empty


def test_a_named_pipe_and_dev_stdin_are_inputs(export, tmp_path, capsys):
    from keras_transformer.cli import main

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "w", encoding="utf-8") as f:
            f.write("A dog runs.\nA cat.\n")

    writer = threading.Thread(target=feed)
    writer.start()
    assert main(["translate", "--model", export, "--input", str(fifo), "--output", str(tmp_path / "out.txt"),
                 "--workers", "1"]) == 0
    writer.join()
    assert len((tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()) == 2
    assert "input file not found" not in capsys.readouterr().err
    done = subprocess.run([sys.executable, "-m", "keras_transformer.cli", "translate", "--model", export, "--input",
                           "/dev/stdin"], input="A dog runs.\n", capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1, done.stderr[-2000:]
