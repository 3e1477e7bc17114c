"""Build ``serving/cpp/translate.cc`` against the installed TensorFlow wheel.

The program loads an exported translator with TensorFlow's C++ SavedModel loader, as
TF Serving does (see the header of ``translate.cc``). This script compiles it with
``g++`` and exactly the flags of ``tf.sysconfig.get_compile_flags()`` and
``tf.sysconfig.get_link_flags()``, plus ``libtensorflow_cc.so.2`` from the same folder
(the C++ API: session, SavedModel loader, XLA's JIT), with an rpath to that folder so
the binary runs without ``LD_LIBRARY_PATH``.

Usage (prints the path of the binary)::

    python serving/cpp/build.py [--output PATH] [--force]

The build is cached: when the binary is newer than ``translate.cc`` and the record
written next to it (``<binary>.build.json``) names the same TensorFlow version and
folder, nothing is recompiled. Compiling takes about a minute (TensorFlow's headers).

Run the binary with the op libraries of :func:`tensorflow_text_op_libraries`::

    echo "A dog runs." | serving/cpp/build/translate runs/multi30k/export/1 \\
        --op-library .../tensorflow_text/python/ops/_sentencepiece_tokenizer.so

Needs only the standard library and ``tensorflow`` (``tensorflow_text`` is located,
not imported).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
#: The C++ source.
SOURCE = HERE / "translate.cc"
#: Default binary (``/serving/cpp/build/`` is in the repository's .gitignore).
DEFAULT_OUTPUT = HERE / "build" / "translate"
#: The C++ API library of the TensorFlow wheel, linked besides get_link_flags().
TENSORFLOW_CC_LIBRARY = "libtensorflow_cc.so.2"
#: tensorflow-text's library (under ``tensorflow_text/python/ops/``) of the SentencePiece ops.
SENTENCEPIECE_LIBRARY = "_sentencepiece_tokenizer.so"
#: The tensorflow-text ops our exports use (``keras_transformer.export.saved_model_op_names``).
SENTENCEPIECE_OPS = (
    "SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp",
    "SentencepieceIdToStringOp",  # the target pieces of the score signature
)

__all__ = ["BuildError", "build", "compile_command", "tensorflow_text_op_libraries", "DEFAULT_OUTPUT", "SOURCE"]


class BuildError(RuntimeError):
    """The program cannot be built: no ``g++``, no C++ library in the wheel, or a compile error."""


def _tensorflow():
    """``(tensorflow version, TensorFlow's library folder, compile flags, link flags)``."""
    import tensorflow as tf

    lib_dir = pathlib.Path(tf.sysconfig.get_lib()).resolve()
    return tf.__version__, lib_dir, list(tf.sysconfig.get_compile_flags()), list(tf.sysconfig.get_link_flags())


def compile_command(output: str | os.PathLike, compiler: str = "g++") -> list[str]:
    """The ``g++`` command line that builds ``translate.cc`` into ``output``.

    Args:
        output: path of the binary to write.
        compiler: the compiler executable (name or path).

    Returns:
        The argument list: the compiler, the source, ``-o output``,
        ``tf.sysconfig.get_compile_flags()``, ``tf.sysconfig.get_link_flags()``,
        ``-l:libtensorflow_cc.so.2`` and ``-Wl,-rpath,<TensorFlow folder>``.

    Raises:
        BuildError: if the TensorFlow folder has no ``libtensorflow_cc.so.2``.
    """
    _, lib_dir, compile_flags, link_flags = _tensorflow()
    if not (lib_dir / TENSORFLOW_CC_LIBRARY).is_file():
        raise BuildError(f"{TENSORFLOW_CC_LIBRARY} not found in {lib_dir}: this TensorFlow wheel has no C++ API")
    # Libraries after the source, so the linker resolves the program's references.
    return [compiler, str(SOURCE), "-o", os.fspath(output), *compile_flags, *link_flags,
            f"-l:{TENSORFLOW_CC_LIBRARY}", f"-Wl,-rpath,{lib_dir}"]


def _record_path(output: pathlib.Path) -> pathlib.Path:
    return output.with_name(output.name + ".build.json")


def _is_fresh(output: pathlib.Path, record: dict) -> bool:
    """True when ``output`` is newer than the source and was built by the same TensorFlow."""
    record_path = _record_path(output)
    if not (output.is_file() and record_path.is_file()):
        return False
    if output.stat().st_mtime <= SOURCE.stat().st_mtime:
        return False
    try:
        previous = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return all(previous.get(key) == record[key] for key in ("tensorflow_version", "tensorflow_dir"))


def build(output: str | os.PathLike | None = None, force: bool = False) -> pathlib.Path:
    """Compile ``translate.cc`` (unless the cached binary is fresh) and return the binary's path.

    The binary is written to a temporary file and renamed into place, so an interrupted
    build never leaves a half-written ``output``; ``<output>.build.json`` records the
    TensorFlow version and folder it was built against and the command.

    Args:
        output: path of the binary; default :data:`DEFAULT_OUTPUT`
            (``serving/cpp/build/translate``). Parent folders are created.
        force: recompile even when the cached binary is fresh.

    Returns:
        The absolute ``pathlib.Path`` of the executable.

    Raises:
        BuildError: if ``g++`` is not on PATH, the wheel has no
            ``libtensorflow_cc.so.2``, or compilation fails (the message holds the end
            of the compiler's output).
    """
    output = pathlib.Path(output if output is not None else DEFAULT_OUTPUT).resolve()
    compiler = shutil.which("g++")
    if compiler is None:
        raise BuildError("g++ not found on PATH: install a C++17 compiler (e.g. `apt-get install g++`) "
                         "to build serving/cpp/translate.cc")
    version, lib_dir, _, _ = _tensorflow()
    record = {"tensorflow_version": version, "tensorflow_dir": str(lib_dir)}
    if not force and _is_fresh(output, record):
        return output
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
    os.close(fd)
    try:
        command = compile_command(tmp, compiler="g++")
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip()[-4000:]
            raise BuildError(f"g++ failed (exit {result.returncode}) building {SOURCE}:\n{tail}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    record["command"] = command[:3] + [str(output)] + command[4:]
    _record_path(output).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return output


def tensorflow_text_op_libraries() -> list[str]:
    """Paths of the tensorflow-text op libraries our exports need: the SentencePiece ops.

    Finds ``tensorflow_text`` without importing it and checks that its
    ``python/ops/_sentencepiece_tokenizer.so`` registers every op of
    :data:`SENTENCEPIECE_OPS` (``SentencepieceOp``, ``SentencepieceTokenizeOp``,
    ``SentencepieceDetokenizeOp``, ``SentencepieceIdToStringOp``: the
    tensorflow-text ops in a translator export).

    Returns:
        ``list[str]`` of absolute ``.so`` paths, to pass to ``translate --op-library``.

    Raises:
        FileNotFoundError: if ``tensorflow_text`` is not installed or has no
            SentencePiece library.
        ValueError: if that library does not name every op of :data:`SENTENCEPIECE_OPS`.
    """
    spec = importlib.util.find_spec("tensorflow_text")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("tensorflow_text is not installed (pip install tensorflow-text)")
    package = pathlib.Path(list(spec.submodule_search_locations)[0])
    library = package / "python" / "ops" / SENTENCEPIECE_LIBRARY
    if not library.is_file():
        raise FileNotFoundError(f"tensorflow-text's SentencePiece op library not found: {library}")
    data = library.read_bytes()
    missing = [op for op in SENTENCEPIECE_OPS if op.encode() + b"\0" not in data]
    if missing:
        raise ValueError(f"{library} does not register {', '.join(missing)}")
    return [str(library.resolve())]


def main(argv: list[str] | None = None) -> int:
    """Command line: build (or reuse) the binary and print its path; 1 on a build error."""
    parser = argparse.ArgumentParser(description="Compile serving/cpp/translate.cc against the installed TensorFlow.")
    parser.add_argument("--output", default=None, help=f"path of the binary (default {DEFAULT_OUTPUT})")
    parser.add_argument("--force", action="store_true", help="recompile even when the cached binary is fresh")
    args = parser.parse_args(argv)
    try:
        path = build(args.output, force=args.force)
    except BuildError as error:
        print(f"build.py: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
