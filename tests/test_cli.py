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


# --------------------------------------------------------------------------- validation BLEU, other language pairs


def test_validation_flags_are_checked_before_any_work(tmp_path, capsys, multi30k_dir):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("Hola.\tHello.\n", encoding="utf-8")
    out = tmp_path / "m"
    assert main(["train", "--model-dir", str(out), "--tsv", str(pairs), "--early-stopping-patience", "2"]) == 2
    assert "--early-stopping-patience needs a validation set" in capsys.readouterr().err
    assert main(["train", "--model-dir", str(out), "--data-dir", str(multi30k_dir.parent), "--limit-train", "5",
                 "--valid-bleu-sentences", "0", "--early-stopping-patience", "2"]) == 2
    assert "--valid-bleu-sentences must be > 0" in capsys.readouterr().err
    assert main(["train", "--model-dir", str(out), "--dataset", "tatoeba_spa_eng", "--tsv", str(pairs)]) == 2
    assert "give one data source, not --tsv and --dataset" in capsys.readouterr().err
    assert not out.exists()  # nothing left behind
    with pytest.raises(SystemExit):
        main(["train", "--model-dir", str(out), "--valid-bleu-every", "-5"])
    assert "--valid-bleu-every: must be >= 0, got -5" in capsys.readouterr().err


NEW_FLAGS = ("--dataset", "--source-lang", "--target-lang", "--bleu-tokenize", "--valid-bleu-every",
             "--valid-bleu-sentences", "--valid-bleu-beam-size", "--early-stopping-patience", "--early-stopping-metric")


def test_the_validation_and_language_flags_state_their_defaults():
    from keras_transformer.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    seen = {}
    for name in ("run", "train", "evaluate"):
        for action in commands[name]._actions:
            for flag in set(action.option_strings) & set(NEW_FLAGS):
                seen.setdefault(flag, []).append(name)
                assert "default" in action.help, f"{name} {flag}: {action.help!r}"
    assert sorted(seen) == sorted(NEW_FLAGS)
    assert seen["--target-lang"] == ["run", "train", "evaluate"] and seen["--valid-bleu-every"] == ["run", "train"]
    args = parser.parse_args(["train", "--model-dir", "m"])
    assert (args.dataset, args.valid_bleu_every, args.valid_bleu_sentences, args.valid_bleu_beam_size,
            args.early_stopping_patience, args.early_stopping_metric, args.bleu_tokenize) == (
        None, 0, 500, 1, 0, "bleu", None)


def test_a_missing_japanese_tokenizer_names_the_pip_command(tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("MeCab") and importlib.util.find_spec("ipadic"):
        pytest.skip("sacrebleu[ja] is installed here")
    (tmp_path / "s.en").write_text("A cat.\n", encoding="utf-8")
    (tmp_path / "r.ja").write_text("猫。\n", encoding="utf-8")
    status = main(["evaluate", "--model-dir", str(tmp_path), "--source", str(tmp_path / "s.en"),
                   "--reference", str(tmp_path / "r.ja"), "--target-lang", "ja"])
    assert status == 2  # before any model is opened
    assert "pip install 'sacrebleu[ja]'" in capsys.readouterr().err


def _bleu_line(stdout):
    line = next(line for line in stdout.splitlines() if line.startswith("BLEU = "))
    return float(line.split()[2]), line


@pytest.mark.slow
def test_run_spanish_english_on_a_slice_and_validation_bleu_equals_evaluate(tmp_path, data_root, tatoeba_dir):
    """`run --dataset tatoeba_spa_eng` trains es->en on a slice, scores validation BLEU each epoch and the test set;
    `evaluate` of the saved model on the same validation sentences gives the callback's score and translations."""
    from keras_transformer.data.sources import load_tatoeba

    out = tmp_path / "run"
    env = dict(os.environ, KERAS_TRANSFORMER_DATA=str(data_root))
    command = [
        sys.executable, "-m", "keras_transformer.cli", "run", "--dataset", "tatoeba_spa_eng", "--preset", "tiny",
        "--vocab-size", "300", "--limit-train", "1200", "--limit-test", "20", "--epochs", "1", "--beam-size", "1",
        "--valid-bleu-sentences", "12", "--output-dir", str(out), "--num-examples", "1",
        # A small learning rate keeps this tiny model near its start, whose translations are not empty.
        "--learning-rate-scale", "0.02",
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "es -> en" in result.stdout and "translating tatoeba_spa_eng test (20 sentences)" in result.stdout
    assert "validation BLEU at each epoch end: greedy search of 12 sentences, sacreBLEU tokenizer 13a" in result.stdout
    assert "  ES:  " in result.stdout and "  EN:  " in result.stdout
    results = json.loads((out / "results.json").read_text())
    assert (results["dataset"], results["language_pair"], results["test_split"]) == ("tatoeba_spa_eng", "es-en", "test")
    assert len((out / "test.hyp.en").read_text(encoding="utf-8").splitlines()) == 20
    best = json.loads((out / "best_bleu.weights.h5.json").read_text())
    assert results["best_validation"] == best and best["sentences"] == 12

    # The model after its single epoch is the one validation BLEU scored: evaluate it the same way.
    valid = load_tatoeba("valid", data_dir=data_root)
    (out / "valid.es").write_text("".join(s + "\n" for s in valid.sources[:12]), encoding="utf-8")
    (out / "valid.en").write_text("".join(t + "\n" for t in valid.targets[:12]), encoding="utf-8")
    evaluate = subprocess.run(
        [sys.executable, "-m", "keras_transformer.cli", "evaluate", "--model-dir", str(out), "--beam-size", "1",
         "--target-lang", "en", "--source", str(out / "valid.es"), "--reference", str(out / "valid.en"),
         "--output", str(out / "valid.hyp.en")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    hypotheses = (out / "valid.hyp.en").read_text(encoding="utf-8").splitlines()
    assert hypotheses == (out / "best_bleu.hyp.txt").read_text(encoding="utf-8").splitlines() and any(hypotheses)
    bleu, line = _bleu_line(evaluate.stdout)
    assert bleu == round(best["val_bleu"], 2) and best["bleu_signature"] in line
    assert f"chrF = {best['val_chrf']:.2f}" in evaluate.stdout


def test_train_stops_early_on_validation_bleu_and_a_rerun_trains_nothing(tmp_path, capsys, multi30k_dir):
    out = tmp_path / "m"
    command = ["train", "--model-dir", str(out), "--data-dir", str(multi30k_dir.parent), "--preset", "tiny",
               "--vocab-size", "300", "--limit-train", "400", "--limit-test", "8", "--epochs", "3",
               "--precision", "float32", "--no-jit-compile", "--valid-bleu-every", "2", "--valid-bleu-sentences", "8",
               "--early-stopping-patience", "2"]
    assert main(command) == 0
    stdout = capsys.readouterr().out
    history = json.loads((out / "early_stopping.json").read_text())["history"]
    values = [r["value"] for r in history]
    steps = [r["step"] for r in history]
    # Independently: the first evaluation that is the 2nd in a row not beating the best so far ends training.
    best, since, stop = float("-inf"), 0, None
    for i, value in enumerate(values):
        best, since = (value, 0) if value > best else (best, since + 1)
        if since == 2:
            stop = i
            break
    assert stop == len(values) - 1 and steps == [2 * (i + 1) for i in range(len(values))]
    state = json.loads((out / "checkpoints" / "state.json").read_text())
    assert state["step"] == steps[-1]
    assert f"stopping at step {steps[-1]}" in stdout
    first_best = steps[values.index(max(values))]
    assert json.loads((out / "best_bleu.weights.h5.json").read_text())["step"] == first_best

    assert main(command) == 0
    stdout = capsys.readouterr().out
    assert f"this run stopped at step {steps[-1]}" in stdout and "validation at step" not in stdout
    assert f"best validation BLEU {max(values):.2f}" in stdout and f"at step {first_best}:" in stdout
    assert json.loads((out / "checkpoints" / "state.json").read_text())["step"] == steps[-1]
