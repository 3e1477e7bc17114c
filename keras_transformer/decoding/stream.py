"""Translating a stream of lines as they arrive: stdin, a pipe, a named pipe, ``<(zcat corpus.gz)``.

A file is read whole and translated in length-sorted batches
(:func:`keras_transformer.decoding.corpus.translate_lines`). A stream may
never end, or another program may send one line and wait for its
translation: :func:`batches_as_they_arrive` reads lines in a thread and
hands over, each time, the lines that have already arrived (at least one,
at most ``batch_size``), and :func:`translate_stream` writes each batch's
translations as soon as they exist, in input order. So ``keras-transformer
translate`` works as a filter in a shell pipeline.

A line that is not UTF-8 stops the stream with an error naming it; the
lines before it were already translated and written (a stream cannot be
checked before it is read).
"""

from __future__ import annotations

import os
import queue
import stat
import threading
from collections.abc import Callable, Iterator
from typing import IO

from keras_transformer.settings import RunError

__all__ = ["batches_as_they_arrive", "is_stream", "translate_stream"]

_END = object()


def is_stream(path: str | os.PathLike) -> bool:
    """Whether ``path`` is read as a stream: ``"-"`` (stdin), a pipe, a FIFO or a character device.

    Raises:
        RunError: for a path that does not exist or is a folder.
    """
    if os.fspath(path) == "-":
        return True
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise RunError(f"input file not found: {path}") from None
    if stat.S_ISDIR(mode):
        raise RunError(f"the input {path} is a folder, not a file of lines")
    return not stat.S_ISREG(mode)


def _decode(raw: bytes, number: int, name: str) -> str:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        done = number - 1
        raise RunError(f"{name}, line {number}: not UTF-8 (invalid byte at column {error.start + 1}); the {done} "
                       f"line{'s' if done != 1 else ''} before it {'were' if done != 1 else 'was'} translated and "
                       "written") from None
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line


def batches_as_they_arrive(stream: IO[bytes], batch_size: int, name: str) -> Iterator[list[str]]:
    """The stream's lines, in batches of those already arrived (1 to ``batch_size`` lines each).

    A line ends at ``\\n`` (a ``\\r`` before it is dropped; a last line without
    one counts); characters such as U+2028 stay inside their line, as in
    :func:`keras_transformer.decoding.scoring.read_text_lines`.

    Args:
        stream: a binary file object (``sys.stdin.buffer``, an opened pipe).
        batch_size: the most lines per batch, int >= 1.
        name: what the stream is, for error messages.

    Yields:
        ``list[str]`` batches, in order; every line exactly once.

    Raises:
        RunError: for a line that is not UTF-8 (naming it).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            for raw in stream:
                lines.put(raw)
        finally:
            lines.put(_END)

    threading.Thread(target=read, name="read-lines", daemon=True).start()
    number = 0
    while True:
        first = lines.get()  # wait for at least one line (or the end)
        if first is _END:
            return
        raws = [first]
        while len(raws) < batch_size:
            try:
                item = lines.get_nowait()
            except queue.Empty:
                break
            if item is _END:
                lines.put(_END)
                break
            raws.append(item)
        batch, error = [], None
        for raw in raws:
            number += 1
            try:
                batch.append(_decode(raw, number, name))
            except RunError as bad:  # the lines before it are translated first
                error = bad
                break
        if batch:
            yield batch
        if error is not None:
            raise error


def translate_stream(translate_batch: Callable[[list[str], int], list[str]], stream: IO[bytes],
                     write: Callable[[str], None], batch_size: int, name: str) -> int:
    """Translates a stream batch by batch, writing each batch's output as soon as it is translated.

    Args:
        translate_batch: ``(lines, number of lines before them) -> one output
            block per line`` (a translation and ``"\\n"``, or an n-best block).
        stream: the binary input.
        write: called with each batch's text, in order (e.g. write and flush
            stdout).
        batch_size: the most lines per batch.
        name: what the stream is, for error messages.

    Returns:
        The number of lines translated.

    Raises:
        RunError: for a line that is not UTF-8 (the lines before it are written).
    """
    done = 0
    for batch in batches_as_they_arrive(stream, batch_size, name):
        write("".join(translate_batch(batch, done)))
        done += len(batch)
    return done
