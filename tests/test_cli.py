"""The command line: bad input and the main job end to end on a slice of real Multi30k."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from keras_transformer.cli import _split_lines, main
from keras_transformer.decoding.corpus import translate_lines

MULTI30K = [f"{split}.{lang}" for split in ("train", "val", "test2016") for lang in ("en", "de")]


def test_missing_data_folder_names_the_files(tmp_path, capsys):
    status = main(["run", "--data-dir", str(tmp_path / "nowhere"), "--no-download", "--output-dir", str(tmp_path / "o")])
    assert status == 2
    err = capsys.readouterr().err
    assert "train.en" in err and "train.de" in err and str(tmp_path / "nowhere") in err
    assert not (tmp_path / "o").exists()  # nothing left behind


def test_mismatched_line_counts_name_files_and_counts(tmp_path, capsys, multi30k_dir):
    folder = tmp_path / "multi30k"
    folder.mkdir()
    for name in MULTI30K:
        lines = (multi30k_dir / name).read_text(encoding="utf-8").splitlines()[:20]
        if name == "train.de":
            lines = lines[:17]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    status = main(["run", "--data-dir", str(tmp_path), "--no-download", "--output-dir", str(tmp_path / "o")])
    assert status == 2
    err = capsys.readouterr().err
    assert str(folder / "train.en") in err and str(folder / "train.de") in err
    assert "20" in err and "17" in err


def test_translate_rejects_a_missing_saved_model(tmp_path, capsys):
    assert main(["translate", "--saved-model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"no model at {tmp_path}" in err and "saved_model.pb" in err and "model.bin" in err


def _write_slice(multi30k_dir, out, n):
    for lang in ("en", "de"):
        lines = (multi30k_dir / f"test2016.{lang}").read_text(encoding="utf-8").splitlines()[:n]
        (out / f"test.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_translate_names_the_line_that_is_not_utf8(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "saved_model.pb").write_bytes(b"")  # never loaded: the input is checked first
    source = tmp_path / "in.en"
    source.write_bytes(b"A good line.\nA bad \xff line.\n")
    status = main(["translate", "--saved-model", str(tmp_path / "model"), "--input", str(source)])
    assert status == 2
    err = capsys.readouterr().err
    assert f"{source}, line 2: not UTF-8 (invalid byte at column 7)" in err


def test_split_lines_keeps_one_sentence_per_newline():
    text = "one\u2028still one\r\ntwo\x0cstill two\nthree"
    assert _split_lines(text) == ["one\u2028still one", "two\x0cstill two", "three"]
    assert _split_lines("a\n\nb\n") == ["a", "", "b"]
    assert _split_lines("") == []


def test_translate_lines_names_the_truncated_lines(capsys):
    import tensorflow as tf

    def fake_translate(batch):  # flags every source containing "long" as cut to max_length - 1 pieces
        flags = tf.strings.regex_full_match(batch, ".*long.*")
        return {"translations": tf.strings.upper(batch), "truncated": flags}

    lines = ["short", "a long one", "short", "long again", "short"]
    batches = []

    def recording(batch):
        batches.append([s.decode() for s in batch.numpy()])
        return fake_translate(batch)

    out = translate_lines(recording, lines, batch_size=2)
    assert out == [line.upper() for line in lines]  # input order restored
    # Batches of similar length: the three "short" lines together, then the two longer ones.
    assert batches == [["short", "short"], ["short", "a long one"], ["long again"]]
    assert translate_lines(recording, lines, batch_size=2, sort_by_length=False) == out
    assert batches[-3:] == [["short", "a long one"], ["short", "long again"], ["short"]]
    err = capsys.readouterr().err
    assert "warning: 2 of 5 sentences are longer than the model's max_length" in err
    assert "(lines 2, 4)" in err
    # Batches translated at once from 3 threads: the same translations, in order, and the same warning.
    capsys.readouterr()
    assert translate_lines(fake_translate, lines * 7, batch_size=2, workers=3) == out * 7
    assert "warning: 14 of 35 sentences" in capsys.readouterr().err
    with pytest.raises(ValueError, match="workers"):
        translate_lines(fake_translate, lines, workers=0)


def test_translate_lines_is_quiet_without_truncation(capsys):
    import tensorflow as tf

    out = translate_lines(lambda b: {"translations": b, "truncated": tf.zeros_like(b, tf.bool)}, ["a", "b"])
    assert out == ["a", "b"]
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("alpha", ["-0.5", "nan", "x"])
def test_length_penalty_is_checked_before_any_work(tmp_path, capsys, alpha):
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--model-dir", str(tmp_path), "--source", "s", "--reference", "r", "--length-penalty", alpha])
    assert exit_info.value.code == 2
    assert "--length-penalty" in capsys.readouterr().err


def test_average_checkpoints_rejects_last_zero(tmp_path, capsys):
    assert main(["average-checkpoints", "--model-dir", str(tmp_path), "--last", "0"]) == 2
    assert "--last must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
def test_run_end_to_end_on_a_slice(tmp_path, multi30k_dir):
    """`run` trains, scores, exports and translates; the export then works in a fresh process."""
    out = tmp_path / "run"
    env = dict(os.environ, KERAS_TRANSFORMER_DATA=str(multi30k_dir.parent))
    command = [
        sys.executable, "-m", "keras_transformer.cli", "run", "--preset", "tiny", "--vocab-size", "300",
        "--limit-train", "1500", "--limit-test", "40", "--epochs", "1", "--beam-size", "2",
        "--output-dir", str(out), "--num-examples", "2",
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "BLEU = " in result.stdout and "nrefs:1|case:mixed|eff:no|tok:13a" in result.stdout
    assert result.stdout.count("  EN:  ") == 2
    results = json.loads((out / "results.json").read_text())
    assert 0.0 <= results["bleu"] <= 100.0
    export = pathlib.Path(results["saved_model"])
    assert (export / "saved_model.pb").is_file()
    assert len((out / "test2016.hyp.de").read_text(encoding="utf-8").splitlines()) == 40

    # evaluate and export load the trained model in a fresh process (the Keras classes must register).
    _write_slice(multi30k_dir, out, 5)
    evaluate = subprocess.run(
        [sys.executable, "-m", "keras_transformer.cli", "evaluate", "--model-dir", str(out), "--beam-size", "2",
         "--length-penalty", "1.0", "--source", str(out / "test.en"), "--reference", str(out / "test.de")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    assert "BLEU = " in evaluate.stdout and "sentences = 5" in evaluate.stdout
    assert "beam search (beam 2, alpha 1.0)" in evaluate.stdout
    exported = subprocess.run(
        [sys.executable, "-m", "keras_transformer.cli", "export", "--model-dir", str(out), "--export-dir",
         str(out / "export2"), "--version", "3", "--beam-size", "2"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert (out / "export2" / "3" / "saved_model.pb").is_file()

    too_long = " ".join(["dog"] * 400)  # more pieces than the tiny preset's max_length
    sentences = ["A man is riding a bike.", too_long, "Two dogs play in the snow."]
    translate = subprocess.run(
        [sys.executable, "-m", "keras_transformer.cli", "translate", "--saved-model", str(export)],
        input="\n".join(sentences) + "\n", env=env, capture_output=True, text=True, timeout=300,
    )
    assert translate.returncode == 0, translate.stderr[-3000:]
    assert len(translate.stdout.splitlines()) == len(sentences)
    assert "warning: 1 of 3 sentences are longer than the model's max_length" in translate.stderr
    assert "(lines 2)" in translate.stderr


def test_tfds_without_network_says_how_to_use_local_files(tmp_path, capsys, monkeypatch):
    import keras_transformer.data.sources as sources

    monkeypatch.setattr(sources, "_network_available", lambda *a, **k: False)
    status = main(
        ["train", "--model-dir", str(tmp_path / "m"), "--tfds", "wmt14_translate/de-en",
         "--tfds-data-dir", str(tmp_path / "tfds")]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert "wmt14_translate/de-en is not prepared" in err and "network is unreachable" in err
    assert "--train-source/--train-target" in err


def _cli(*args, env, timeout=600):
    result = subprocess.run([sys.executable, "-m", "keras_transformer.cli", *map(str, args)], env=env,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def test_prepare_then_train_streams_and_prepares_again_when_the_source_changes(tmp_path, multi30k_dir, capsys):
    """`prepare` writes shards and a manifest; `train --prepared-dir` reuses them, and re-prepares after an edit."""
    import gzip

    data = tmp_path / "data"
    data.mkdir()
    en = (multi30k_dir / "train.en").read_text(encoding="utf-8").splitlines()[:300]
    de = (multi30k_dir / "train.de").read_text(encoding="utf-8").splitlines()[:300]
    (data / "train.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    with gzip.open(data / "train.de.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(de) + "\n")
    for lang in ("en", "de"):
        lines = (multi30k_dir / f"val.{lang}").read_text(encoding="utf-8").splitlines()[:30]
        (data / f"val.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = dict(os.environ, KERAS_TRANSFORMER_DATA=str(multi30k_dir.parent))
    prepared, model_dir = tmp_path / "prepared", tmp_path / "model"
    data_flags = ["--train-source", data / "train.en", "--train-target", data / "train.de.gz",
                  "--valid-source", data / "val.en", "--valid-target", data / "val.de"]

    prepare = ["prepare", "--output-dir", prepared, *data_flags, "--vocab-size", 300, "--max-length", 32,
               "--num-shards", 2, "--processes", 1]
    assert main(list(map(str, prepare))) == 0
    out = capsys.readouterr().out
    manifest = json.loads((prepared / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    kept, dropped = train["lengths"]["kept"], train["lengths"]["dropped"]
    assert kept + dropped == 300 and sum(s["pairs"] for s in train["shards"]) == kept
    assert f"train: {kept} pairs in 2 shard(s)" in out
    assert [s["file"] for s in train["shards"]] == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    assert manifest["splits"]["valid"]["lengths"]["pairs"] == 30
    stamps = [os.stat(prepared / s["file"]).st_mtime_ns for s in train["shards"]]
    assert main(list(map(str, prepare))) == 0  # the same command again: nothing to do
    assert "reusing the prepared data" in capsys.readouterr().out
    assert [os.stat(prepared / s["file"]).st_mtime_ns for s in train["shards"]] == stamps

    # Without data flags, train checks the folder against the files it was prepared from and streams it.
    out = _cli("train", "--prepared-dir", prepared, "--model-dir", model_dir, "--preset", "tiny", "--epochs", 1,
               "--batch-tokens", 512, env=env)
    assert "reusing the prepared data" in out
    assert "worker 1 of 1 reads 2 of 2 shards (batches of <= 512 tokens per replica)" in out
    assert (model_dir / "spm.model").read_bytes() == (prepared / "spm.model").read_bytes()
    steps = int(out.split("streaming ")[1].split(" steps per epoch")[0])
    state = json.loads((model_dir / "checkpoints" / "state.json").read_text())
    assert (state["epoch"], state["batch"], state["step"]) == (1, 0, steps)

    # An edited source: prepared again (with the model's vocabulary), and training continues for epoch 2.
    en[0] = "A zebra is reading a newspaper."
    (data / "train.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    out = _cli("train", "--prepared-dir", prepared, "--model-dir", model_dir, *data_flags, "--preset", "tiny",
               "--epochs", 2, "--batch-tokens", 512, env=env)
    assert f"preparing {prepared} again: the train source changed (size" in out and "using the given vocabulary" in out
    assert json.loads((prepared / "manifest.json").read_text())["vocabulary"]["sha256"] == manifest["vocabulary"][
        "sha256"]
    state = json.loads((model_dir / "checkpoints" / "state.json").read_text())
    assert state["epoch"] == 2 and state["step"] > steps
