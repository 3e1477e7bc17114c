"""Mixed precision chosen by the hardware: bfloat16 where it is native, float16 with loss scaling, float32.

The paper trained in float32 on P100 GPUs (Section 5.2); today's hardware runs
matrix products faster in 16-bit floats. Keras' mixed policies keep float32
variables and compute in 16 bits; our model keeps the softmax of attention, the
logits and the loss in float32 (``keras_transformer.layers.attention``,
``Transformer``). Which 16-bit type:

* **bfloat16** where the hardware has native bfloat16 matrix units: x86 CPUs
  with AVX512_BF16 or AMX (Intel Cooper Lake, Sapphire Rapids and later; AMD
  Zen 4 and later), NVIDIA GPUs of compute capability 8.0 or more (Ampere and
  later), TPUs. bfloat16 has float32's exponent range: no loss scaling.
  Measured on this project's 2-core CPU (AVX512_BF16/AMX): 1.4x the training
  tokens/s of float32 (``scripts/bench/precision.py``).
* **float16** with dynamic loss scaling on older GPUs (compute capability 7.x:
  Volta, Turing): fast tensor cores, but a narrow exponent range.
* **float32** otherwise (CPUs without bfloat16 instructions, where 16-bit
  types are emulated and slower).

On x86-64 CPUs TensorFlow's oneDNN kernels (matrix products, softmax,
layout-aware fusions) are on by default only where the CPU has Intel's
deep-learning instructions (AVX512_VNNI, AVX512_BF16, AMX); elsewhere (AMD
CPUs, older Intel ones) TensorFlow falls back to Eigen. ``default_onednn``
(:mod:`keras_transformer.runtime`) turns oneDNN on for the command line's processes: measured on a 2-core AMD EPYC
(AVX2, no bfloat16), the ``small`` training step took 826-878 ms with oneDNN
and 1,387-1,558 ms without (``scripts/bench/train_efficiency.py``, alternated
runs). It is read once, when TensorFlow loads, so it must be set before.

:func:`set_precision` sets Keras' global dtype policy, one of
:data:`PRECISION_POLICIES` or ``"auto"`` (:func:`resolve_precision`), before
the model is built.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

__all__ = [
    "AUTO",
    "PRECISION_POLICIES",
    "choose_precision",
    "cpu_bfloat16_flags",
    "resolve_precision",
    "set_precision",
]

#: The ``--precision`` value that picks by hardware.
AUTO = "auto"
#: The Keras dtype policies :func:`set_precision` accepts.
PRECISION_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
#: /proc/cpuinfo flags of native bfloat16 matrix instructions on x86.
_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bfloat16_flags(cpuinfo_path: str = "/proc/cpuinfo") -> list[str]:
    """The native bfloat16 instruction sets this CPU reports (Linux ``/proc/cpuinfo`` flags).

    Args:
        cpuinfo_path: the file to read (another one in tests).

    Returns:
        the subset of ``["avx512_bf16", "amx_bf16"]`` present, ``[]`` when the
        file is missing or unreadable (not Linux): then bfloat16 is not
        assumed to be native.
    """
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            flags = set()
            for line in f:
                if line.startswith("flags"):
                    flags.update(line.split(":", 1)[1].split())
    except OSError:
        return []
    return [flag for flag in _CPU_BF16_FLAGS if flag in flags]


def choose_precision(
    gpu_compute_capabilities: Sequence[tuple[int, int] | None] | None = None,
    cpu_flags: Iterable[str] | None = None,
    tpu: bool | None = None,
) -> tuple[str, str]:
    """The mixed-precision policy for this machine, and why.

    Args:
        gpu_compute_capabilities: one ``(major, minor)`` per visible GPU (None
            for a GPU that does not report one); default: read from
            ``tf.config.experimental.get_device_details``.
        cpu_flags: the CPU's bfloat16 instruction flags; default
            :func:`cpu_bfloat16_flags`.
        tpu: whether a TPU is visible; default: ask TensorFlow.

    Returns:
        ``(policy, reason)``: policy one of ``"mixed_bfloat16"``,
        ``"mixed_float16"``, ``"float32"``; reason a short sentence naming the
        hardware feature that decided it.
    """
    if gpu_compute_capabilities is None or tpu is None:
        import tensorflow as tf

        if tpu is None:
            tpu = bool(tf.config.list_logical_devices("TPU"))
        if gpu_compute_capabilities is None:
            gpu_compute_capabilities = [
                tf.config.experimental.get_device_details(gpu).get("compute_capability")
                for gpu in tf.config.list_physical_devices("GPU")
            ]
    if tpu:
        return "mixed_bfloat16", "a TPU computes in bfloat16 natively"
    if gpu_compute_capabilities:
        known = [cc for cc in gpu_compute_capabilities if cc is not None]
        if known and len(known) == len(gpu_compute_capabilities) and min(known) >= (8, 0):
            return "mixed_bfloat16", f"every GPU has compute capability {min(known)[0]}.{min(known)[1]} >= 8.0 (bfloat16)"
        return "mixed_float16", "a GPU without native bfloat16 (compute capability < 8.0): float16 with loss scaling"
    flags = cpu_bfloat16_flags() if cpu_flags is None else [f for f in cpu_flags if f in _CPU_BF16_FLAGS]
    if flags:
        return "mixed_bfloat16", f"the CPU has native bfloat16 instructions ({', '.join(sorted(flags))})"
    return "float32", "the CPU has no native bfloat16 instructions (AVX512_BF16 or AMX) and there is no GPU"


def resolve_precision(precision: str | None) -> tuple[str, str]:
    """``training.precision`` to a Keras policy: ``"auto"`` (or None) is :func:`choose_precision`.

    The environment variable ``KERAS_TRANSFORMER_PRECISION`` overrides
    ``"auto"`` (e.g. to force float32 in a test or on a machine whose flags
    lie).

    Args:
        precision: ``"auto"``, None, or a policy name.

    Returns:
        ``(policy, reason)``.
    """
    if precision in (None, AUTO):
        forced = os.environ.get("KERAS_TRANSFORMER_PRECISION")
        if forced:
            return forced, "KERAS_TRANSFORMER_PRECISION"
        return choose_precision()
    return precision, "asked for"


def set_precision(policy: str | None) -> tuple[str, str]:
    """Sets Keras' global dtype policy; call it before building the model.

    ``mixed_float16`` (GPU): float16 compute, float32 variables; ``compile``
    then wraps the optimizer in ``keras.optimizers.LossScaleOptimizer``
    (dynamic loss scaling). ``mixed_bfloat16`` (TPU, recent CPUs and GPUs): no
    loss scaling needed. Logits stay float32 (the model's contract).
    ``"auto"`` picks by hardware (:func:`choose_precision`).

    Args:
        policy: ``"auto"``, one of :data:`PRECISION_POLICIES`, or ``None``
            (float32).

    Returns:
        ``(policy, reason)``: the policy set and why (for ``"auto"``: the
        hardware feature that decided it).

    Raises:
        ValueError: for another policy name.
    """
    import keras

    if policy == AUTO:
        policy, reason = resolve_precision(policy)
    else:
        policy, reason = policy or "float32", "asked for"
    if policy not in PRECISION_POLICIES:
        raise ValueError(f"unknown precision policy {policy!r}; choose one of {PRECISION_POLICIES} or 'auto'")
    keras.config.set_dtype_policy(policy)
    return policy, reason
