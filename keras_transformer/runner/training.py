"""A run's training, step by step (Sections 3.4, 5 and 6.1), for :meth:`keras_transformer.Runner.train`.

1. the data (:mod:`keras_transformer.runner.data`): in memory, or a prepared
   folder streamed from disk;
2. the shared vocabulary (Section 3.4): reused from the run folder, copied
   from the prepared folder, or trained on the training pairs;
3. the model configuration (a preset of Table 3 and the settings'
   overrides) and the run record ``config.json`` (a folder holding another
   run is refused);
4. precision, XLA and the ``tf.distribute`` strategy, the token batches
   (Section 5.1), the model, Adam with Eq. 3 and the label-smoothed loss
   (Sections 5.3-5.4), validation BLEU and early stopping;
5. ``model.fit`` through :func:`keras_transformer.training.fit`, which
   resumes a killed run where it stopped;
6. the average of the last checkpoints (Section 6.1) and ``model.keras``
   with the record of which weights it holds.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import shutil
import time
from collections.abc import Callable
from typing import Any

from keras_transformer.run_folder import RunFolder, RunRecord
from keras_transformer.runner import data as run_data
from keras_transformer.settings import RunError, RunSettings, TrainingSettings

__all__ = ["TrainResult", "average_into", "describe_rerun", "train"]

Log = Callable[[str], None]


@dataclasses.dataclass
class TrainResult:
    """What :meth:`keras_transformer.Runner.train` leaves.

    Attributes:
        model: the trained :class:`keras_transformer.Transformer` (the
            averaged weights when averaging was asked for).
        tokenizer: the shared :class:`~keras_transformer.data.tokenizer.SubwordTokenizer`.
        config: the :class:`~keras_transformer.config.TransformerConfig`.
        corpus: the :class:`~keras_transformer.data.Corpus` read (its
            validation and test splits cut by ``data.limit_test``; no splits
            when the data streamed from a prepared folder).
        minutes: training wall time in minutes, or None when the run was
            already finished (nothing trained).
        history: the Keras ``History`` of ``fit``.
        best_validation: the best validation BLEU's record (BLEU, chrF,
            step, ...), or None.
        weights: one line saying which weights ``model.keras`` holds.
    """

    model: Any
    tokenizer: Any
    config: Any
    corpus: Any
    minutes: float | None
    history: Any
    best_validation: dict[str, Any] | None
    weights: str


@dataclasses.dataclass
class _Data:
    corpus: Any
    prepared: Any = None


def _read_data(folder: RunFolder, settings: RunSettings, max_length: int, cluster: bool, log: Log) -> _Data:
    from keras_transformer.data import Corpus

    data = settings.data
    if not data.prepared_dir:
        return _Data(run_data.read_corpus(data, log))  # bad data fails before the folder is created
    if settings.validation.early_stopping_patience:
        raise RunError("{validation.early_stopping_patience} needs the validation text, which a prepared folder "
                       "(token ids) does not keep: train without {data.prepared_dir} to stop early")
    prepared = run_data.open_prepared_corpus(data, settings.vocabulary, max_length,
                                             folder.vocabulary if folder.vocabulary.exists() else None, cluster, log)
    # The folder holds ids only: no validation BLEU (which translates the validation text) on this path.
    corpus = Corpus(str(prepared.directory), None, None, None, "test", data.source_lang, data.target_lang)
    return _Data(corpus, prepared)


def _vocabulary(folder: RunFolder, settings: RunSettings, data: _Data, log: Log):
    """The run's shared vocabulary (Section 3.4): reused, copied from the prepared folder, or trained."""
    from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece

    if folder.vocabulary.exists():
        log(f"reusing the shared vocabulary {folder.vocabulary}")
    elif data.prepared is not None:
        shutil.copyfile(data.prepared.vocabulary_path, folder.vocabulary)
        record = pathlib.Path(data.prepared.vocabulary_path).with_suffix(".json")
        if record.exists():
            shutil.copyfile(record, folder.vocabulary_record)
        log(f"using the vocabulary of {data.prepared.directory} ({folder.vocabulary})")
    else:
        size = run_data.default_vocab_size(settings.vocabulary)
        log(f"training a shared SentencePiece vocabulary of {size} pieces (Section 3.4)")
        train = data.corpus.train
        train_sentencepiece([train.sources, train.targets], str(folder.path / folder.VOCABULARY_PREFIX),
                            vocab_size=size)
    return SubwordTokenizer(str(folder.vocabulary))


def model_config(training: TrainingSettings, vocab_size: int):
    """The run's :class:`~keras_transformer.config.TransformerConfig`: the preset with the settings' overrides."""
    from keras_transformer.config import get_preset

    return get_preset(training.preset, vocab_size=vocab_size, **training.config_overrides())


def _datasets(settings: RunSettings, data: _Data, tokenizer, config, strategy, jit_compile: bool, log: Log):
    """``(train_data, validation dataset or None)``: token batches of ``config.batch_tokens`` (Section 5.1)."""
    from keras_transformer.data import make_dataset, prepare_pairs

    # Under XLA every batch of a bucket gets one shape, so XLA compiles once per bucket.
    batching = {"batch_tokens": config.batch_tokens, "padding": "fixed" if jit_compile else "bucket",
                "num_replicas": strategy.num_replicas_in_sync}
    seed, policy = settings.training.seed, settings.data.length_policy
    if data.prepared is not None:
        prepared = data.prepared
        train = prepared.epoch_batches(batch_tokens=config.batch_tokens, padding=batching["padding"], seed=seed,
                                       strategy=strategy, shuffle_buffer_size=settings.data.shuffle_buffer_size)
        valid = None
        if "valid" in prepared.splits:
            pairs = prepared.read_pairs("valid")
            log(f"      valid: {pairs.report.summary()}")
            valid = make_dataset(pairs, shuffle=False, **batching)
        layout = train.layout
        log(f"      streaming {train.steps_per_epoch} steps per epoch; worker {layout.worker_index + 1} of "
            f"{layout.num_workers} reads {len(train.worker_files[layout.worker_index])} of "
            f"{len(prepared.files('train'))} shards (batches of <= {train.batching.batch_tokens} tokens per replica)")
        return train, valid
    corpus = data.corpus
    samples = settings.data.subword_samples
    pairs = prepare_pairs(corpus.train.sources, corpus.train.targets, tokenizer, config.max_length, policy,
                          subword_samples=samples, subword_alpha=settings.data.subword_alpha, seed=seed)
    log(f"      train: {pairs.report.summary()}")
    if samples:
        log(f"      subword regularization (Kudo, 2018): each pair in its best segmentation and {samples} drawn with "
            f"alpha {settings.data.subword_alpha:g}; an epoch covers the data {1 + samples} times")
    # In memory (Multi30k's size): reshuffled at every epoch by tf.data.
    train = make_dataset(pairs, shuffle=True, seed=seed, **batching)
    valid = None
    if corpus.valid is not None:
        pairs = prepare_pairs(corpus.valid.sources, corpus.valid.targets, tokenizer, config.max_length, policy)
        valid = make_dataset(pairs, shuffle=False, **batching)
    return train, valid


def describe_rerun(folder: RunFolder, training: TrainingSettings, then: str, log: Log) -> bool:
    """Says what training does with a run already in ``folder``; returns whether that run was finished.

    ``fit`` resumes from ``checkpoints/`` (``state.json``): a run that reached
    ``training.epochs`` trains nothing more; a run stopped earlier (a kill,
    or the time budget) continues where it stopped.

    Args:
        folder: the run folder.
        training: the training settings (epochs, time budget).
        then: what the caller does after training, e.g. ``"translates
            test2016 and exports again"``.
        log: where the line goes.
    """
    from keras_transformer.training import checkpoints

    state = checkpoints.read_state(folder.checkpoints)
    if state is None:
        return False
    if state.epoch >= training.epochs:
        log(f"      {folder.path} already holds a finished run (epoch {state.epoch} of {training.epochs}, step "
            f"{state.step}); re-running trains nothing: it {then} with the trained model; use a new run folder to "
            "train again")
        return True
    position = f"after epoch {state.epoch}" if not state.batch else f"at batch {state.batch} of epoch {state.epoch + 1}"
    budget = f" for at most {training.max_train_minutes:g} more minutes" if training.max_train_minutes else ""
    log(f"      {folder.path} holds a run stopped {position} of {training.epochs} (step {state.step}); re-running "
        f"continues training from there{budget}, then {then}; use a new run folder to start over")
    return False


def average_into(model, folder: RunFolder, last: int, span: float, log: Log) -> list[str] | None:
    """Loads into ``model`` the average of the last ``last`` checkpoints (Section 6.1); returns their paths.

    Only checkpoints of the last ``span`` of the training steps count
    (:func:`~keras_transformer.training.checkpoints.checkpoints_to_average`).
    Returns None (and leaves ``model`` as it is) when fewer than 2 qualify.
    """
    from keras_transformer.training import checkpoints

    paths = checkpoints.checkpoints_to_average(checkpoints.list_checkpoints(folder.checkpoints), last, span)
    if len(paths) < 2:
        within = f" in the last {span:.0%} of the steps" if span < 1 else ""
        log(f"      {len(paths)} checkpoint(s){within} in {folder.checkpoints}: nothing to average")
        return None
    averaged = checkpoints.average_checkpoints(paths, folder.averaged)
    model.load_weights(averaged)
    log(f"      averaged the last {len(paths)} checkpoints ({', '.join(pathlib.Path(p).name for p in paths)}) into "
        f"{averaged}")
    return paths


def _compiled_model(settings: RunSettings, config, strategy, jit_compile: bool):
    from keras_transformer.training import build_model, compile_model

    with strategy.scope():
        model = build_model(config)
        compile_model(model, config, jit_compile=jit_compile, learning_rate_scale=config.learning_rate_scale,
                      gradient_accumulation_steps=settings.training.gradient_accumulation_steps,
                      cooldown=settings.training.cooldown_fraction > 0)
    return model


def _callbacks(folder: RunFolder, settings: RunSettings, corpus, tokenizer, config):
    """``(verbose, progress callbacks, ValidationBLEU or None, EarlyStopping or None)``."""
    from keras_transformer.training.progress import fit_verbosity
    from keras_transformer.training.validation import make_validation

    verbose, progress = fit_verbosity(settings.training.log_every)  # a progress bar on a terminal, else lines
    validation = settings.validation
    bleu, early = make_validation(
        corpus.valid, tokenizer, config, model_dir=folder.path, every_steps=validation.bleu_every,
        max_sentences=validation.bleu_sentences, beam_size=validation.bleu_beam_size, target_lang=corpus.target_lang,
        tokenize=settings.evaluation.bleu_tokenize, early_stopping_patience=validation.early_stopping_patience,
        early_stopping_metric=validation.early_stopping_metric,
    )
    return verbose, progress, bleu, early


def _announce(settings: RunSettings, config, jit_compile: bool, precision: str, why: str, onednn: str, log: Log):
    training = settings.training
    log(f"training preset {training.preset!r} (N={config.num_layers}, d_model={config.d_model}, h={config.num_heads}, "
        f"dff={config.dff}, P_drop={config.dropout_rate}, {config.batch_tokens} tokens/batch) for {training.epochs} "
        "epochs" + (f", at most {training.max_train_minutes:g} min" if training.max_train_minutes else "")
        + (f" (learning rate cooled down to 0 over its last {training.cooldown_fraction:.0%})"
           if training.cooldown_fraction else "")
        + f"; XLA {'on' if jit_compile else 'off'}, precision {precision} ({why}); {onednn}")


def _fit(model, folder: RunFolder, settings: RunSettings, config, train_data, valid_data, callbacks):
    from keras_transformer.training import fit

    training = settings.training
    verbose, progress, bleu, early = callbacks
    start = time.monotonic()
    history = fit(
        model, train_data, model_dir=folder.path, epochs=training.epochs, validation_data=valid_data,
        save_freq=training.save_freq or None, keep_checkpoints=max(config.checkpoint_average, training.average_last or 0),
        max_train_seconds=training.max_train_minutes * 60 if training.max_train_minutes else None,
        cooldown_fraction=training.cooldown_fraction, verbose=verbose, callbacks=progress, validation_bleu=bleu,
        early_stopping=early,
    )
    minutes = (time.monotonic() - start) / 60
    losses = history.history.get("loss") or [0.0]
    if not math.isfinite(losses[-1]):
        raise RunError(
            f"training diverged (loss {losses[-1]}) and was stopped; the last finite checkpoint is kept in "
            f"{folder.checkpoints}. Lower {{training.learning_rate_scale}} or raise {{training.warmup_steps}}, and "
            "use a new run folder"
        )
    return history, minutes


def _save(model, folder: RunFolder, training: TrainingSettings, saved_by: str, log: Log) -> list[str]:
    """Averages (if asked), saves ``model.keras`` and its record; returns the checkpoints its weights come from."""
    from keras_transformer.training import checkpoints

    state = checkpoints.read_state(folder.checkpoints)
    sources = [str(folder.checkpoints / state.latest)] if state else []
    if training.average_last and training.average_last > 1:
        sources = average_into(model, folder, training.average_last, training.average_span, log) or sources
    folder.save_model(model, sources, saved_by, state=state, epochs=training.epochs)
    return sources


def train(folder: RunFolder, settings: RunSettings, *, saved_by: str, then: str, onednn: str,
          log: Log) -> TrainResult:
    """Trains the run of ``settings`` into ``folder`` (the steps in the module docstring).

    Args:
        folder: the run folder (created).
        settings: the run's settings (checked first).
        saved_by: recorded with ``model.keras`` (``"train"``, ``"run"``).
        then: what the caller does after training, for the re-run message.
        onednn: the oneDNN line of :func:`keras_transformer.runtime.default_onednn`.
        log: where progress lines go.

    Returns:
        A :class:`TrainResult`.

    Raises:
        RunError: for settings that do not hold together, a folder holding
            another run, a prepared folder that does not match, or a
            diverged training.
        FileNotFoundError, ValueError: for missing data files or bad lines.
    """
    import keras

    from keras_transformer.config import get_preset
    from keras_transformer.evaluation import bleu_metric
    from keras_transformer.training import default_jit_compile, get_strategy, in_cluster, set_precision

    settings.check()
    training = settings.training
    cluster = in_cluster()
    # Under TF_CONFIG, MultiWorkerMirroredStrategy must exist before TensorFlow runs its first op.
    strategy = get_strategy(training.strategy) if cluster else None
    keras.utils.set_random_seed(training.seed)  # before any tokenizer exists (tensorflow_text resource)
    max_length = training.max_length or get_preset(training.preset).max_length
    data = _read_data(folder, settings, max_length, cluster, log)
    bleu_metric(data.corpus.target_lang, settings.evaluation.bleu_tokenize)  # a missing package fails before training
    settings.validation.check(data.corpus.valid is not None or data.prepared is not None)
    folder.path.mkdir(parents=True, exist_ok=True)
    tokenizer = _vocabulary(folder, settings, data, log)
    config = model_config(training, tokenizer.vocab_size)
    folder.write_record(RunRecord(training.preset, config, tokenizer.vocab_sha256,
                                  source_lang=data.corpus.source_lang, target_lang=data.corpus.target_lang))

    jit_compile = default_jit_compile() if training.jit_compile is None else training.jit_compile
    precision, why = set_precision(training.precision)
    strategy = strategy or get_strategy(training.strategy)
    train_data, valid_data = _datasets(settings, data, tokenizer, config, strategy, jit_compile, log)
    _announce(settings, config, jit_compile, precision, why, onednn, log)
    model = _compiled_model(settings, config, strategy, jit_compile)
    callbacks = _callbacks(folder, settings, data.corpus, tokenizer, config)
    finished_before = describe_rerun(folder, training, then, log)
    history, minutes = _fit(model, folder, settings, config, train_data, valid_data, callbacks)
    _save(model, folder, training, saved_by, log)
    weights = folder.describe_weights()
    trained = "trained nothing (the run was finished)" if finished_before else f"trained in {minutes:.1f} min"
    log(f"      {trained}; saved {weights}")
    bleu = callbacks[2]
    best = bleu.best if bleu is not None else None
    if bleu is not None and best is None:  # a re-run of a stopped run
        best = folder.best_validation()
    if best is not None:
        log(f"      best validation BLEU {best['val_bleu']:.2f} (chrF {best['val_chrf']:.2f}) at step {best['step']}: "
            f"{folder.best_bleu}")
    return TrainResult(model, tokenizer, config, data.corpus, None if finished_before else minutes, history, best,
                       weights)
