"""Process-level TensorFlow settings that must be made before TensorFlow is imported.

This module imports nothing of TensorFlow (nor the package's modules that do),
so the command line and the benchmarks call it first.

oneDNN: on x86-64 CPUs TensorFlow turns its oneDNN kernels (matrix
products, softmax, fused layouts) on by default only where the CPU has
Intel's deep-learning instructions (AVX512_VNNI, AVX512_BF16, AMX); on
others (AMD CPUs, older Intel ones) it uses Eigen's. Measured on a 2-core AMD
EPYC (AVX2, no bfloat16): the ``small`` training step took 826-878 ms with
oneDNN and 1,387-1,558 ms without (``scripts/bench/train_efficiency.py``,
alternated runs), and batches of 32 sentences decoded 1.2x faster. Single
sentences decoded faster without it there (TF Serving users choose with the
same variable, see ``serving/README.md``).
"""

from __future__ import annotations

import os

__all__ = ["ONEDNN_VARIABLE", "decoding_threads", "default_onednn"]

#: TensorFlow's switch of its oneDNN CPU kernels ("1" on, "0" off; unset: TensorFlow decides by CPU).
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
def default_onednn(environ=None, machine: str | None = None, tensorflow_loaded: bool | None = None) -> str:
    """Turns TensorFlow's oneDNN CPU kernels on for this process unless the user decided; says what holds.

    Sets ``TF_ENABLE_ONEDNN_OPTS=1`` when the variable is unset, the machine is
    x86-64 and TensorFlow is not loaded yet (it reads the variable once, at
    import). ``TF_ENABLE_ONEDNN_OPTS=0`` (or ``1``) set by the user is kept.
    The command line calls this before loading TensorFlow; so do the training
    benchmarks (see the module docstring for why).

    Args:
        environ: the environment to read and change (default ``os.environ``).
        machine: ``platform.machine()`` (default: this machine's).
        tensorflow_loaded: whether TensorFlow is already imported (default:
            ``"tensorflow" in sys.modules``).

    Returns:
        A short description for the start-up line, e.g. ``"oneDNN on (set by
        keras_transformer; TF_ENABLE_ONEDNN_OPTS=0 turns it off)"``.
    """
    import platform
    import sys

    if environ is None and machine is None and tensorflow_loaded is None and _FIRST:
        return _FIRST[0]  # this process already decided (the command line, then the Runner it calls)
    environ = os.environ if environ is None else environ
    machine = (platform.machine() if machine is None else machine).lower()
    loaded = ("tensorflow" in sys.modules) if tensorflow_loaded is None else tensorflow_loaded
    value = environ.get(ONEDNN_VARIABLE)
    if value is not None:
        state = "off" if value.strip() in ("0", "false", "False") else "on"
        return f"oneDNN {state} ({ONEDNN_VARIABLE}={value})"
    if machine not in ("x86_64", "amd64"):
        return f"oneDNN as TensorFlow decides ({machine})"
    if loaded:
        return "oneDNN as TensorFlow decided (TensorFlow was loaded before keras_transformer could set it)"
    environ[ONEDNN_VARIABLE] = "1"
    text = f"oneDNN on (set by keras_transformer; {ONEDNN_VARIABLE}=0 turns it off)"
    if environ is os.environ:
        _FIRST.append(text)
    return text


#: The first description :func:`default_onednn` gave for this process's own environment.
_FIRST: list[str] = []


def decoding_threads(workers: int) -> None:
    """TensorFlow threads for translating with ``workers`` concurrent batches (before TensorFlow starts).

    One intra-op thread per batch and ``workers`` batches at once: decoding
    a small model runs one small op after another, which one core serves
    better than two (1.5x the sentences/s of ``evaluate`` on 2 cores,
    :func:`keras_transformer.decoding.corpus.translate_lines`). Once
    TensorFlow has started (e.g. in a notebook that already trained), the
    threads stay as they are.

    Args:
        workers: batches translated at once, int >= 1.

    Raises:
        ValueError: for ``workers`` < 1.
    """
    import tensorflow as tf

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(max(2, workers))
    except RuntimeError:  # TensorFlow already started
        pass
