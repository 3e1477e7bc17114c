"""Kill -9 mid-epoch, re-run the same command: training resumes from the last checkpoint and finishes."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import h5py

from keras_transformer.training import checkpoints as ckpt

WORKER = pathlib.Path(__file__).with_name("_workers.py")
EPOCHS, STEPS = 2, 6  # 12 optimizer steps in all


def _lines(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_sigkill_mid_epoch_then_rerun_resumes(tmp_path):
    log = tmp_path / "log.jsonl"
    model_dir = tmp_path / "run"
    cmd = [sys.executable, str(WORKER), "resume", str(log), str(model_dir), str(EPOCHS), str(STEPS)]
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", WORKER_SLEEP="0.3")
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    # Kill during epoch 1 (the second), after at least two of its batches.
    while time.monotonic() < deadline:
        done = [r for r in _lines(log) if "epoch" in r]
        if len([r for r in done if r["epoch"] == 1]) >= 2:
            break
        assert first.poll() is None, first.stderr.read().decode()[-3000:]
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed = [r for r in _lines(log) if "epoch" in r]
    state = ckpt.read_state(model_dir / "checkpoints")
    assert state.epoch == 1 and 1 <= state.batch < STEPS
    assert state.step == STEPS + state.batch

    env["WORKER_SLEEP"] = "0"
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    rerun = [r for r in _lines(log) if r["pid"] != first.pid]
    batches = [r for r in rerun if "epoch" in r]
    # Resumed mid-epoch 1 from the checkpoint: the step counter continues, epoch 0 is not repeated.
    assert batches[0]["epoch"] == 1 and batches[0]["step"] == state.step + 1
    assert all(r["epoch"] == 1 for r in batches)
    assert [r["step"] for r in batches] == list(range(state.step + 1, EPOCHS * STEPS + 1))
    assert rerun[-1] == {"pid": rerun[-1]["pid"], "done": True, "step": EPOCHS * STEPS}
    assert len(killed) >= STEPS + 2
    # No half-written checkpoint: no temporary files, every checkpoint opens, state names the last.
    files = os.listdir(model_dir / "checkpoints")
    assert not [f for f in files if f.startswith("tmp-")]
    final = ckpt.read_state(model_dir / "checkpoints")
    assert final.step == EPOCHS * STEPS and final.epoch == EPOCHS and final.batch == 0
    for path in ckpt.list_checkpoints(model_dir / "checkpoints"):
        with h5py.File(path, "r") as f:
            assert "optimizer" in f
    assert (model_dir / "logs").is_dir()
