"""The run folder: every file a run writes, its name, and how it is written and read back.

A run (``keras-transformer run`` / ``train``, :class:`keras_transformer.Runner`)
leaves one folder; :class:`RunFolder` is the only place that knows its
layout::

    spm.model, spm.json           the shared SentencePiece vocabulary (Section 3.4) and how it was trained
    config.json                   the run record: preset, TransformerConfig, the vocabulary's sha256, the language pair
    checkpoints/                  ckpt-<step>.weights.h5 and state.json (resume; keras_transformer.training.checkpoints)
    best.weights.h5 (+ .json)     the weights of the best validation loss
    best_bleu.weights.h5 (+ .json), best_bleu.hyp.txt
                                  the weights of the best validation BLEU, and the translations scored
    early_stopping.json           early stopping's history (resumable)
    averaged.weights.h5           the average of the last checkpoints (Section 6.1)
    model.keras (+ .json)         the trained Keras model, and which weights it holds
    logs/                         TensorBoard logs
    <test>.hyp.<lang>, results.json
                                  the test translations; BLEU, chrF and the training time (``run``)
    export/<version>/             the SavedModel, in TF Serving's layout

Every file is written atomically (a temporary name in the same folder, then
``os.replace``), so a process killed at any instant leaves the old file or
the new one, never half of one.

A *model folder* is a run folder holding ``model.keras``, ``spm.model`` and
``config.json``: :meth:`RunFolder.load` is the one loader that ``translate``,
``evaluate``, ``export``, ``score``, ``plot attention``, the notebook and the
scripts use. It checks the record and that the vocabulary is the one the
model was trained with.

This module imports no TensorFlow at import time; :meth:`RunFolder.load`
and :func:`atomic_save_weights` load it when called.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import re
from collections.abc import Sequence
from typing import Any

from keras_transformer.settings import RunError

__all__ = ["LoadedModel", "RunFolder", "RunRecord", "TMP_PREFIX", "atomic_save_weights", "atomic_write_text"]

#: Prefix of the temporary files of an atomic write (a killed writer's leftovers are removed at training start).
TMP_PREFIX = "tmp-"
_CKPT_RE = re.compile(r"^ckpt-(\d+)\.weights\.h5$")
#: ``format`` of a run record (``config.json``); records of keras_transformer 0.1 have no ``format``.
RECORD_FORMAT = "keras_transformer.run/1"


def _fsync_dir(directory: str) -> None:
    """Flushes a directory entry (after ``os.replace``), where the OS allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Writes ``text`` to ``path`` atomically (temporary file, fsync, ``os.replace``).

    Args:
        path: the destination file.
        text: the content (UTF-8).

    Raises:
        OSError: when the folder cannot be written.
    """
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f"{TMP_PREFIX}{os.getpid()}-{os.path.basename(path)}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(directory)


def atomic_save_weights(model: Any, path: str | os.PathLike) -> None:
    """``model.save_weights(path)`` atomically: temporary file then ``os.replace``.

    Args:
        model: a built Keras model (its optimizer's variables are saved too).
        path: the destination, ending in ``.weights.h5`` (Keras' rule).

    Raises:
        ValueError: if ``path`` does not end in ``.weights.h5``.
    """
    path = os.fspath(path)
    if not path.endswith(".weights.h5"):
        raise ValueError(f"weights path must end in .weights.h5, got {path!r}")
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f"{TMP_PREFIX}{os.getpid()}-{os.path.basename(path)}")
    model.save_weights(tmp, overwrite=True)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(directory)


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What ``config.json`` says of a run: the preset, the model configuration and the vocabulary.

    Attributes:
        preset: the preset name the configuration started from (None for a
            folder written before the record had one).
        config: the :class:`~keras_transformer.config.TransformerConfig`.
        vocab_sha256: sha256 of ``spm.model`` the model was trained with
            (None: not recorded, not checked).
        written_by: ``"keras_transformer <version>"``, or None (0.1).
        source_lang, target_lang: the language pair the model was trained on
            (``"en"``, ``"de"``; None: files without languages, or a folder
            written before the record had them). ``evaluate`` scores with
            the target language's BLEU tokenizer and Moses rules by default.
    """

    preset: str | None
    config: Any
    vocab_sha256: str | None
    written_by: str | None = None
    source_lang: str | None = None
    target_lang: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``config.json``."""
        from keras_transformer import __version__

        return {"format": RECORD_FORMAT, "written_by": f"keras_transformer {__version__}", "preset": self.preset,
                "config": self.config.to_dict(), "vocab_sha256": self.vocab_sha256,
                "source_lang": self.source_lang, "target_lang": self.target_lang}

    def same_run(self, other: "RunRecord") -> bool:
        """Whether two records describe the same run (preset, configuration, vocabulary, and the
        language pair where both records name it: older records do not)."""
        if (self.preset, self.config, self.vocab_sha256) != (other.preset, other.config, other.vocab_sha256):
            return False
        ours, theirs = (self.source_lang, self.target_lang), (other.source_lang, other.target_lang)
        both_name_a_pair = None not in ours + theirs
        return ours == theirs or not both_name_a_pair


@dataclasses.dataclass
class LoadedModel:
    """A model folder opened by :meth:`RunFolder.load`.

    Attributes:
        model: the :class:`keras_transformer.Transformer` (not compiled).
        tokenizer: its :class:`~keras_transformer.data.tokenizer.SubwordTokenizer`.
        config: its :class:`~keras_transformer.config.TransformerConfig`.
        folder: the :class:`RunFolder`.
    """

    model: Any
    tokenizer: Any
    config: Any
    folder: "RunFolder"

    def __iter__(self):
        """``model, tokenizer, config = folder.load()``."""
        return iter((self.model, self.tokenizer, self.config))


class RunFolder:
    """A run's folder and every file in it (layout in the module docstring).

    Args:
        path: the folder (need not exist yet).

    Example:

    >>> folder = RunFolder("runs/multi30k")
    >>> folder.model_path.name
    'model.keras'
    """

    VOCABULARY = "spm.model"
    VOCABULARY_PREFIX = "spm"
    VOCABULARY_RECORD = "spm.json"
    RECORD = "config.json"
    MODEL = "model.keras"
    MODEL_RECORD_SUFFIX = ".json"
    CHECKPOINTS = "checkpoints"
    BEST_LOSS = "best.weights.h5"
    BEST_BLEU = "best_bleu.weights.h5"
    BEST_BLEU_HYPOTHESES = "best_bleu.hyp.txt"
    EARLY_STOPPING = "early_stopping.json"
    AVERAGED = "averaged.weights.h5"
    LOGS = "logs"
    RESULTS = "results.json"
    EXPORT = "export"
    #: The files that make a run folder a model folder (translatable).
    MODEL_FILES = (MODEL, VOCABULARY, RECORD)

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    # ------------------------------------------------------------------ names

    def _file(self, name: str) -> pathlib.Path:
        return self.path / name

    vocabulary = property(lambda self: self._file(self.VOCABULARY), doc="``spm.model``, the shared vocabulary.")
    vocabulary_record = property(lambda self: self._file(self.VOCABULARY_RECORD), doc="``spm.json``.")
    record_path = property(lambda self: self._file(self.RECORD), doc="``config.json``, the run record.")
    model_path = property(lambda self: self._file(self.MODEL), doc="``model.keras``.")
    model_record_path = property(lambda self: self._file(self.MODEL + self.MODEL_RECORD_SUFFIX),
                                 doc="``model.keras.json``: which weights ``model.keras`` holds.")
    checkpoints = property(lambda self: self._file(self.CHECKPOINTS), doc="``checkpoints/``.")
    best_loss = property(lambda self: self._file(self.BEST_LOSS), doc="``best.weights.h5``.")
    best_bleu = property(lambda self: self._file(self.BEST_BLEU), doc="``best_bleu.weights.h5``.")
    best_bleu_record = property(lambda self: self._file(self.BEST_BLEU + ".json"),
                                doc="``best_bleu.weights.h5.json``: its BLEU, chrF, step and signatures.")
    best_bleu_hypotheses = property(lambda self: self._file(self.BEST_BLEU_HYPOTHESES), doc="``best_bleu.hyp.txt``.")
    early_stopping = property(lambda self: self._file(self.EARLY_STOPPING), doc="``early_stopping.json``.")
    averaged = property(lambda self: self._file(self.AVERAGED), doc="``averaged.weights.h5``.")
    logs = property(lambda self: self._file(self.LOGS), doc="``logs/``, TensorBoard's.")
    results_path = property(lambda self: self._file(self.RESULTS), doc="``results.json``.")
    export_dir = property(lambda self: self._file(self.EXPORT), doc="``export/``, TF Serving's base path.")

    def hypotheses(self, test_name: str, target_lang: str | None) -> pathlib.Path:
        """``<test_name>.hyp.<target_lang>``: the test translations of ``run``."""
        return self._file(f"{test_name}.hyp.{target_lang}")

    def is_model_folder(self) -> bool:
        """Whether ``model.keras``, ``spm.model`` and ``config.json`` are all here."""
        return all(self._file(name).is_file() for name in self.MODEL_FILES)

    # ------------------------------------------------------------------ the run record

    def read_record(self) -> RunRecord | None:
        """The run record of ``config.json``, or None when there is none.

        Also reads the bare configuration dict that keras_transformer 0.1's
        notebook wrote (no preset, no vocabulary checksum).

        Raises:
            RunError: for a ``config.json`` that is not JSON or not a record.
        """
        from keras_transformer.config import TransformerConfig

        if not self.record_path.is_file():
            return None
        try:
            data = json.loads(self.record_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RunError(f"{self.record_path} is not a run record (not JSON: {error})") from None
        if not isinstance(data, dict):
            raise RunError(f"{self.record_path} is not a run record (a JSON object with preset, config, vocab_sha256)")
        try:
            if "config" in data:
                return RunRecord(data.get("preset"), TransformerConfig.from_dict(data["config"]),
                                 data.get("vocab_sha256"), data.get("written_by"),
                                 data.get("source_lang"), data.get("target_lang"))
            # keras_transformer 0.1's notebook: the bare TransformerConfig dict.
            return RunRecord(None, TransformerConfig.from_dict(data), None, "keras_transformer 0.1 (notebook)")
        except (TypeError, ValueError) as error:
            raise RunError(f"{self.record_path} holds no valid model configuration: {error}") from None

    def write_record(self, record: RunRecord) -> None:
        """Writes ``config.json``; a folder holding another run is refused.

        Raises:
            RunError: when ``config.json`` exists with another preset,
                configuration, vocabulary or language pair (resuming it
                would mix two runs).
        """
        previous = self.read_record()
        if previous is not None and not previous.same_run(record):
            raise RunError(
                f"{self.record_path} holds another configuration, vocabulary or language pair than this run's; use a "
                "new run folder (or delete the old one) instead of resuming it"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.record_path, json.dumps(record.to_dict(), indent=2) + "\n")

    # ------------------------------------------------------------------ the model

    def load(self) -> LoadedModel:
        """Opens the model folder: ``(model, tokenizer, config)`` (a :class:`LoadedModel`).

        Raises:
            RunError: naming the missing files, a record that is not one, a
                vocabulary whose sha256 differs from the one the model was
                trained with, or a ``model.keras`` Keras cannot load (with
                the version that wrote the folder).
        """
        import keras

        from keras_transformer.data.tokenizer import SubwordTokenizer
        from keras_transformer.saving import load_model

        if not self.path.is_dir():
            raise RunError(f"model folder not found: {self.path}")
        missing = [str(self._file(n)) for n in self.MODEL_FILES if not self._file(n).is_file()]
        if missing:
            raise RunError(f"missing {', '.join(missing)} (a model folder is written by `train`, `run` or "
                           "Runner.train)")
        record = self.read_record()
        tokenizer = SubwordTokenizer(str(self.vocabulary))
        if record.vocab_sha256 is not None:
            tokenizer.check_vocabulary(record.vocab_sha256)
        try:
            model = load_model(self.model_path, compile=False)
        except Exception as error:  # Keras raises many kinds (ValueError, TypeError, KeyError, OSError)
            writer = record.written_by or "keras_transformer 0.1"
            raise RunError(f"{self.model_path} (written by {writer}) cannot be loaded by this keras_transformer "
                           f"with Keras {keras.__version__}: {type(error).__name__}: {error}") from None
        return LoadedModel(model, tokenizer, record.config, self)

    def save_model(self, model: Any, checkpoints: Sequence[str | os.PathLike], saved_by: str,
                   state: Any = None, epochs: int | None = None) -> dict[str, Any] | None:
        """Saves ``model.keras`` atomically and records which weights it holds (``model.keras.json``).

        Args:
            model: the Keras model.
            checkpoints: the checkpoint(s) its weights come from (one, or
                the averaged ones, oldest first); empty: no record.
            saved_by: what saved it (``"train"``, ``"run"``, ``"average"``).
            state: the training position of the last checkpoint (a
                :class:`~keras_transformer.training.checkpoints.TrainingState`), if known.
            epochs: the epochs training was asked for, if known.

        Returns:
            The record written (:meth:`model_record`), or None without checkpoints.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f"{TMP_PREFIX}{os.getpid()}-{self.MODEL}"
        try:
            model.save(tmp)
            os.replace(tmp, self.model_path)
        finally:
            if tmp.exists():
                tmp.unlink()
        if not checkpoints:
            return None
        names = [os.path.basename(os.fspath(p)) for p in checkpoints]
        record: dict[str, Any] = {"weights": "average" if len(names) > 1 else "checkpoint", "checkpoints": names,
                                  "saved_by": saved_by}
        match = _CKPT_RE.match(names[-1])
        if match:
            record["step"] = int(match.group(1))
        if state is not None:  # the console's 1-based epoch number
            record.update(epoch=state.epoch_number, batch=state.batch, epoch_complete=state.epoch_complete)
        if epochs is not None:
            record["epochs"] = int(epochs)
        atomic_write_text(self.model_record_path, json.dumps(record, indent=2) + "\n")
        return record

    def model_record(self) -> dict[str, Any] | None:
        """``model.keras.json``: ``weights`` (``"average"``/``"checkpoint"``), ``checkpoints``, ``saved_by``,
        and ``step``, ``epoch``, ``batch``, ``epochs`` when known; None when there is none."""
        if not self.model_record_path.is_file():
            return None
        return json.loads(self.model_record_path.read_text(encoding="utf-8"))

    def describe_weights(self) -> str:
        """One line saying which weights ``model.keras`` holds, for ``evaluate`` and ``translate``.

        E.g. ``"runs/m/model.keras: the average of the last 5 checkpoints,
        ckpt-00000080.weights.h5 ... ckpt-00000160.weights.h5 (training
        stopped after epoch 3 of 20, step 160)"``; mentions
        ``best.weights.h5`` (the best validation loss) when it exists, since
        it is *not* what the model holds.
        """
        record = self.model_record()
        path = str(self.model_path)
        if record is None:
            text = (f"{path} (no {self.model_record_path.name}: saved before keras-transformer recorded its weights; "
                    "it holds the last checkpoint, or the average of the last checkpoints averaged)")
        else:
            names = record["checkpoints"]
            if record["weights"] == "average":
                what = f"the average of the last {len(names)} checkpoints, {names[0]} ... {names[-1]}"
            else:
                what = f"the weights of checkpoint {names[-1]}"
            where = []
            if "epoch" in record:
                done = record["epoch"] + (0 if "epoch_complete" in record or not record.get("batch") else 1)
                position = f"epoch {done}" if not record.get("batch") else f"batch {record['batch']} of epoch {done}"
                where.append(f"training stopped after {position}" + (f" of {record['epochs']}" if "epochs" in record
                                                                     else ""))
            if "step" in record:
                where.append(f"step {record['step']}")
            text = f"{path}: {what}" + (f" ({', '.join(where)})" if where else "")
        return text + self._best_weights_note(record)

    def _best_weights_note(self, record: dict[str, Any] | None) -> str:
        """Whether ``best.weights.h5`` / ``best_bleu.weights.h5`` hold the same weights as ``model.keras``, plainly."""
        single_step = record.get("step") if record and record.get("weights") == "checkpoint" else None
        same, other = [], []
        for path, what in ((self.best_loss, "the best validation loss"), (self.best_bleu, "the best validation BLEU")):
            if not path.is_file():
                continue
            try:
                info = json.loads(pathlib.Path(f"{path}.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                info = {}
            step = info.get("step")
            if single_step is not None and step == single_step:
                same.append(f"{what}'s ({path.name})")
                continue
            detail = []
            if "val_loss" in info:
                epoch = int(info["epoch"]) + (0 if info.get("epoch_numbering") == "1-based" else 1)
                detail.append(f"val_loss {info['val_loss']:.4f} after epoch {epoch}")
            if "val_bleu" in info:
                detail.append(f"BLEU {info['val_bleu']:.2f}")
            if step is not None:
                detail.append(f"step {step}")
            other.append(f"{path.name} holds other weights, {what}'s" + (f" ({', '.join(detail)})" if detail else ""))
        note = ""
        if same:
            note += "; these are also " + " and ".join(same) + ": the same weights"
        if other:
            note += "; " + "; ".join(other)
        return note

    # ------------------------------------------------------------------ results

    def best_validation(self) -> dict[str, Any] | None:
        """``best_bleu.weights.h5.json`` (the best validation BLEU's record), or None."""
        if not self.best_bleu_record.is_file():
            return None
        return json.loads(self.best_bleu_record.read_text(encoding="utf-8"))

    def read_results(self) -> dict[str, Any] | None:
        """``results.json``, or None."""
        if not self.results_path.is_file():
            return None
        return json.loads(self.results_path.read_text(encoding="utf-8"))

    def trained_target_lang(self) -> str | None:
        """The language the model in this folder translates into, e.g. ``"de"``.

        From the run record (``config.json``); for a folder trained before the record named the
        language pair, from ``results.json`` (``"language_pair": "en-de"``), if the main job wrote one.

        Returns:
            The language code, or None: not a model folder (a SavedModel or CTranslate2 export,
            whose ``config.json`` is not ours), not recorded, or ``results.json`` unreadable.
        """
        if not self.is_model_folder():
            return None
        record = self.read_record()
        if record and record.target_lang:
            return record.target_lang
        try:
            results = self.read_results()
        except (OSError, ValueError):
            return None
        pair = results.get("language_pair") if isinstance(results, dict) else None
        return (pair.partition("-")[2] or None) if isinstance(pair, str) else None

    def write_results(self, results: dict[str, Any]) -> None:
        """Writes ``results.json`` atomically."""
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.results_path, json.dumps(results, indent=2) + "\n")

    def write_lines(self, path: str | os.PathLike, lines: Sequence[str]) -> None:
        """Writes ``lines`` to ``path`` (in this folder or elsewhere), one per line, atomically."""
        atomic_write_text(path, "".join(line + "\n" for line in lines))


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
