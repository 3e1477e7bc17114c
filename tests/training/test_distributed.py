"""Distributed training: MirroredStrategy with per-replica XLA, MultiWorkerMirroredStrategy, validation BLEU.

Each test runs tests/training/_workers.py in a subprocess (logical devices and
cluster settings must be fixed before TensorFlow starts). XLA compilations are
counted from the HLO modules XLA dumps (``XLA_FLAGS=--xla_dump_to=DIR``): one
``module_*.a_inference_replica_gradients_*.before_optimizations.txt`` file per
compilation of the per-replica forward+backward function.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest

WORKER = pathlib.Path(__file__).with_name("_workers.py")


def _start(mode, out, *args, env=None):
    full_env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    # stderr to a file, not a pipe: processes waited for one after the other cannot block on a full pipe.
    err = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, str(WORKER), mode, str(out), *map(str, args)], env=full_env,
                            stdout=subprocess.DEVNULL, stderr=err, text=True)
    proc.err_file = err
    return proc


def _wait(procs, timeout=600):
    """Waits for every process; kills them all if one times out; each must exit 0."""
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        proc.err_file.seek(0)
        err = proc.err_file.read()
        proc.err_file.close()
        assert proc.returncode == 0, err[-4000:]


def _run(mode, out, *args, env=None, timeout=600):
    _wait([_start(mode, out, *args, env=env)], timeout)
    return json.loads(pathlib.Path(out).read_text())


def _xla_compilations(dump_dir, function="replica_gradients"):
    return [p for p in os.listdir(dump_dir) if f"_{function}_" in p and p.endswith(".before_optimizations.txt")]


def test_mirrored_two_cpus_xla_matches_single_device(tmp_path):
    dump = tmp_path / "xla"
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump}"  # after conftest's TEST_XLA_FLAGS
    result = _run("mirrored", tmp_path / "out.json", env={"XLA_FLAGS": flags})
    assert result["replicas"] == 2
    # XLA really compiled the replica step: one module per replica device (one shape).
    assert len(_xla_compilations(dump)) == 2
    assert result["replica_traces"] == 2
    # The two halves of the global batch hold 8 and 40 real target tokens.
    assert result["replica_counts"] == [8.0, 40.0]
    np.testing.assert_allclose(result["mirrored_losses"], result["single_losses"], rtol=1e-5, atol=1e-5)
    assert result["grad_loss_mirrored"] == pytest.approx(result["grad_loss_single"], rel=1e-5)
    assert result["max_grad_diff"] < 1e-5 * max(result["max_grad"], 1.0)


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_multi_worker_two_processes_match_single_process(tmp_path):
    # The one-process reference runs alongside the two workers (their start-up is mostly single-threaded).
    procs = [_start("worker", tmp_path / "single.json")]
    ports = _free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    outs = []
    for index in range(2):
        out = tmp_path / f"worker{index}.json"
        procs.append(_start("worker", out, env={
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}))
        outs.append(out)
    _wait(procs)
    single = json.loads((tmp_path / "single.json").read_text())
    assert single["replicas"] == 1
    for out in outs:
        result = json.loads(out.read_text())
        assert result["replicas"] == 2
        np.testing.assert_allclose(result["losses"], single["losses"], rtol=1e-5, atol=1e-5)
        # The last update is checked through the loss of the final weights. (Raw
        # weights are not compared: attention key biases have an exactly zero
        # gradient, which Adam's epsilon=1e-9 turns float noise into +-lr steps.)
        assert result["final_loss"] == pytest.approx(single["final_loss"], rel=1e-5)


def test_validation_bleu_under_mirrored_strategy_matches_one_device(tmp_path, multi30k_dir):
    """ValidationBLEU translates the mirrored model being trained exactly as a one-device copy of its weights."""
    result = _run("mirrored_bleu", tmp_path / "out.json", tmp_path / "run",
                  env={"KERAS_TRANSFORMER_DATA": str(multi30k_dir.parent)})
    assert result["replicas"] == 2 and result["variable_type"] == "MirroredVariable"
    assert result["step"] == 6 and [e["step"] for e in result["evaluations"]] == [3, 6]
    assert result["callback_hypotheses"] == result["hypotheses"] and any(result["hypotheses"])
    last = result["evaluations"][-1]
    assert (last["bleu"], last["chrf"], last["sentences"]) == (result["bleu"], result["chrf"], 10)
    first_best = max(result["evaluations"], key=lambda e: e["bleu"])
    assert (result["best"]["step"], result["best"]["val_chrf"]) == (first_best["step"], first_best["chrf"])

    # Early stopping under the strategy: BLEU 5, 7 (best), 6, 6.5 every 2 steps uses up a patience of 2 at step 8,
    # the 2nd batch of the 2nd epoch (6 batches per epoch).
    assert result["stop_step"] == 8
    assert [(r["step"], r["value"]) for r in result["stop_history"]] == [(2, 5.0), (4, 7.0), (6, 6.0), (8, 6.5)]
    assert (result["stop_best_bleu"]["step"], result["stop_best_bleu"]["val_bleu"]) == (4, 7.0)
    # The best model by BLEU holds the weights of step 4; the best by loss those of the epoch end (step 6 or the
    # stop at step 8) with the lower validation loss, both reloaded on one device.
    weights_at = result["weights_at"]
    assert result["best_bleu_weights"] == weights_at["4"]
    assert len(result["stop_val_loss"]) == 2 and result["weights_at"]["6"] != result["weights_at"]["8"]
    best_epoch = int(np.argmin(result["stop_val_loss"]))
    assert result["stop_best_loss"]["epoch"] == best_epoch + 1  # numbered as the console does
    assert result["best_weights"] == weights_at[["6", "8"][best_epoch]]
