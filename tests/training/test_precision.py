"""--precision auto: the policy follows the hardware (injected here), and can be forced."""

import keras
import pytest

from keras_transformer import training
from keras_transformer.training.precision import choose_precision, cpu_bfloat16_flags, resolve_precision

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512_vnni {extra}
bogomips\t: 4800.00

processor\t: 1
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512_vnni {extra}
"""


@pytest.mark.parametrize(
    "gpus, flags, tpu, expected",
    [
        ([], ["avx512_bf16"], False, "mixed_bfloat16"),  # Cooper Lake / Zen 4 CPU
        ([], ["amx_bf16"], False, "mixed_bfloat16"),  # Sapphire Rapids CPU
        ([], [], False, "float32"),  # a CPU without bfloat16 instructions
        ([(8, 0), (9, 0)], [], False, "mixed_bfloat16"),  # A100, H100
        ([(7, 5)], ["avx512_bf16"], False, "mixed_float16"),  # a T4 decides, not the host CPU
        ([(8, 6), (7, 0)], [], False, "mixed_float16"),  # one older GPU: float16 for all
        ([None], [], False, "mixed_float16"),  # a GPU that reports no compute capability
        ([], [], True, "mixed_bfloat16"),  # TPU
    ],
)
def test_auto_picks_by_hardware(gpus, flags, tpu, expected):
    policy, reason = choose_precision(gpu_compute_capabilities=gpus, cpu_flags=flags, tpu=tpu)
    assert policy == expected
    assert reason  # says which feature decided
    if flags and not gpus and not tpu:
        assert flags[0] in reason


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    with_bf16 = tmp_path / "bf16"
    with_bf16.write_text(CPUINFO.format(extra="avx512_bf16 amx_tile amx_bf16"))
    assert cpu_bfloat16_flags(str(with_bf16)) == ["avx512_bf16", "amx_bf16"]
    without = tmp_path / "plain"
    without.write_text(CPUINFO.format(extra="avx512bw"))  # avx512bw is not avx512_bf16
    assert cpu_bfloat16_flags(str(without)) == []
    assert cpu_bfloat16_flags(str(tmp_path / "missing")) == []  # not Linux: nothing assumed


def test_resolve_and_set_precision(monkeypatch):
    monkeypatch.setenv("KERAS_TRANSFORMER_PRECISION", "float32")
    assert resolve_precision("auto") == ("float32", "KERAS_TRANSFORMER_PRECISION")
    assert resolve_precision("mixed_float16") == ("mixed_float16", "asked for")
    monkeypatch.delenv("KERAS_TRANSFORMER_PRECISION")
    try:
        policy, reason = training.set_precision("auto")  # this machine's choice
        assert (policy, reason) == choose_precision()
        assert keras.config.dtype_policy().name == policy
        assert policy in training.PRECISION_POLICIES
    finally:
        training.set_precision("float32")
    assert keras.config.dtype_policy().name == "float32"
