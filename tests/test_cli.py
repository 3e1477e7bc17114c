"""The command line: bad input and the main job end to end on a slice of real Multi30k."""

import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys

import pytest

from keras_transformer.cli import main
from keras_transformer.decoding.scoring import decode_lines
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
    assert decode_lines(text.encode(), "t") == ["one\u2028still one", "two\x0cstill two", "three"]
    assert decode_lines(b"a\n\nb\n", "t") == ["a", "", "b"]
    assert decode_lines(b"", "t") == []


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
def test_run_end_to_end_on_a_slice(tmp_path, multi30k_dir, monkeypatch, capsys):
    """`run` trains, scores, exports and translates; its model and export then work in fresh processes.

    `run` itself runs in this process (`--precision float32`, so no mixed policy outlives it): the
    fresh processes below are the ones that load what it saved.
    """
    out = tmp_path / "run"
    monkeypatch.setenv("KERAS_TRANSFORMER_DATA", str(multi30k_dir.parent))  # for `run` here and the processes below
    command = [
        "run", "--preset", "tiny", "--vocab-size", "300", "--precision", "float32",
        "--limit-train", "1500", "--limit-test", "20", "--epochs", "1", "--beam-size", "2", "--mbr-candidates", "2",
        "--output-dir", str(out), "--num-examples", "2",
    ]
    assert main(command) == 0
    stdout = capsys.readouterr().out
    assert "BLEU = " in stdout and "nrefs:1|case:mixed|eff:no|tok:13a" in stdout
    assert "(20 sentences) with beam search (beam 2, alpha 0.6), then MBR (chrf) over its 2 best" in stdout
    assert "its serving_default gives beam search's best hypothesis; MBR (chrf over the 2 best)" in stdout
    assert stdout.count("  EN:  ") == 2
    results = json.loads((out / "results.json").read_text())
    assert 0.0 <= results["bleu"] <= 100.0
    assert (results["beam_size"], results["mbr_candidates"], results["mbr_metric"]) == (2, 2, "chrf")
    export = pathlib.Path(results["saved_model"])
    assert (export / "saved_model.pb").is_file()
    assert len((out / "test2016.hyp.de").read_text(encoding="utf-8").splitlines()) == 20
    record = json.loads((out / "model.keras.json").read_text())
    state = json.loads((out / "checkpoints" / "state.json").read_text())
    assert record["weights"] == "checkpoint" and record["checkpoints"] == [state["latest"]]
    assert (record["epoch"], record["epochs"], record["saved_by"]) == (1, 1, "run")
    assert f"saved {out / 'model.keras'}: the weights of checkpoint {state['latest']}" in stdout
    # The closing lines: the scores, where everything is, how long it took; epochs numbered as the console does.
    assert f"done: multi30k test2016 BLEU {results['bleu']:.2f}, {results['bleu_lc_tok']:.2f} lowercased" in stdout
    assert f"  results:     {out / 'results.json'}" in stdout and f"  SavedModel:  {export}" in stdout
    assert "the whole command took " in stdout.splitlines()[-1]
    assert state["epoch"] == 1 and state["epoch_complete"]

    # evaluate loads the trained model in a fresh process (the Keras classes must register), and translate
    # loads the export in another, the two at once. (`export` from a model folder: test_sampled_translation_...
    # and test_the_repetition_guard_... below.)
    _write_slice(multi30k_dir, out, 5)
    too_long = " ".join(["dog"] * 400)  # more pieces than the tiny preset's max_length
    sentences = ["A man is riding a bike.", too_long, "Two dogs play in the snow.",
                 "\tA man\u00a0is  riding a\u3000bike. ", "你好世界", " 😀\u3000👍"]
    cli = [sys.executable, "-m", "keras_transformer.cli"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        jobs = [
            pool.submit(subprocess.run, [*cli, "evaluate", "--model-dir", str(out), "--beam-size", "2",
                                         "--length-penalty", "1.0", "--source", str(out / "test.en"),
                                         "--reference", str(out / "test.de")],
                        capture_output=True, text=True, timeout=300),
            pool.submit(subprocess.run, [*cli, "translate", "--saved-model", str(export)],
                        input="\n".join(sentences) + "\n", capture_output=True, text=True, timeout=300),
        ]
        evaluate, translate = (job.result() for job in jobs)
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    assert "BLEU = " in evaluate.stdout and "sentences = 5" in evaluate.stdout
    assert "beam search (beam 2, alpha 1.0)" in evaluate.stdout
    assert f"weights: {out / 'model.keras'}: the weights of checkpoint {state['latest']}" in evaluate.stdout

    assert translate.returncode == 0, translate.stderr[-3000:]
    lines = translate.stdout.splitlines()
    assert len(lines) == len(sentences)
    assert lines[3] == lines[0]  # whitespace variants translate like the plain sentence (ids: tests/decoding)
    assert lines[4:] == ["你好世界", "😀 👍"]  # nothing the vocabulary knows: copied through
    assert "warning: 1 of 6 sentences are longer than the model's max_length" in translate.stderr
    assert "(lines 2)" in translate.stderr
    assert f"weights: {export / 'variables'}" in translate.stderr

    # Re-running the finished run trains nothing, says so, and translates and exports again.
    checkpoints_before = sorted(os.listdir(out / "checkpoints"))
    assert main(command) == 0
    again = capsys.readouterr().out
    assert (f"{out} already holds a finished run (epoch 1 of 1, step {state['step']}); re-running trains nothing: "
            "it translates the test split and exports again") in again
    assert "trained nothing (the run was finished)" in again and "BLEU = " in again
    assert sorted(os.listdir(out / "checkpoints")) == checkpoints_before
    assert json.loads((out / "checkpoints" / "state.json").read_text()) == state
    assert json.loads((out / "results.json").read_text())["train_minutes"] == results["train_minutes"]


def test_tfds_without_network_says_how_to_use_local_files(tmp_path, capsys, monkeypatch):
    import keras_transformer.data.tfds as data_tfds

    monkeypatch.setattr(data_tfds, "_network_available", lambda *a, **k: False)
    status = main(
        ["train", "--model-dir", str(tmp_path / "m"), "--tfds", "wmt14_translate/de-en",
         "--tfds-data-dir", str(tmp_path / "tfds")]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert "wmt14_translate/de-en is not prepared" in err and "network is unreachable" in err
    assert "--train-source/--train-target" in err


def _options(parser, path=()):
    """(command path, action) of every option of every (sub)command."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, path + (name,))
        elif action.option_strings and not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield path, action


def test_every_option_says_its_default():
    from keras_transformer.cli import build_parser

    options = list(_options(build_parser()))
    assert len(options) > 100  # every command's options were walked
    missing, wrong_value = [], []
    for path, action in options:
        name = f"{' '.join(path)} {action.option_strings[0]}"
        text = (action.help or "").lower()
        if action.required:
            if "required" not in text:
                missing.append(name)
            continue
        if "default" not in text:
            missing.append(name)
        default = action.default
        if isinstance(default, (int, float, str)) and not isinstance(default, bool) and default is not None:
            shown = {str(default).lower(), f"{default:g}" if isinstance(default, float) else str(default).lower()}
            if not any(s in text for s in shown):
                wrong_value.append(f"{name} (default {default!r})")
    assert not missing, f"options without their default in the help: {missing}"
    assert not wrong_value, f"help does not show the default value: {wrong_value}"


def test_version_is_the_package_version(capsys):
    import tomllib

    import keras_transformer

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"keras-transformer {keras_transformer.__version__}"
    # pyproject.toml takes the distribution's version from the same attribute.
    project = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["dynamic"] == ["version"] and "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "keras_transformer.__version__"}
    assert keras_transformer.__version__.count(".") == 2 and keras_transformer.__version__[0].isdigit()


class _Terminal(__import__("io").StringIO):
    """A stderr that says it is a terminal (tqdm draws its bar only on one)."""

    def isatty(self):
        return True


def test_evaluate_says_which_weights_and_shows_a_progress_bar(tmp_path, monkeypatch, capsys):
    import tensorflow as tf

    import keras_transformer.decoding.load as load

    folder = tmp_path / "m"
    folder.mkdir()
    lines = ["A dog runs.", "Two men.", "A cat sleeps."]
    (tmp_path / "src.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "ref.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    opened = load.OpenedTranslator(
        "model_dir", lambda batch: {"translations": batch, "truncated": tf.zeros_like(batch, tf.bool)},
        "greedy search", {}, None, weights=f"{folder / 'model.keras'}: the weights of checkpoint ckpt-00000009.weights.h5",
    )
    monkeypatch.setattr(load, "open_translator", lambda *args, **kwargs: opened)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    status = main(["evaluate", "--model-dir", str(folder), "--source", str(tmp_path / "src.en"),
                   "--reference", str(tmp_path / "ref.de"), "--batch-size", "2", "--workers", "1"])
    assert status == 0
    out = capsys.readouterr().out
    assert f"weights: {folder / 'model.keras'}: the weights of checkpoint ckpt-00000009.weights.h5" in out
    assert "BLEU = 100.00" in out
    bar = terminal.getvalue()
    assert "translating: 100%" in bar and "3/3" in bar and "sent" in bar


def test_evaluate_scores_in_the_target_language_the_folder_records(tmp_path, monkeypatch, capsys):
    """Without --target-lang, the lowercased tokenized BLEU uses the Moses rules of the language the model folder
    was trained into (its config.json), as `run` does; --target-lang still overrides it."""
    import tensorflow as tf

    import keras_transformer.decoding.load as load
    from keras_transformer.config import get_preset
    from keras_transformer.run_folder import RunFolder, RunRecord

    folder = RunFolder(tmp_path / "m")
    folder.path.mkdir()
    for name in (folder.MODEL, folder.VOCABULARY):  # open_translator is replaced: the files need only exist
        (folder.path / name).write_bytes(b"")
    folder.write_record(RunRecord("tiny", get_preset("tiny"), None, source_lang="en", target_lang="de"))
    (tmp_path / "src.en").write_text("A dog.\n", encoding="utf-8")
    (tmp_path / "ref.de").write_text("Ein Hund.\n", encoding="utf-8")
    opened = load.OpenedTranslator("model_dir", lambda batch: {"translations": batch,
                                                               "truncated": tf.zeros_like(batch, tf.bool)},
                                   "greedy search", {}, None, weights="model.keras")
    monkeypatch.setattr(load, "open_translator", lambda *args, **kwargs: opened)
    command = ["evaluate", "--model-dir", str(folder.path), "--source", str(tmp_path / "src.en"),
               "--reference", str(tmp_path / "ref.de")]
    assert main(command) == 0
    assert "moses-lc-norm-tok:de+" in capsys.readouterr().out
    assert main(command + ["--target-lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "moses-lc-norm-tok:en+" in out and "moses-lc-norm-tok:de" not in out
    # A folder trained before the record named the pair: its results.json does.
    folder.write_record(RunRecord("tiny", get_preset("tiny"), None))
    folder.write_results({"dataset": "multi30k", "language_pair": "en-de"})
    assert main(command) == 0
    assert "moses-lc-norm-tok:de+" in capsys.readouterr().out
    (folder.path / folder.RESULTS).unlink()  # neither names it: the default language
    assert main(command) == 0
    assert "moses-lc-norm-tok:en+" in capsys.readouterr().out


def test_rerun_says_what_it_does(tmp_path):
    from keras_transformer.run_folder import RunFolder, atomic_write_text
    from keras_transformer.runner.training import describe_rerun
    from keras_transformer.settings import TrainingSettings

    out = tmp_path / "run"
    folder = RunFolder(out)
    lines = []
    run = TrainingSettings(epochs=20, max_train_minutes=6.0)
    then = "translates the test split and exports again"
    assert describe_rerun(folder, run, then, lines.append) is False  # a new folder: nothing said
    assert lines == []
    (out / "checkpoints").mkdir(parents=True)

    def state(epoch, batch, step):
        name = f"ckpt-{step:08d}.weights.h5"
        (out / "checkpoints" / name).write_bytes(b"")
        atomic_write_text(out / "checkpoints" / "state.json", json.dumps(
            {"epoch": epoch, "batch": batch, "batches": step, "step": step, "latest": name}))

    state(1, 180, 470)  # stopped by the 6-minute budget in epoch 2
    assert describe_rerun(folder, run, then, lines.append) is False
    assert lines.pop().strip() == (
        f"{out} holds a run stopped at batch 180 of epoch 2 of 20 (step 470); re-running continues training from "
        "there for at most 6 more minutes, then translates the test split and exports again; use a new run folder "
        "to start over"
    )
    state(20, 0, 5800)
    assert describe_rerun(folder, run, then, lines.append) is True
    assert lines.pop().strip() == (
        f"{out} already holds a finished run (epoch 20 of 20, step 5800); re-running trains nothing: it translates "
        "the test split and exports again with the trained model; use a new run folder to train again"
    )
    train = TrainingSettings(epochs=30)
    assert describe_rerun(folder, train, "saves model.keras again", lines.append) is False  # more epochs: continues
    assert lines.pop().strip() == (
        f"{out} holds a run stopped after epoch 20 of 30 (step 5800); re-running continues training from there, "
        "then saves model.keras again; use a new run folder to start over"
    )


# -- score and --n-best on the session's tiny fixed-seed model -----------------------------


def _shared():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decoding", "_shared.py")
    spec = importlib.util.spec_from_file_location("_keras_transformer_shared_loader", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load()


SCORE_SOURCES = ["A dog runs in the park.", "", "Two men are playing soccer near a tree.", "A woman."]
SCORE_TARGETS = ["Ein Hund rennt im Park.", "Ein Hund.", "Zwei Männer spielen Fußball.", ""]


@pytest.fixture(scope="module")
def model_folders(multi30k_dir, tmp_path_factory):
    """(trained-model folder as `train` writes it, the session's SavedModel version 1, model, tokenizer, config)."""
    import shutil

    from keras_transformer.config import get_preset

    shared = _shared()
    spm = shared.spm_path(multi30k_dir, tmp_path_factory)
    model, tokenizer = shared.model_and_tokenizer(spm)
    _, paths = shared.exported(model, tokenizer, tmp_path_factory)
    folder = tmp_path_factory.mktemp("cli_model")
    model.save(folder / "model.keras")
    shutil.copy(spm, folder / "spm.model")
    config = get_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=shared.MODEL_MAX_LENGTH)
    record = {"preset": "tiny", "config": config.to_dict(), "vocab_sha256": tokenizer.vocab_sha256}
    (folder / "config.json").write_text(json.dumps(record), encoding="utf-8")
    files = tmp_path_factory.mktemp("cli_text")
    (files / "src.en").write_text("".join(s + "\n" for s in SCORE_SOURCES), encoding="utf-8")
    (files / "tgt.de").write_text("".join(t + "\n" for t in SCORE_TARGETS), encoding="utf-8")
    # evaluate refuses empty lines: its test set is the non-empty sources.
    (files / "test.en").write_text("".join(s + "\n" for s in SCORE_SOURCES if s), encoding="utf-8")
    (files / "test.de").write_text("Ein Hund rennt im Park.\nZwei Männer spielen Fußball.\nEine Frau.\n",
                                   encoding="utf-8")
    return folder, paths[1], model, tokenizer, config, files


def test_several_model_folders_translate_as_an_ensemble(model_folders, tmp_path, capsys):
    folder, export, _, _, _, files = model_folders
    one, two = tmp_path / "one.de", tmp_path / "two.de"
    assert main(["translate", "--model", str(folder), "--input", str(files / "src.en"), "--output", str(one),
                 "--beam-size", "2", "--workers", "1"]) == 0
    assert main(["translate", "--model", str(folder), str(folder), "--input", str(files / "src.en"),
                 "--output", str(two), "--beam-size", "2", "--workers", "1"]) == 0
    assert "weights: an ensemble of 2 models: " in capsys.readouterr().err
    assert two.read_text(encoding="utf-8") == one.read_text(encoding="utf-8")  # two copies: the model itself
    assert main(["translate", "--model", str(export), str(folder), "--input", str(files / "src.en")]) == 2
    assert "an ensemble is made of trained model folders" in capsys.readouterr().err


def test_the_repetition_guard_from_the_command_line(model_folders, tmp_path, capsys):
    folder, export, _, _, _, files = model_folders
    out = tmp_path / "guarded.de"
    assert main(["translate", "--model", str(folder), "--input", str(files / "src.en"), "--output", str(out),
                 "--no-repeat-ngram-size", "2", "--repetition-penalty", "1.2", "--workers", "1"]) == 0
    for line in out.read_text(encoding="utf-8").splitlines():
        words = line.split()
        bigrams = list(zip(words, words[1:]))
        assert len(bigrams) <= len(set(bigrams)) + 1  # pieces, not words, are guarded: a word pair may recur once
    assert main(["translate", "--model", str(export), "--input", str(files / "src.en"),
                 "--no-repeat-ngram-size", "3"]) == 2
    assert "exported with no_repeat_ngram_size 0" in capsys.readouterr().err
    assert main(["export", "--model-dir", str(folder), "--export-dir", str(tmp_path / "export"),
                 "--no-repeat-ngram-size", "3", "--beam-size", "2", "--version", "3"]) == 0
    assert os.listdir(tmp_path / "export") == ["3"]  # --version names the servable's folder
    record = json.loads((tmp_path / "export" / "3" / "assets.extra" / "export_config.json").read_text())
    assert record["decoding"]["no_repeat_ngram_size"] == 3  # recorded like the beam size
    with pytest.raises(SystemExit):
        main(["translate", "--model", str(folder), "--no-repeat-ngram-size", "-1"])


def test_score_command_model_folder_and_saved_model(model_folders, capsys):
    import numpy as np
    import tensorflow as tf

    from keras_transformer.decoding import Translator
    from keras_transformer.decoding.scoring import parse_score_line

    folder, saved_model, model, tokenizer, config, files = model_folders
    args = ["score", "--source", str(files / "src.en"), "--target", str(files / "tgt.de")]
    assert main(args + ["--model", str(folder), "--per-token", "--batch-size", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(SCORE_SOURCES)
    parsed = [parse_score_line(line) for line in lines]
    reference = Translator(model, tokenizer, max_length=config.max_length, length_penalty=config.length_penalty)
    expected = reference.score(tf.constant(SCORE_SOURCES), tf.constant(SCORE_TARGETS))
    np.testing.assert_allclose([p.score for p in parsed], expected["score"].numpy(), atol=2e-6)
    np.testing.assert_allclose([p.log_prob for p in parsed], expected["log_prob"].numpy(), atol=2e-6)
    assert [p.num_tokens for p in parsed] == expected["num_tokens"].numpy().tolist()
    assert parsed[3].pieces == ("</s>",)  # the empty target is EOS alone
    # The SavedModel (exported with alpha 0.6, max_length 20) gives the same lines for these short pairs.
    out = tmp = folder.parent / "scores.tsv"
    assert main(args + ["--model", saved_model, "--output", str(out)]) == 0
    saved = [parse_score_line(line) for line in tmp.read_text(encoding="utf-8").splitlines()]
    np.testing.assert_allclose([p.score for p in saved], [p.score for p in parsed], atol=2e-5)
    assert [p.num_tokens for p in saved] == [p.num_tokens for p in parsed]
    assert all(len(line.split("\t")) == 3 for line in tmp.read_text(encoding="utf-8").splitlines())


def test_score_command_bad_input(model_folders, tmp_path, capsys):
    folder, saved_model, *_, files = model_folders
    short = tmp_path / "short.de"
    short.write_text("Ein Hund.\n", encoding="utf-8")
    base = ["score", "--model", str(folder), "--source", str(files / "src.en")]
    assert main(base + ["--target", str(short)]) == 2
    err = capsys.readouterr().err
    assert f"{files / 'src.en'} has 4 lines but {short} has 1 lines" in err
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"Ein Hund.\n\nZwei \xc3(\nx\n")
    assert main(base + ["--target", str(bad)]) == 2
    assert f"{bad}, line 3: not UTF-8 (invalid byte at column 6)" in capsys.readouterr().err
    assert main(base + ["--target", str(tmp_path / "missing.de")]) == 2
    assert str(tmp_path / "missing.de") in capsys.readouterr().err
    assert main(["score", "--model", str(tmp_path), "--source", "a", "--target", "b"]) == 2
    assert f"no model at {tmp_path}" in capsys.readouterr().err
    assert main(["score", "--model", saved_model, "--source", str(files / "src.en"), "--target",
                 str(files / "tgt.de"), "--length-penalty", "1.0"]) == 2
    assert "exported with alpha 0.6" in capsys.readouterr().err


def _n_best_checks(text, sources, n, best):
    from keras_transformer.decoding.corpus import parse_n_best_line

    parsed = [parse_n_best_line(line) for line in text.splitlines()]
    for index, source in enumerate(sources):
        entries = [(h, s) for i, h, s in parsed if i == index]
        assert len(entries) == (n if source else 1)
        assert entries[0][0] == best[index]
        assert [s for _, s in entries] == sorted((s for _, s in entries), reverse=True)
    assert [i for i, _, _ in parsed] == sorted(i for i, _, _ in parsed)  # grouped by sentence, in order
    return parsed


@pytest.mark.parametrize("kind", ["model_dir", "saved_model"])
def test_translate_and_evaluate_n_best(model_folders, kind, tmp_path, capsys):
    folder, saved_model, *_, files = model_folders
    model = str(folder) if kind == "model_dir" else saved_model
    beam = ["--beam-size", "2"] if kind == "model_dir" else []
    base = ["translate", "--model", model, "--input", str(files / "src.en")] + beam
    assert main(base) == 0
    best = capsys.readouterr().out.splitlines()
    assert main(base + ["--n-best", "2"]) == 0
    _n_best_checks(capsys.readouterr().out, SCORE_SOURCES, 2, best)
    assert main(base + ["--n-best", "3"]) == 2
    assert "--n-best 3 exceeds the beam size 2" in capsys.readouterr().err
    # evaluate: the list goes to --output, BLEU scores the best hypotheses (= translate's output).
    out = tmp_path / "n_best.txt"
    evaluate = ["evaluate", "--model-dir", model, "--source", str(files / "test.en"), "--reference",
                str(files / "test.de")] + beam
    test_sources = [s for s in SCORE_SOURCES if s]
    test_best = [b for s, b in zip(SCORE_SOURCES, best) if s]
    assert main(evaluate + ["--output", str(tmp_path / "best.txt")]) == 0
    plain = capsys.readouterr().out
    assert main(evaluate + ["--n-best", "2", "--output", str(out)]) == 0
    with_n_best = capsys.readouterr().out
    _n_best_checks(out.read_text(encoding="utf-8"), test_sources, 2, test_best)
    bleu = [line for line in plain.splitlines() if line.startswith("BLEU")]
    assert bleu and bleu == [line for line in with_n_best.splitlines() if line.startswith("BLEU")]
    assert (tmp_path / "best.txt").read_text(encoding="utf-8").splitlines() == test_best


def test_mbr_from_the_command_line(model_folders, tmp_path, capsys):
    """--mbr-candidates N translates with the MBR choice among the lines --n-best N lists; refused past the beam."""
    from keras_transformer.decoding.corpus import parse_n_best_line
    from keras_transformer.decoding.mbr import mbr_translations

    folder, saved_model, *_, files = model_folders
    listed, chosen = tmp_path / "n_best.txt", tmp_path / "mbr.de"
    common = ["translate", "--input", str(files / "src.en"), "--workers", "1"]
    for model, extra, n in ((str(folder), ["--beam-size", "3"], 3), (saved_model, [], 2)):  # the export: beam 2
        assert main(common + ["--model", model, "--output", str(listed), "--n-best", str(n)] + extra) == 0
        assert main(common + ["--model", model, "--output", str(chosen), "--mbr-candidates", str(n)] + extra) == 0
        assert f"then MBR (chrf) over its {n} best" in capsys.readouterr().err
        parsed = [parse_n_best_line(line) for line in listed.read_text(encoding="utf-8").splitlines()]
        lists = [[(h, score) for i, h, score in parsed if i == index] for index in range(len(SCORE_SOURCES))]
        assert chosen.read_text(encoding="utf-8").splitlines() == mbr_translations(lists, n)
    assert main(common + ["--model", saved_model, "--mbr-candidates", "3"]) == 2
    assert "--mbr-candidates 3 exceeds the beam size 2" in capsys.readouterr().err
    assert main(common + ["--model", str(folder), "--n-best", "2", "--mbr-candidates", "2"]) == 2
    assert "excludes --mbr-candidates" in capsys.readouterr().err
    assert main(common + ["--model", str(folder), "--beam-size", "2", "--mbr-candidates", "4"]) == 2
    assert "--mbr-candidates 4 exceeds --beam-size 2" in capsys.readouterr().err
    assert main(common + ["--model", saved_model, "--signature", "greedy", "--mbr-candidates", "2"]) == 2
    assert "--mbr-candidates uses the SavedModel's n_best signature: drop --signature" in capsys.readouterr().err


def test_n_best_flag_is_checked(model_folders, capsys):
    folder, saved_model, *_, files = model_folders
    with pytest.raises(SystemExit):
        main(["translate", "--model", str(folder), "--n-best", "0"])
    assert "--n-best" in capsys.readouterr().err
    args = ["translate", "--model", saved_model, "--input", str(files / "src.en"), "--n-best", "1"]
    assert main(args + ["--beam-size", "1"]) == 2
    assert "drop --beam-size 1" in capsys.readouterr().err
    assert main(args + ["--signature", "greedy"]) == 2
    assert "drop --signature" in capsys.readouterr().err


def test_every_command_describes_itself_under_its_usage_line(capsys):
    import argparse

    from keras_transformer.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert all(len(command.description or "") > 40 for command in commands.values())
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    usage, rest = capsys.readouterr().out.split("\n\n", 1)
    assert rest.startswith("Translates one sentence per input line")
    for signature in ("serving_default", "beam_search", "greedy", "n_best", "sample", "score", "token_ids"):
        assert signature in rest  # --signature names all the export's signatures


def test_help_documents_n_best_and_saved_model_settings(capsys):
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "index ||| hypothesis ||| score" in text and "0-based" in text
    assert "A SavedModel keeps the beam size and alpha it was exported with" in text
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "score<TAB>log_prob<TAB>num_tokens" in text and "--per-token" in text


# -- sampling (--seed, --sampling-*) on the same tiny model folder -----------------------------


@pytest.fixture(scope="module")
def model_folder(model_folders):
    """The trained-model folder of :func:`model_folders`."""
    return model_folders[0]


@pytest.mark.parametrize(
    "flag, value", [("--sampling-topk", "-1"), ("--sampling-topp", "0"), ("--sampling-topp", "1.5"),
                    ("--sampling-temperature", "0"), ("--sampling-temperature", "inf"), ("--seed", "x")],
)
def test_sampling_flags_are_checked_before_any_work(tmp_path, capsys, flag, value):
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", "--model", str(tmp_path), flag, value])
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err


def test_sampling_excludes_beam_search_flags(model_folder, capsys):
    assert main(["translate", "--model", str(model_folder), "--seed", "1", "--beam-size", "4"]) == 2
    assert "exclude --beam-size and --length-penalty" in capsys.readouterr().err
    assert main(["evaluate", "--model-dir", str(model_folder), "--source", "s", "--reference", "r",
                 "--sampling-topk", "5", "--length-penalty", "1.0"]) == 2
    assert "exclude --beam-size and --length-penalty" in capsys.readouterr().err


def test_sampled_translation_from_a_model_folder_and_its_export(model_folder, multi30k_dir, tmp_path, capsys):
    """--seed/--sampling-* sample reproducibly; the exported `sample` signature translates identically."""
    import tensorflow as tf

    from keras_transformer.decoding import Translator
    from keras_transformer.decoding.load import batch_seed
    from keras_transformer.run_folder import RunFolder

    _write_slice(multi30k_dir, tmp_path, 6)
    source = tmp_path / "test.en"
    lines = source.read_text(encoding="utf-8").splitlines()

    def translate(model, *flags):
        out = tmp_path / "out.de"
        status = main(["translate", "--model", str(model), "--input", str(source), "--output", str(out), *flags])
        assert status == 0, capsys.readouterr().err
        return out.read_text(encoding="utf-8").splitlines()

    first = translate(model_folder, "--seed", "3", "--sampling-topk", "5")
    assert "sampling (top-k 5, top-p 1.0, temperature 1.0, seed 3)" in capsys.readouterr().err
    assert len(first) == len(lines)
    # The Python API, independently of the CLI: one batch (6 lines < --batch-size), in length order,
    # seeded with batch_seed(3, batch).
    model, tokenizer, config = RunFolder(model_folder).load()
    translator = Translator(model, tokenizer, max_length=config.max_length,
                            extra_decode_length=config.extra_decode_length, sampling_topk=5)
    batch = tf.constant(sorted(lines, key=len))
    out = translator.translate_sampled(batch, batch_seed(3, batch))["translations"].numpy()
    by_source = {s: t.decode("utf-8") for s, t in zip(batch.numpy().astype(str), out)}
    assert first == [by_source[s] for s in lines]

    export = tmp_path / "export"
    assert main(["export", "--model-dir", str(model_folder), "--export-dir", str(export), "--sampling-topk", "5"]) == 0
    assert "signature sample: top-k 5, top-p 1.0, temperature 1.0" in capsys.readouterr().out
    assert translate(export / "1", "--seed", "3") == first
    assert "SavedModel sampling (top-k 5" in capsys.readouterr().err
    assert main(["translate", "--model", str(export / "1"), "--input", str(source), "--seed", "3",
                 "--sampling-topk", "7"]) == 2
    assert "samples with top-k 5 (exported), not 7" in capsys.readouterr().err
    # A SavedModel without the sample signature (a stand-in: exporting is slow) says how to get one.
    module = tf.Module()
    module.f = tf.function(lambda x: {"translations": x}, input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "plain"), signatures={"serving_default": module.f})
    assert main(["translate", "--model", str(tmp_path / "plain"), "--input", str(source), "--seed", "3"]) == 2
    err = capsys.readouterr().err
    assert "exported without the `sample` signature (signatures: serving_default)" in err
    assert "re-export it with --sampling (and --sampling-topk" in err

    assert main(["evaluate", "--model-dir", str(model_folder), "--source", str(source), "--reference",
                 str(tmp_path / "test.de"), "--seed", "3", "--sampling-topk", "5"]) == 0
    stdout = capsys.readouterr().out
    assert "with sampling (top-k 5, top-p 1.0, temperature 1.0, seed 3)" in stdout and "BLEU = " in stdout


def test_sampling_from_an_export_without_the_sample_signature_fails_before_loading(tmp_path, capsys):
    export = tmp_path / "1"
    (export / "assets.extra").mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"")  # never loaded: export_config.json says there is no sample signature
    record = {"sampling": None, "signatures": {"serving_default": {}, "greedy": {}}}
    (export / "assets.extra" / "export_config.json").write_text(json.dumps(record), encoding="utf-8")
    source = tmp_path / "in.en"
    source.write_text("A dog.\n", encoding="utf-8")
    assert main(["translate", "--model", str(export), "--input", str(source), "--sampling-topp", "0.9"]) == 2
    err = capsys.readouterr().err
    assert f"the SavedModel {export} was exported without the `sample` signature (signatures: greedy, " in err


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
    # In this process (--precision float32: auto could leave a bfloat16 policy set for later tests).
    train = ["train", "--prepared-dir", prepared, "--model-dir", model_dir, "--preset", "tiny", "--batch-tokens", 512,
             "--precision", "float32"]
    assert main(list(map(str, train + ["--epochs", 1]))) == 0
    out = capsys.readouterr().out
    assert "reusing the prepared data" in out
    assert "worker 1 of 1 reads 2 of 2 shards (batches of <= 512 tokens per replica)" in out
    assert (model_dir / "spm.model").read_bytes() == (prepared / "spm.model").read_bytes()
    steps = int(out.split("streaming ")[1].split(" steps per epoch")[0])
    state = json.loads((model_dir / "checkpoints" / "state.json").read_text())
    assert (state["epoch"], state["batch"], state["step"]) == (1, 0, steps)

    # An edited source: prepared again (with the model's vocabulary), and training continues for epoch 2.
    en[0] = "A zebra is reading a newspaper."
    (data / "train.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    assert main(list(map(str, train + data_flags + ["--epochs", 2]))) == 0
    out = capsys.readouterr().out
    assert f"preparing {prepared} again: the train source changed (size" in out and "using the given vocabulary" in out
    assert json.loads((prepared / "manifest.json").read_text())["vocabulary"]["sha256"] == manifest["vocabulary"][
        "sha256"]
    state = json.loads((model_dir / "checkpoints" / "state.json").read_text())
    assert state["epoch"] == 2 and state["step"] > steps


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
def test_run_spanish_english_on_a_slice_and_validation_bleu_equals_evaluate(tmp_path, data_root, tatoeba_dir,
                                                                           monkeypatch, capsys):
    """`run --dataset tatoeba_spa_eng` trains es->en on a slice, scores validation BLEU each epoch and the test set;
    `evaluate` of the saved model on the same validation sentences gives the callback's score and translations.
    (Both run in this process, `run` in float32; `test_run_end_to_end_on_a_slice` loads a run in fresh processes.)"""
    from keras_transformer.data.tatoeba import load_tatoeba

    out = tmp_path / "run"
    monkeypatch.setenv("KERAS_TRANSFORMER_DATA", str(data_root))
    command = [
        "run", "--dataset", "tatoeba_spa_eng", "--preset", "tiny", "--precision", "float32",
        "--vocab-size", "300", "--limit-train", "1200", "--limit-test", "20", "--epochs", "1", "--beam-size", "1",
        "--valid-bleu-sentences", "12", "--output-dir", str(out), "--num-examples", "1",
        # A small learning rate keeps this tiny model near its start, whose translations are not empty.
        "--learning-rate-scale", "0.02",
    ]
    assert main(command) == 0
    stdout = capsys.readouterr().out
    assert "es -> en" in stdout and "translating tatoeba_spa_eng test (20 sentences)" in stdout
    assert "validation BLEU at each epoch end: greedy search of 12 sentences, sacreBLEU tokenizer 13a" in stdout
    assert "  ES:  " in stdout and "  EN:  " in stdout
    results = json.loads((out / "results.json").read_text())
    assert (results["dataset"], results["language_pair"], results["test_split"]) == ("tatoeba_spa_eng", "es-en", "test")
    assert len((out / "test.hyp.en").read_text(encoding="utf-8").splitlines()) == 20
    best = json.loads((out / "best_bleu.weights.h5.json").read_text())
    assert results["best_validation"] == best and best["sentences"] == 12

    # The model after its single epoch is the one validation BLEU scored: evaluate it the same way.
    valid = load_tatoeba("valid", data_dir=data_root)
    (out / "valid.es").write_text("".join(s + "\n" for s in valid.sources[:12]), encoding="utf-8")
    (out / "valid.en").write_text("".join(t + "\n" for t in valid.targets[:12]), encoding="utf-8")
    assert main(["evaluate", "--model-dir", str(out), "--beam-size", "1", "--target-lang", "en",
                 "--source", str(out / "valid.es"), "--reference", str(out / "valid.en"),
                 "--output", str(out / "valid.hyp.en")]) == 0
    evaluate = capsys.readouterr().out
    hypotheses = (out / "valid.hyp.en").read_text(encoding="utf-8").splitlines()
    assert hypotheses == (out / "best_bleu.hyp.txt").read_text(encoding="utf-8").splitlines() and any(hypotheses)
    bleu, line = _bleu_line(evaluate)
    assert bleu == round(best["val_bleu"], 2) and best["bleu_signature"] in line
    assert f"chrF = {best['val_chrf']:.2f}" in evaluate


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
