"""default_onednn: oneDNN on for x86-64 processes unless the user decided or TensorFlow is already loaded."""

import os
import subprocess
import sys

from keras_transformer.runtime import ONEDNN_VARIABLE, default_onednn


def test_sets_onednn_on_x86_64_before_tensorflow():
    env = {}
    message = default_onednn(env, machine="x86_64", tensorflow_loaded=False)
    assert env == {ONEDNN_VARIABLE: "1"}
    assert message.startswith("oneDNN on (set by keras_transformer")


def test_keeps_the_users_choice_and_other_machines():
    for value, state in (("0", "off"), ("1", "on")):
        env = {ONEDNN_VARIABLE: value}
        assert default_onednn(env, machine="x86_64", tensorflow_loaded=False) == f"oneDNN {state} ({ONEDNN_VARIABLE}={value})"
        assert env == {ONEDNN_VARIABLE: value}
    env = {}
    assert "TensorFlow decides" in default_onednn(env, machine="aarch64", tensorflow_loaded=False)
    assert "loaded before" in default_onednn(env, machine="x86_64", tensorflow_loaded=True)
    assert env == {}


def test_importing_runtime_does_not_load_tensorflow():
    code = "import sys, keras_transformer.runtime; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ))
    assert out.stdout.strip() == "False"


def test_tensorflow_in_a_cli_process_reads_the_switch():
    """In a process that goes through the CLI's start-up, TensorFlow sees the switch keras_transformer set."""
    code = (
        "import os, platform\n"
        f"os.environ.pop({ONEDNN_VARIABLE!r}, None)\n"
        "from keras_transformer.runtime import default_onednn\n"
        "print(default_onednn())\n"
        "from tensorflow.python.util import _pywrap_util_port as port\n"
        "print(platform.machine(), port.IsMklEnabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    first, second = out.stdout.strip().splitlines()[-2:]
    machine, enabled = second.split()
    if machine.lower() in ("x86_64", "amd64"):
        assert first.startswith("oneDNN on") and enabled == "True"
