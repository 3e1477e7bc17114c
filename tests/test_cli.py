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


def _shared():
    import importlib.util

    path = pathlib.Path(__file__).resolve().parent / "decoding" / "_shared.py"
    spec = importlib.util.spec_from_file_location("_keras_transformer_shared_loader", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load()


@pytest.fixture(scope="module")
def model_folder(multi30k_dir, tmp_path_factory):
    """A trained-model folder (model.keras, spm.model, config.json) of the tests' tiny fixed-seed model."""
    import shutil

    from keras_transformer.config import get_preset

    shared = _shared()
    spm = shared.spm_path(multi30k_dir, tmp_path_factory)
    model, tokenizer = shared.model_and_tokenizer(spm)
    folder = tmp_path_factory.mktemp("model_folder")
    model.save(folder / "model.keras")
    shutil.copy(spm, folder / "spm.model")
    config = get_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=shared.MODEL_MAX_LENGTH)
    record = {"preset": "tiny", "config": config.to_dict(), "vocab_sha256": tokenizer.vocab_sha256}
    (folder / "config.json").write_text(json.dumps(record), encoding="utf-8")
    return folder


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
    from keras_transformer.decoding.load import batch_seed, load_model_dir

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
    model, tokenizer, config = load_model_dir(model_folder)
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
    assert "keras-transformer export --sampling" in err

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
