"""Executes colab/transformer_colab.ipynb top to bottom in its tiny, offline configuration (KT_NOTEBOOK_TINY=1)."""

import json
import os
import pathlib
import sys

import pytest

nbformat = pytest.importorskip("nbformat", reason="the dev extra (nbformat, nbclient, ipykernel) is not installed")
nbclient = pytest.importorskip("nbclient", reason="the dev extra (nbformat, nbclient, ipykernel) is not installed")
pytest.importorskip("ipykernel", reason="the dev extra (nbformat, nbclient, ipykernel) is not installed")

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "colab" / "transformer_colab.ipynb"
KERNEL_NAME = "keras-transformer-test"


def _kernel_spec_dir(root: pathlib.Path) -> pathlib.Path:
    """A kernel spec that runs ipykernel with this interpreter (not whatever `python` is on PATH)."""
    spec = root / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "keras_transformer tests",
                "language": "python",
            }
        ),
        encoding="utf-8",
    )
    return root


def test_parameters_cell_is_tagged_and_first_code_cell():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    for name in ("PRESET", "EPOCHS", "LIMIT_TRAIN", "LIMIT_TEST", "BEAM_SIZE", "PRECISION", "KT_NOTEBOOK_TINY"):
        assert name in code[0].source
    # The notebook trains, tests, exports, translates and plots through the Runner, as the command line does.
    source = "\n".join(c.source for c in code)
    for call in ("kt.Runner(", "runner.train()", "runner.test(", "runner.export(", "runner.translate(",
                 "runner.plot_attention("):
        assert call in source, call
    for private in ("compile_model", "build_model", "train_sentencepiece", "config.json"):
        assert private not in source, private
    # Shipped without outputs.
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)


@pytest.mark.slow
def test_notebook_runs_top_to_bottom_in_the_tiny_configuration(multi30k_dir, tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    monkeypatch.setenv("KT_NOTEBOOK_TINY", "1")
    monkeypatch.setenv("KT_NOTEBOOK_RUN_DIR", str(run_dir))
    monkeypatch.setenv("KERAS_TRANSFORMER_DATA", str(multi30k_dir.parent))
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path / "cache"))  # never the user's download cache
    monkeypatch.setenv("JUPYTER_PATH", str(_kernel_spec_dir(tmp_path / "jupyter")))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name=KERNEL_NAME, timeout=600, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()

    errors = [
        (i, out.get("ename"), out.get("evalue"))
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors
    stdout = "".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream" and out.get("name") == "stdout"
    )
    assert "keras_transformer is installed" in stdout  # no pip install in the test
    assert "Multi30k test2016 en-de, 20 sentences, beam search (beam 2, alpha 0.6):" in stdout
    bleu_lines = [line for line in stdout.splitlines() if line.startswith("BLEU = ")]
    assert len(bleu_lines) == 1 and "nrefs:1" in bleu_lines[0]
    assert "precision policy: float32 (asked for); XLA (jit_compile): False" in stdout
    for name in ("spm.model", "config.json", "model.keras", "model.keras.json", "test2016.hyp.de",
                 "export/1/saved_model.pb", "attention.png", "positional_encoding.png"):
        assert (run_dir / name).is_file(), name
    # The three plots were displayed as PNG images.
    images = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "display_data" and "image/png" in out.get("data", {})
    ]
    assert len(images) == 3
    _the_notebooks_folder_is_a_model_folder(run_dir, multi30k_dir, tmp_path, capsys)


def _the_notebooks_folder_is_a_model_folder(run_dir, multi30k_dir, tmp_path, capsys):
    """What the notebook trained opens with translate, evaluate, score and plot attention."""
    from keras_transformer.cli import main
    from keras_transformer.run_folder import RunFolder

    record = RunFolder(run_dir).read_record()
    assert (record.preset, record.config.num_layers, record.config.d_model) == ("tiny", 2, 32)
    sources = (multi30k_dir / "test2016.en").read_text(encoding="utf-8").splitlines()[:4]
    targets = (multi30k_dir / "test2016.de").read_text(encoding="utf-8").splitlines()[:4]
    (tmp_path / "s.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "t.de").write_text("\n".join(targets) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["translate", "--model", str(run_dir), "--input", str(tmp_path / "s.en"),
                 "--output", str(tmp_path / "hyp.de"), "--beam-size", "2", "--workers", "1"]) == 0
    assert len((tmp_path / "hyp.de").read_text(encoding="utf-8").splitlines()) == 4
    assert main(["evaluate", "--model-dir", str(run_dir), "--source", str(tmp_path / "s.en"),
                 "--reference", str(tmp_path / "t.de"), "--beam-size", "2", "--workers", "1"]) == 0
    assert "sentences = 4" in capsys.readouterr().out
    assert main(["score", "--model", str(run_dir), "--source", str(tmp_path / "s.en"),
                 "--target", str(tmp_path / "t.de"), "--output", str(tmp_path / "scores.tsv")]) == 0
    scores = (tmp_path / "scores.tsv").read_text(encoding="utf-8").splitlines()
    assert len(scores) == 4 and all(float(line.split("\t")[1]) < 0 for line in scores)
    assert main(["plot", "attention", "--model-dir", str(run_dir), "--source", sources[0],
                 "--output", str(tmp_path / "att.png")]) == 0
    assert (tmp_path / "att.png").stat().st_size > 1000
    # (`export` opens the folder as these do, and the notebook itself exported it: export/1 above.)
