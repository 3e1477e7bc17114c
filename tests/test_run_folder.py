"""The run folder (every file of a run, the record, the one loader) and the run settings."""

import json

import numpy as np
import pytest

from keras_transformer.run_folder import RunFolder, RunRecord
from keras_transformer.settings import (
    DataSettings,
    DecodingSettings,
    RunError,
    RunSettings,
    TrainingSettings,
    ValidationSettings,
    render,
)
from keras_transformer.training.checkpoints import TrainingState


def test_model_record_says_which_weights_model_keras_holds(tmp_path):
    folder = RunFolder(tmp_path)

    class Saved:  # model.save writes a file, as a Keras model does
        def save(self, path):
            open(path, "wb").write(b"keras")

    names = [f"ckpt-{step:08d}.weights.h5" for step in (120, 140, 160)]
    state = TrainingState(epoch=3, batch=0, batches=160, step=160, latest=names[-1])
    record = folder.save_model(Saved(), [tmp_path / "checkpoints" / n for n in names], "run", state, epochs=20)
    assert (tmp_path / "model.keras").read_bytes() == b"keras"
    assert json.loads((tmp_path / "model.keras.json").read_text()) == record == {
        "weights": "average", "checkpoints": names, "saved_by": "run", "step": 160, "epoch": 3, "batch": 0,
        "epoch_complete": True, "epochs": 20,
    }
    assert folder.model_record() == record
    assert folder.describe_weights() == (
        f"{tmp_path / 'model.keras'}: the average of the last 3 checkpoints, ckpt-00000120.weights.h5 ... "
        "ckpt-00000160.weights.h5 (training stopped after epoch 3 of 20, step 160)"
    )
    # One checkpoint, stopped mid-epoch (a time budget), and a best.weights.h5 beside it.
    stopped = TrainingState(epoch=1, batch=37, batches=97, step=97, latest="ckpt-00000097.weights.h5")
    folder.save_model(Saved(), ["ckpt-00000097.weights.h5"], "train", stopped, epochs=20)
    (tmp_path / "best.weights.h5").write_bytes(b"")
    (tmp_path / "best.weights.h5.json").write_text(json.dumps({"val_loss": 3.25, "epoch": 0}))  # 0.1's record
    assert folder.describe_weights() == (
        f"{tmp_path / 'model.keras'}: the weights of checkpoint ckpt-00000097.weights.h5 (training stopped after "
        "batch 37 of epoch 2 of 20, step 97); best.weights.h5 holds other weights, the best validation loss's "
        "(val_loss 3.2500 after epoch 1)"
    )
    # When the best checkpoints are the saved one, it says so plainly.
    (tmp_path / "best.weights.h5.json").write_text(json.dumps(
        {"val_loss": 3.1, "epoch": 2, "epoch_numbering": "1-based", "step": 97}))
    (tmp_path / "best_bleu.weights.h5").write_bytes(b"")
    (tmp_path / "best_bleu.weights.h5.json").write_text(json.dumps({"val_bleu": 21.5, "step": 97, "epoch": 2}))
    assert folder.describe_weights().endswith(
        "step 97); these are also the best validation loss's (best.weights.h5) and the best validation BLEU's "
        "(best_bleu.weights.h5): the same weights")
    (tmp_path / "best_bleu.weights.h5.json").write_text(json.dumps({"val_bleu": 22.0, "step": 80, "epoch": 2}))
    assert folder.describe_weights().endswith(
        "the best validation loss's (best.weights.h5): the same weights; best_bleu.weights.h5 holds other weights, "
        "the best validation BLEU's (BLEU 22.00, step 80)")
    assert sorted(p.name for p in tmp_path.iterdir()) == [  # no temporary file left
        "best.weights.h5", "best.weights.h5.json", "best_bleu.weights.h5", "best_bleu.weights.h5.json", "model.keras",
        "model.keras.json"]


def test_a_model_saved_without_a_record_says_so(tmp_path):
    folder = RunFolder(tmp_path)
    assert folder.model_record() is None
    assert folder.describe_weights().startswith(f"{tmp_path / 'model.keras'} (no model.keras.json: saved before")


def _config():
    from keras_transformer.config import get_preset

    return get_preset("tiny", vocab_size=300)


def test_the_record_refuses_another_run_and_reads_old_layouts(tmp_path):
    folder = RunFolder(tmp_path / "run")
    record = RunRecord("tiny", _config(), "ab" * 32)
    folder.write_record(record)
    written = json.loads(folder.record_path.read_text())
    assert written["format"] == "keras_transformer.run/1" and written["preset"] == "tiny"
    assert written["written_by"].startswith("keras_transformer ")
    assert folder.read_record().same_run(record)
    folder.write_record(record)  # the same run again: fine
    with pytest.raises(RunError, match="holds another configuration, vocabulary or language pair"):
        folder.write_record(RunRecord("tiny", _config().replace(dropout_rate=0.3), "ab" * 32))
    # The language pair is part of the run where both records name it (older records do not).
    folder.write_record(RunRecord("tiny", _config(), "ab" * 32, source_lang="en", target_lang="de"))
    assert folder.read_record().target_lang == "de" and folder.read_record().source_lang == "en"
    with pytest.raises(RunError, match="holds another configuration, vocabulary or language pair"):
        folder.write_record(RunRecord("tiny", _config(), "ab" * 32, source_lang="de", target_lang="en"))
    folder.write_record(record)
    # keras_transformer 0.1: the record without format/written_by, its config with the retired fields.
    old = {"preset": "tiny", "config": dict(_config().to_dict(), beam_size=2, train_steps=20), "vocab_sha256": "ab" * 32}
    folder.record_path.write_text(json.dumps(old))
    assert folder.read_record().same_run(record)
    # 0.1's notebook: the bare configuration dict.
    folder.record_path.write_text(json.dumps(dict(_config().to_dict(), beam_size=2, train_steps=20)))
    bare = folder.read_record()
    assert bare.config == _config() and bare.preset is None and bare.vocab_sha256 is None
    folder.record_path.write_text("{not json")
    with pytest.raises(RunError, match="not a run record"):
        folder.read_record()


def test_load_names_what_is_missing_and_checks_the_vocabulary(tmp_path):
    folder = RunFolder(tmp_path / "run")
    with pytest.raises(RunError, match="model folder not found"):
        folder.load()
    folder.path.mkdir()
    with pytest.raises(RunError, match="missing .*model.keras.*spm.model.*config.json"):
        folder.load()


def test_settings_name_their_fields_and_render_as_the_caller_wants():
    with pytest.raises(RunError) as caught:
        DataSettings(train_source="a.en").check()
    assert str(caught.value) == "give both data.train_source and data.train_target"
    assert caught.value.render({"data.train_source": "--train-source", "data.train_target": "--train-target"}.get) \
        == "give both --train-source and --train-target"
    with pytest.raises(RunError, match="give one data source, not data.tsv and data.dataset"):
        DataSettings(tsv="p.tsv", dataset="tatoeba_spa_eng").check()
    with pytest.raises(RunError, match="validation.bleu_sentences must be > 0"):
        ValidationSettings(early_stopping_patience=2, bleu_sentences=0).check()
    with pytest.raises(RunError, match="exclude decoding.beam_size"):
        DecodingSettings(beam_size=4, seed=1).check()
    DecodingSettings(beam_size=4, seed=1).check(sampling_excludes_beam_search=False)  # an export: both
    with pytest.raises(RunError, match="training.average_span must be in"):
        TrainingSettings(average_span=0.0).check()
    with pytest.raises(RunError, match="training.cooldown_fraction needs training.max_train_minutes"):
        TrainingSettings(cooldown_fraction=0.3).check()
    with pytest.raises(RunError, match=r"training.cooldown_fraction must be in \[0, 1\], got 1.5"):
        TrainingSettings(cooldown_fraction=1.5, max_train_minutes=10).check()
    TrainingSettings(cooldown_fraction=0.3, max_train_minutes=10).check()
    with pytest.raises(RunError, match="data.subword_samples must be an integer >= 0, got -1"):
        DataSettings(subword_samples=-1).check()
    with pytest.raises(RunError, match="data.subword_alpha must be > 0, got 0"):
        DataSettings(subword_samples=2, subword_alpha=0).check()
    with pytest.raises(RunError, match="data.subword_samples needs in-memory training data"):
        DataSettings(subword_samples=2, prepared_dir="prepared").check()
    DataSettings(subword_samples=2).check()
    with pytest.raises(RunError, match="unknown preset 'huge'"):
        TrainingSettings(preset="huge").check()
    assert render("{argument.n_best} and {data.tsv}") == "n_best and data.tsv"


def test_run_settings_replace_round_trip_and_quickstart():
    settings = RunSettings.quickstart(data=DataSettings(data_dir="d"))
    assert settings.training.max_train_minutes == 6.0 and settings.data.data_dir == "d"
    # The Quickstart's short-budget training: no dropout, the checkpoints of the last 200 updates averaged.
    quick = settings.training
    assert (quick.preset, quick.dropout_rate, quick.save_freq, quick.average_last) == ("compact", 0.0, 50, 4)
    assert quick.config_overrides() == {"dropout_rate": 0.0}
    # training= replaces the whole section: the preset's dropout and per-epoch checkpoints come back.
    own = RunSettings.quickstart(training=TrainingSettings(epochs=3)).training
    assert (own.preset, own.dropout_rate, own.save_freq, own.average_last, own.max_train_minutes) == (
        "small", None, None, 0, 0.0)
    TrainingSettings(save_freq=0).check()  # 0: a checkpoint at each epoch end, as None
    with pytest.raises(RunError, match="training.save_freq must be an integer >= 0, got -1"):
        TrainingSettings(save_freq=-1).check()
    changed = settings.replace_in("training", epochs=3, dropout_rate=0.3)
    assert (changed.training.epochs, changed.training.dropout_rate, settings.training.epochs) == (3, 0.3, 20)
    assert changed.training.config_overrides() == {"dropout_rate": 0.3}
    assert RunSettings.from_dict(json.loads(json.dumps(changed.to_dict()))) == changed
    with pytest.raises(RunError, match="TrainingSettings has no setting epoch; it has"):
        settings.replace_in("training", epoch=3)
    with pytest.raises(RunError, match="no section 'train'"):
        settings.replace_in("train", epochs=3)


def test_dataset_names_are_the_data_packages():
    from keras_transformer.data import DATASETS
    from keras_transformer.settings import DATASET_NAMES

    assert tuple(DATASETS) == DATASET_NAMES


def test_norm_first_flags_override_the_presets_layer_norm_placement():
    from keras_transformer.cli import _settings, build_parser
    from keras_transformer.config import get_preset

    parser = build_parser()
    training = {flags: _settings(parser.parse_args(["train", "--model-dir", "o", *flags])).training
                for flags in ((), ("--norm-first",), ("--no-norm-first",))}
    assert [t.norm_first for t in training.values()] == [None, True, False]
    assert training[()].config_overrides() == {}
    post = training[("--no-norm-first",)]
    assert post.config_overrides() == {"norm_first": False}
    # compact is pre-LN; the flag gives the paper's post-LN with everything else the preset's.
    assert get_preset("compact").norm_first is True
    config = get_preset("compact", **post.config_overrides())
    assert config.norm_first is False and config.replace(norm_first=True) == get_preset("compact")
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--model-dir", "o", "--norm-first", "--no-norm-first"])


def test_every_cli_flag_of_a_setting_takes_its_default_from_the_settings():
    import argparse

    from keras_transformer.cli import FLAGS, build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    seen = set()
    for name, command in commands.items():
        fields = command.get_default("_fields") or {}
        base = command.get_default("_base")
        for action in command._actions:
            off_of_on_off = isinstance(action, argparse._StoreFalseAction) and action.default is None  # --no-jit-compile
            if action.dest in fields and not off_of_on_off:
                section, field = fields[action.dest].split(".")
                assert FLAGS[fields[action.dest]] in action.option_strings
                assert action.default == getattr(getattr(base, section), field), (name, action.dest)
                seen.add(fields[action.dest])
    assert len(seen) > 60
    assert seen <= set(FLAGS)
