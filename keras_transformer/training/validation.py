"""Validation BLEU during training, the best model by BLEU, and resumable early stopping.

The validation loss that ``model.fit`` reports is teacher-forced: it does not
say how well the model translates. :class:`ValidationBLEU` is a Keras
callback that, every ``every_steps`` training steps or at each epoch end,
translates the first ``max_sentences`` validation sentences with a
:class:`~keras_transformer.decoding.Translator` built on the model being
trained (greedy search by default, beam search when asked: Section 6.1) and
scores them with sacreBLEU BLEU and chrF
(:func:`keras_transformer.evaluation.score_corpus`, the tokenizer chosen by
the target language). The score equals what ``keras-transformer evaluate``
gives the same weights with the same search on the same sentences. It:

* prints one line per evaluation;
* writes ``bleu`` and ``chrf`` scalars to TensorBoard at the training step
  (``<model_dir>/logs/validation``, beside Keras' own ``epoch_loss``);
* puts ``val_bleu`` and ``val_chrf`` (the latest evaluation) into the epoch
  logs, so later Keras callbacks, the History and the epoch line see them;
* keeps the weights of the best validation BLEU in
  ``<model_dir>/best_bleu.weights.h5``, with ``best_bleu.weights.h5.json``
  (BLEU, chrF, step, epoch numbered as the console does, from 1, signature) and ``best_bleu.hyp.txt`` (the
  translations scored), each written atomically (as the checkpoints are);
* feeds an :class:`EarlyStopping` on ``val_bleu`` or ``val_chrf``.

:class:`EarlyStopping` stops training after ``patience`` evaluations without
improvement of ``val_bleu`` (each BLEU evaluation) or ``val_loss`` (each
epoch). Keras' own ``keras.callbacks.EarlyStopping`` does not fit the
resumable training of :func:`keras_transformer.training.fitting.fit`: it
resets its count at every ``model.fit`` call (a resumed run calls ``fit``
twice: the rest of the interrupted epoch, then the following epochs) and
forgets it when the process is killed, and it only looks at epoch ends, not
at a BLEU evaluated every N steps. Ours keeps its history in
``early_stopping.json`` (written atomically), drops on resume the
evaluations made after the restored checkpoint (they are made again), and a
re-run of a stopped run trains nothing.

Under ``tf.distribute`` every process evaluates (the same weights give the
same translations, so all workers take the same decision to stop), and only
the chief (:func:`keras_transformer.training.distribute.is_chief`) prints and
writes the best model, its files and the TensorBoard scalars; the others
keep their early-stopping state in their own folder
(:func:`keras_transformer.training.distribute.task_dir`), like their checkpoints.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

import keras

from keras_transformer.run_folder import RunFolder, atomic_save_weights, atomic_write_text
from keras_transformer.settings import ValidationSettings

__all__ = ["EarlyStopping", "ValidationBLEU", "check_validation_settings", "make_validation"]

BEST_BLEU_WEIGHTS = RunFolder.BEST_BLEU
BEST_BLEU_HYPOTHESES = RunFolder.BEST_BLEU_HYPOTHESES
EARLY_STOPPING_STATE = RunFolder.EARLY_STOPPING
_MAXIMIZED = ("val_bleu", "val_chrf")


def _step(model) -> int:
    """The optimizer's update counter (training steps, as in the checkpoint names)."""
    optimizer = getattr(model, "optimizer", None)
    return int(keras.ops.convert_to_numpy(optimizer.iterations)) if optimizer is not None else 0


def _is_chief() -> bool:
    from keras_transformer.training.distribute import is_chief

    return is_chief()


class EarlyStopping(keras.callbacks.Callback):
    """Stops training after ``patience`` evaluations of ``monitor`` without improvement; survives a kill.

    ``val_loss`` is read from the epoch logs (one evaluation per epoch);
    ``val_bleu`` / ``val_chrf`` are fed by a :class:`ValidationBLEU` given
    this object (one evaluation per BLEU evaluation, every N steps or per
    epoch), or read from the epoch logs when no ValidationBLEU feeds them.
    An evaluation improves when it beats the best so far by more than
    ``min_delta`` (higher BLEU/chrF, lower loss); after ``patience``
    evaluations in a row that do not, ``model.stop_training`` is set (the
    training loop stops after the current batch, and
    :func:`~keras_transformer.training.fitting.fit` checkpoints the
    position).

    The history of evaluations is kept in ``early_stopping.json`` in the
    task folder of ``model_dir`` (atomic writes); on resume, evaluations after
    the restored step are dropped, and a run that had stopped stays stopped
    (:attr:`exhausted`).

    Args:
        monitor: ``"val_bleu"``, ``"val_chrf"``, ``"val_loss"`` or another
            epoch-log key.
        patience: evaluations without improvement before stopping (int >= 1).
        min_delta: the smallest change that counts as an improvement (>= 0,
            in the monitor's unit: BLEU points, nats per token).
        mode: ``"max"``, ``"min"`` or ``"auto"`` (``max`` for BLEU and chrF,
            ``min`` otherwise).
        model_dir: the run's folder (None: the state lives in memory only).
        stream: where the stop is announced (default ``sys.stdout``).

    Raises:
        ValueError: for ``patience`` < 1, a negative ``min_delta`` or an
            unknown ``mode``.
    """

    def __init__(
        self,
        monitor: str = "val_bleu",
        patience: int = 5,
        min_delta: float = 0.0,
        mode: str = "auto",
        model_dir: str | os.PathLike | None = None,
        stream: IO[str] | None = None,
    ):
        super().__init__()
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"early stopping patience must be an int >= 1, got {patience!r}")
        if not min_delta >= 0:
            raise ValueError(f"early stopping min_delta must be >= 0, got {min_delta!r}")
        if mode == "auto":
            mode = "max" if monitor in _MAXIMIZED else "min"
        if mode not in ("max", "min"):
            raise ValueError(f"early stopping mode must be 'max', 'min' or 'auto', got {mode!r}")
        self.monitor = monitor
        self.patience = patience
        self.min_delta = float(min_delta)
        self.mode = mode
        self.model_dir = None if model_dir is None else pathlib.Path(model_dir)
        self.stream = stream
        self.history: list[dict[str, Any]] = []
        self.fed = False  # set by a ValidationBLEU that feeds this monitor
        self.stopped = False
        self._restored = False
        self._warned = False

    @property
    def state_path(self) -> pathlib.Path | None:
        """``early_stopping.json`` in this process's task folder, or None without ``model_dir``."""
        if self.model_dir is None:
            return None
        from keras_transformer.training.distribute import task_dir

        return task_dir(self.model_dir) / EARLY_STOPPING_STATE

    def _better(self, value: float, best: float) -> bool:
        if not math.isfinite(value):
            return False
        if not math.isfinite(best):
            return True
        return value > best + self.min_delta if self.mode == "max" else value < best - self.min_delta

    @property
    def best(self) -> dict[str, Any] | None:
        """The evaluation with the best value so far (``{"step", "epoch", "value"}``), or None."""
        best = None
        for record in self.history:
            if best is None or self._better(record["value"], best["value"]):
                best = record
        return best

    @property
    def wait(self) -> int:
        """Evaluations since the best one (all of them if none was finite)."""
        best = self.best
        if best is None or not math.isfinite(best["value"]):
            return len(self.history)
        return len(self.history) - 1 - self.history.index(best)

    @property
    def exhausted(self) -> bool:
        """Whether the patience is used up (training should not go on)."""
        return self.wait >= self.patience

    def restore(self, step: int) -> None:
        """Loads the saved history, keeping the evaluations at steps <= ``step`` (the restored checkpoint's).

        Idempotent: only the first call reads the file.

        Args:
            step: the training step training resumes from.

        Raises:
            ValueError: when the saved state monitors another metric (naming
                both and the file).
        """
        if self._restored:
            return
        self._restored = True
        path = self.state_path
        if path is None or not path.is_file():
            return
        state = json.loads(path.read_text(encoding="utf-8"))
        if state.get("monitor") != self.monitor:
            raise ValueError(
                f"{path} holds early stopping on {state.get('monitor')!r}, not {self.monitor!r}; "
                "use the same metric to resume, or a new model folder"
            )
        kept = [r for r in state.get("history", []) if int(r["step"]) <= step]
        self.history = [{"step": int(r["step"]), "epoch": int(r["epoch"]), "value": float(r["value"])} for r in kept]
        if len(kept) != len(state.get("history", [])):
            self._save()

    def _save(self) -> None:
        path = self.state_path
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "monitor": self.monitor, "mode": self.mode, "patience": self.patience, "min_delta": self.min_delta,
            "history": self.history, "best": self.best, "wait": self.wait,
        }
        atomic_write_text(path, json.dumps(state, indent=1) + "\n")

    def observe(self, value: float, step: int, epoch: int) -> bool:
        """Records one evaluation; stops training when the patience is used up.

        Args:
            value: the monitored value (float; NaN counts as no improvement).
            step: the training step it was measured at.
            epoch: the 0-based epoch.

        Returns:
            Whether training is to stop.
        """
        self.history.append({"step": int(step), "epoch": int(epoch) + 1, "value": float(value)})
        self._save()
        if self.exhausted:
            self.stopped = True
            if self.model is not None:
                self.model.stop_training = True
            if _is_chief():
                best = self.best
                where = f"{best['value']:.4g} at step {best['step']}" if best else "none finite"
                print(
                    f"early stopping: {self.monitor} did not improve in {self.patience} evaluations "
                    f"(best {where}); stopping at step {step}",
                    file=self.stream or sys.stdout, flush=True,
                )
        return self.stopped

    def on_train_begin(self, logs=None):
        self.restore(_step(self.model))

    def on_epoch_end(self, epoch, logs=None):
        if self.fed:
            return
        value = (logs or {}).get(self.monitor)
        if value is None:
            if not self._warned:
                self._warned = True
                print(
                    f"warning: early stopping monitors {self.monitor!r}, which the epoch logs lack "
                    f"(they hold {', '.join(sorted(logs or {})) or 'nothing'})",
                    file=sys.stderr, flush=True,
                )
            return
        self.observe(float(value), _step(self.model), epoch)


class ValidationBLEU(keras.callbacks.Callback):
    """Translates validation sentences during training and scores BLEU and chrF (see the module docstring).

    Args:
        sources: validation source sentences.
        references: their reference translations, aligned.
        tokenizer: the model's :class:`~keras_transformer.data.tokenizer.SubwordTokenizer`.
        config: the model's :class:`~keras_transformer.config.TransformerConfig`
            (``max_length``, ``extra_decode_length``, ``length_penalty``).
        every_steps: evaluate every this many training steps (the
            optimizer's update counter, as in the checkpoint names, so a
            resumed run keeps the schedule); 0: at each epoch end.
        max_sentences: score only the first this many pairs (None: all).
        beam_size: 1 = greedy search (default, the cheapest); more: beam
            search with ``length_penalty`` (Section 6.1).
        length_penalty: alpha for beam search (default: ``config.length_penalty``).
        batch_size: sentences per translation batch (64, as ``evaluate``).
        target_lang: language of the references; picks BLEU's tokenizer
            (:func:`keras_transformer.evaluation.bleu_tokenizer_for`).
        tokenize: an explicit sacreBLEU tokenizer (overrides ``target_lang``'s).
        model_dir: the run's folder: best-BLEU files and TensorBoard logs go
            there (chief only). None: nothing is written.
        early_stopping: an :class:`EarlyStopping` on ``val_bleu`` or
            ``val_chrf`` to feed after each evaluation.
        tensorboard: write the scalars to ``model_dir/logs/validation``.
        stream: where the lines go (default ``sys.stdout``).

    Attributes:
        evaluations: the records of this process's evaluations (``step``,
            ``epoch``, ``bleu``, ``chrf``, ``sentences``, ``seconds``).
        hypotheses: the translations of the latest evaluation (``list[str]``).
        best: the best-BLEU record (read back from ``best_bleu.weights.h5.json``
            on resume), or None.
        seconds: wall time spent evaluating (fit's time budget, ``TimeBudget``, leaves
            it out).

    Raises:
        ValueError: for misaligned or empty sentence lists, a negative
            ``every_steps``, ``max_sentences`` < 1, ``beam_size`` < 1, or an
            unknown ``tokenize``.
        keras_transformer.evaluation.MissingTokenizerPackages: when the
            tokenizer's packages are missing (checked here, before training).
    """

    def __init__(
        self,
        sources: Sequence[str],
        references: Sequence[str],
        tokenizer: Any,
        config: Any,
        *,
        every_steps: int = 0,
        max_sentences: int | None = None,
        beam_size: int = 1,
        length_penalty: float | None = None,
        batch_size: int = 64,
        target_lang: str | None = None,
        tokenize: str | None = None,
        model_dir: str | os.PathLike | None = None,
        early_stopping: EarlyStopping | None = None,
        tensorboard: bool = True,
        stream: IO[str] | None = None,
    ):
        super().__init__()
        from keras_transformer.evaluation import bleu_metric, bleu_tokenizer_for

        sources, references = list(sources), list(references)
        if len(sources) != len(references):
            raise ValueError(f"{len(sources)} validation sources but {len(references)} references; they must align")
        if not sources:
            raise ValueError("no validation sentences to translate")
        for name, value, minimum in (("every_steps", every_steps, 0), ("beam_size", beam_size, 1),
                                     ("batch_size", batch_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"ValidationBLEU {name} must be an int >= {minimum}, got {value!r}")
        if max_sentences is not None and (not isinstance(max_sentences, int) or max_sentences < 1):
            raise ValueError(f"ValidationBLEU max_sentences must be None or an int >= 1, got {max_sentences!r}")
        bleu_metric(target_lang, tokenize)  # fails now, not after an hour of training
        self.sources = sources[:max_sentences]
        self.references = references[:max_sentences]
        self.tokenizer = tokenizer
        self.config = config
        self.every_steps = every_steps
        self.beam_size = beam_size
        self.length_penalty = config.length_penalty if length_penalty is None else float(length_penalty)
        self.batch_size = batch_size
        self.target_lang = target_lang
        self.tokenize = tokenize
        self.bleu_tokenizer = bleu_tokenizer_for(target_lang, tokenize)
        self.model_dir = None if model_dir is None else pathlib.Path(model_dir)
        self.early_stopping = early_stopping
        if early_stopping is not None:
            if early_stopping.monitor not in _MAXIMIZED:
                raise ValueError(
                    f"ValidationBLEU feeds early stopping on val_bleu or val_chrf, not {early_stopping.monitor!r}"
                )
            early_stopping.fed = True
        self.tensorboard = tensorboard
        self.stream = stream
        self.evaluations: list[dict[str, Any]] = []
        self.hypotheses: list[str] = []
        self.best: dict[str, Any] | None = None
        self.seconds = 0.0
        self._translator = None
        self._translate_fn = None
        self._writer = None
        self._epoch = 0
        self._started = False
        self._warned_truncated = False

    # ------------------------------------------------------------------ description

    @property
    def search(self) -> str:
        """``"greedy search"`` or ``"beam search (beam B, alpha A)"``."""
        if self.beam_size == 1:
            return "greedy search"
        return f"beam search (beam {self.beam_size}, alpha {self.length_penalty})"

    @property
    def best_path(self) -> pathlib.Path | None:
        """``model_dir/best_bleu.weights.h5`` (None without ``model_dir``)."""
        return None if self.model_dir is None else self.model_dir / BEST_BLEU_WEIGHTS

    # ------------------------------------------------------------------ translating and scoring

    def translator(self):
        """The :class:`~keras_transformer.decoding.Translator` on the model being trained (built once).

        A model trained in mixed precision is decoded through a float32 copy
        (as ``evaluate`` decodes the saved model); its weights are copied from
        the trained model before each evaluation.
        """
        if self._translator is None:
            from keras_transformer.decoding.translator import Translator

            self._translator = Translator(
                self.model, self.tokenizer, max_length=self.config.max_length,
                extra_decode_length=self.config.extra_decode_length, beam_size=self.beam_size,
                length_penalty=self.length_penalty,
            )
            t = self._translator
            self._translate_fn = t.translate if self.beam_size > 1 else t.translate_greedy
        if self._translator.model is not self.model:
            self._translator.model.set_weights(self.model.get_weights())
        return self._translator

    def translate_and_score(self):
        """Translates the validation sentences with the current weights and scores them.

        Returns:
            ``(scores, hypotheses)``: a :class:`~keras_transformer.evaluation.Scores`
            and the translations (``list[str]``, in order).
        """
        from keras_transformer.decoding.corpus import translate_lines
        from keras_transformer.evaluation import score_corpus

        self.translator()
        hypotheses = translate_lines(self._translate_fn, self.sources, batch_size=self.batch_size, desc="validation",
                                     warn_truncated=not self._warned_truncated and _is_chief())
        self._warned_truncated = True
        scores = score_corpus(hypotheses, self.references, target_lang=self.target_lang, tokenize=self.tokenize)
        return scores, hypotheses

    def evaluate(self, epoch: int | None = None) -> dict[str, Any]:
        """One evaluation at the current step: score, print, log, keep the best, feed early stopping.

        Args:
            epoch: the 0-based epoch (default: the current one).

        Returns:
            The record ``{"step", "epoch", "bleu", "chrf", "sentences", "seconds"}``.
        """
        epoch = self._epoch if epoch is None else int(epoch)
        step = _step(self.model)
        start = time.monotonic()
        scores, hypotheses = self.translate_and_score()
        seconds = time.monotonic() - start
        record = {
            "step": step, "epoch": epoch + 1, "bleu": scores.bleu, "chrf": scores.chrf,
            "sentences": scores.num_sentences, "seconds": round(seconds, 2),
        }
        self.evaluations.append(record)
        self.hypotheses = hypotheses
        chief = _is_chief()
        improved = self.best is None or scores.bleu > self.best["val_bleu"]
        if chief:
            if not self.evaluations[:-1]:
                self._print(f"validation: {self.search} of the first {scores.num_sentences} validation sentences; "
                            f"BLEU {scores.bleu_signature}; chrF {scores.chrf_signature}")
            note = ""
            if improved:
                self.best = {
                    "val_bleu": scores.bleu, "val_chrf": scores.chrf, "step": step, "epoch": epoch + 1,
                    "sentences": scores.num_sentences, "search": self.search,
                    "bleu_signature": scores.bleu_signature, "chrf_signature": scores.chrf_signature,
                }
                if self.model_dir is not None:
                    self._save_best(hypotheses)
                    note = f"; new best, saved {self.best_path}"
                else:
                    note = "; new best"
            else:
                note = f"; best {self.best['val_bleu']:.2f} at step {self.best['step']}"
            self._print(
                f"validation at step {step} (epoch {epoch + 1}): BLEU {scores.bleu:.2f}, chrF {scores.chrf:.2f} "
                f"({scores.num_sentences} sentences, {seconds:.1f} s){note}"
            )
            self._write_summaries(step, scores)
        self.seconds += time.monotonic() - start
        if self.early_stopping is not None:
            value = scores.bleu if self.early_stopping.monitor == "val_bleu" else scores.chrf
            self.early_stopping.observe(value, step, epoch)
        return record

    # ------------------------------------------------------------------ writing (chief)

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stdout, flush=True)

    def _save_best(self, hypotheses: list[str]) -> None:
        path = self.best_path
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save_weights(self.model, path)
        atomic_write_text(path.parent / BEST_BLEU_HYPOTHESES, "".join(h + "\n" for h in hypotheses))
        atomic_write_text(str(path) + ".json", json.dumps(self.best, indent=1) + "\n")

    def _write_summaries(self, step: int, scores) -> None:
        if not self.tensorboard or self.model_dir is None:
            return
        import tensorflow as tf

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(RunFolder(self.model_dir).logs / "validation"))
        with self._writer.as_default(step=step):
            tf.summary.scalar("bleu", scores.bleu, description=f"sacreBLEU {scores.bleu_signature}, {self.search}")
            tf.summary.scalar("chrf", scores.chrf, description=f"chrF {scores.chrf_signature}, {self.search}")
        self._writer.flush()

    # ------------------------------------------------------------------ Keras hooks

    def on_train_begin(self, logs=None):
        if self._started:  # training.fit calls model.fit twice when resuming mid-epoch
            return
        self._started = True
        best_file = None if self.best_path is None else pathlib.Path(str(self.best_path) + ".json")
        if best_file is not None and best_file.is_file() and _is_chief():
            self.best = json.loads(best_file.read_text(encoding="utf-8"))

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.every_steps and _step(self.model) % self.every_steps == 0:
            self.evaluate(self._epoch)

    def on_epoch_end(self, epoch, logs=None):
        if not self.every_steps:
            self.evaluate(epoch)
        if self.evaluations and logs is not None:
            logs["val_bleu"] = self.evaluations[-1]["bleu"]
            logs["val_chrf"] = self.evaluations[-1]["chrf"]

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()


def check_validation_settings(
    has_validation_set: bool, max_sentences: int, early_stopping_patience: int, early_stopping_metric: str
) -> None:
    """Checks :func:`make_validation`'s settings before any work (a run checks
    :class:`~keras_transformer.settings.ValidationSettings` first).

    Args:
        has_validation_set: whether there are validation pairs.
        max_sentences: validation sentences BLEU translates (0: no validation BLEU).
        early_stopping_patience: validations without improvement before stopping (0: none).
        early_stopping_metric: ``"bleu"`` or ``"loss"``.

    Raises:
        ValueError: naming the arguments, for early stopping with nothing to
            monitor (no validation set; ``bleu`` with validation BLEU off), an
            unknown metric, or negative numbers.
    """
    if early_stopping_metric not in ("bleu", "loss"):
        raise ValueError(f"early stopping metric must be 'bleu' or 'loss', got {early_stopping_metric!r}")
    if max_sentences < 0 or early_stopping_patience < 0:
        raise ValueError("max_sentences and early_stopping_patience must be >= 0")
    if early_stopping_patience and not has_validation_set:
        raise ValueError("early stopping (early_stopping_patience) needs a validation set")
    if early_stopping_patience and early_stopping_metric == "bleu" and not max_sentences:
        raise ValueError("early stopping on bleu needs validation BLEU: max_sentences must be > 0")


def make_validation(
    valid: Any,
    tokenizer: Any,
    config: Any,
    *,
    model_dir: str | os.PathLike | None,
    every_steps: int = 0,
    max_sentences: int = ValidationSettings.bleu_sentences,
    beam_size: int = 1,
    target_lang: str | None = None,
    tokenize: str | None = None,
    early_stopping_patience: int = 0,
    early_stopping_metric: str = "bleu",
    stream: IO[str] | None = None,
) -> tuple[ValidationBLEU | None, EarlyStopping | None]:
    """The validation callbacks of a run's :class:`~keras_transformer.settings.ValidationSettings`, for ``fit``.

    Args:
        valid: the validation pairs (a :class:`~keras_transformer.data.parallel_text.ParallelText`), or None.
        tokenizer: the model's tokenizer.
        config: the model's configuration.
        model_dir: the run's folder.
        every_steps: ``validation.bleu_every`` (0: each epoch end).
        max_sentences: ``validation.bleu_sentences`` (0: no validation BLEU).
        beam_size: ``validation.bleu_beam_size``.
        target_lang: the target language (BLEU's tokenizer).
        tokenize: ``evaluation.bleu_tokenize``.
        early_stopping_patience: ``validation.early_stopping_patience`` (0: none).
        early_stopping_metric: ``"bleu"`` or ``"loss"``.
        stream: where the lines go (default ``sys.stdout``).

    Returns:
        ``(ValidationBLEU or None, EarlyStopping or None)``. Without a
        validation set there is no validation BLEU (a note says so).

    Raises:
        ValueError: for early stopping that has nothing to monitor (no
            validation set; ``bleu`` with validation BLEU off), an unknown
            metric, or a bad setting (see :class:`ValidationBLEU`).
    """
    check_validation_settings(valid is not None, max_sentences, early_stopping_patience, early_stopping_metric)
    out = stream or sys.stdout
    early = None
    if early_stopping_patience:
        monitor = "val_bleu" if early_stopping_metric == "bleu" else "val_loss"
        early = EarlyStopping(monitor, early_stopping_patience, model_dir=model_dir, stream=stream)
    if not max_sentences:
        return None, early
    if valid is None:
        print("      no validation set: no validation BLEU", file=out, flush=True)
        return None, early
    callback = ValidationBLEU(
        valid.sources, valid.targets, tokenizer, config, every_steps=every_steps, max_sentences=max_sentences,
        beam_size=beam_size, target_lang=target_lang, tokenize=tokenize, model_dir=model_dir,
        early_stopping=early if early is not None and early.monitor == "val_bleu" else None, stream=stream,
    )
    when = f"every {every_steps} steps" if every_steps else "at each epoch end"
    print(f"      validation BLEU {when}: {callback.search} of {len(callback.sources)} sentences, "
          f"sacreBLEU tokenizer {callback.bleu_tokenizer}", file=out, flush=True)
    return callback, early
