"""The ``keras-transformer`` command line.

Commands:

``run``
    The main job in one go, on Multi30k English→German (or ``--dataset
    tatoeba_spa_eng``, Spanish→English): train the shared SentencePiece
    vocabulary, train a model (token batches, Eq. 3 schedule, label
    smoothing), score BLEU on the test split with sacreBLEU, export the
    SavedModel for TF Serving, and translate a few test sentences.
``train``
    Vocabulary and model from a named corpus (Multi30k, Tatoeba), parallel
    files, a TSV file or TFDS, under a ``tf.distribute`` strategy, with XLA,
    mixed precision and gradient accumulation as asked; re-running the same
    command after a kill resumes where it stopped. With ``--prepared-dir``
    the training data streams from a prepared folder (WMT's size). Both
    score validation BLEU during training (``--valid-bleu-*``, the best model
    by BLEU in ``best_bleu.weights.h5``) and can stop early
    (``--early-stopping-*``): :mod:`keras_transformer.training.validation`.
``prepare``
    Tokenize a corpus once into sharded id files with a manifest
    (:mod:`keras_transformer.data.prepare`), for ``train --prepared-dir``.
``average-checkpoints``
    Average the last N checkpoints (Section 6.1).
``evaluate`` / ``export``
    Score a test set (sacreBLEU, chrF) / export the TF Serving SavedModel.
``translate``
    Translate a file (or stdin) with an exported SavedModel, in batches, with
    a progress bar; writes one translation per input line (or, with
    ``--n-best N``, N ``index ||| hypothesis ||| score`` lines per input). ``--seed`` and
    ``--sampling-*`` sample instead (back-translation), in ``evaluate`` too.
``score``
    Forced decoding: the log-probability and length-normalised score of given
    translations (filtering parallel data, reranking).
``plot attention`` / ``plot positional-encoding``
    Draw the encoder-decoder attention of every head of one decoder layer for
    a sentence pair (from ``run``'s ``model.keras`` and ``spm.model``), or the
    sinusoidal positional encoding, to a PNG.

Every command prints what it does and stops with a one-line error (exit
status 2) on bad input, naming the file or flag at fault.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import time
import warnings
from collections.abc import Sequence

__all__ = ["main"]

#: ``--dataset`` choices (keras_transformer.data.sources.DATASETS; listed here so the parser loads no TensorFlow).
DATASET_NAMES = ("multi30k", "tatoeba_spa_eng")


class CliError(Exception):
    """An error in the user's input, printed without a traceback."""


def _env_data_dir() -> str | None:
    return os.environ.get("KERAS_TRANSFORMER_DATA") or None


def _decoding_threads(workers: int) -> None:
    """TensorFlow threads for translating with ``workers`` concurrent batches (before TensorFlow starts).

    One intra-op thread per batch and ``workers`` batches at once: decoding
    a small model runs one small op after another, which one core serves
    better than two (1.5x the sentences/s of ``evaluate`` on 2 cores,
    ``keras_transformer.decoding.corpus.translate_lines``).
    """
    import tensorflow as tf

    if workers < 1:
        raise CliError(f"--workers must be at least 1, got {workers}")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(max(2, workers))
    except RuntimeError:  # TensorFlow already started (e.g. the command runs inside a test process)
        pass


def _translate_lines(*args, **kwargs):
    """:func:`keras_transformer.decoding.corpus.translate_lines`, imported on first use (TensorFlow loads late)."""
    from keras_transformer.decoding.corpus import translate_lines

    return translate_lines(*args, **kwargs)


def _read_pairs(args: argparse.Namespace):
    """The :class:`~keras_transformer.data.sources.Corpus` the data flags name (train, validation, test)."""
    from keras_transformer.data.sources import Corpus, load_corpus, read_parallel_files, read_tsv_pairs

    data_dir = args.data_dir or _env_data_dir()
    files = getattr(args, "train_source", None) or getattr(args, "train_target", None)
    other = [flag for flag, given in (("--train-source/--train-target", files), ("--tsv", getattr(args, "tsv", None)),
                                      ("--tfds", getattr(args, "tfds", None))) if given]
    if len(other) > 1 or (other and args.dataset):
        raise CliError(f"give one data source, not {' and '.join(other + (['--dataset'] if args.dataset else []))}")
    source_lang, target_lang = getattr(args, "source_lang", None), getattr(args, "target_lang", None)
    if files:
        if not (args.train_source and args.train_target):
            raise CliError("give both --train-source and --train-target")
        print(f"reading {args.train_source} / {args.train_target}", flush=True)
        train = read_parallel_files(args.train_source, args.train_target, on_error=args.on_error)
        val = None
        if args.valid_source or args.valid_target:
            if not (args.valid_source and args.valid_target):
                raise CliError("give both --valid-source and --valid-target")
            val = read_parallel_files(args.valid_source, args.valid_target, on_error=args.on_error)
        corpus = Corpus("files", train, val, None, "test", source_lang, target_lang)
    elif getattr(args, "tfds", None):
        from keras_transformer.data.sources import load_tfds_translation

        print(f"reading TFDS {args.tfds} (source {source_lang or 'default'})", flush=True)
        load = lambda split: load_tfds_translation(  # noqa: E731
            args.tfds, split, source_lang=source_lang, target_lang=target_lang,
            data_dir=args.tfds_data_dir, on_error=args.on_error,
        )
        try:
            corpus = Corpus(args.tfds, load("train"), load("validation"), None, "test", source_lang, target_lang)
        except RuntimeError as error:  # not prepared and no network: the message says what to do
            raise CliError(str(error)) from error
    elif getattr(args, "tsv", None):
        print(f"reading {args.tsv}", flush=True)
        corpus = Corpus(args.tsv, read_tsv_pairs(args.tsv, on_error=args.on_error), None, None, "test",
                        source_lang, target_lang)
    else:
        name = args.dataset or "multi30k"
        where = data_dir or ("(download cache)" if name == "multi30k" else "$KERAS_TRANSFORMER_DATA (unset)")
        print(f"reading {name} from {where}", flush=True)
        corpus = load_corpus(name, data_dir=data_dir, source_lang=source_lang, target_lang=target_lang,
                             download=not args.no_download, cache_dir=args.cache_dir, on_error=args.on_error)
        print(f"      {corpus.source_lang} -> {corpus.target_lang}", flush=True)
    for split, limit in (("train", args.limit_train), ("valid", args.limit_test), ("test", args.limit_test)):
        pairs = getattr(corpus, split)
        if limit and pairs is not None:
            pairs.sources, pairs.targets = pairs.sources[:limit], pairs.targets[:limit]
    for split, pairs in (("train", corpus.train), ("valid", corpus.valid), (corpus.test_name, corpus.test)):
        if pairs is not None:
            skipped = f" ({pairs.report.summary()})" if pairs.report.skipped else ""
            print(f"      {split}: {len(pairs)} pairs{skipped}", flush=True)
    return corpus


def _save_model_atomically(model, path: pathlib.Path) -> None:
    """``model.save(path)`` through a temporary file, so a kill never leaves half a model."""
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    model.save(tmp)
    os.replace(tmp, path)


def _data_flags_given(args: argparse.Namespace) -> bool:
    """Whether the command names its training data (files, TSV or TFDS) instead of the default Multi30k."""
    return any(getattr(args, flag, None) for flag in ("train_source", "train_target", "tsv", "tfds"))


def _corpus_sources(args: argparse.Namespace):
    """(train, valid or None) :class:`~keras_transformer.data.prepare.CorpusSource` of the data flags."""
    from keras_transformer.data.prepare import CorpusSource

    limit_train, limit_test = args.limit_train or None, args.limit_test or None
    if getattr(args, "train_source", None) or getattr(args, "train_target", None):
        if not (args.train_source and args.train_target):
            raise CliError("give both --train-source and --train-target")
        train = CorpusSource.files(args.train_source, args.train_target, args.on_error, limit_train)
        valid = None
        if args.valid_source or args.valid_target:
            if not (args.valid_source and args.valid_target):
                raise CliError("give both --valid-source and --valid-target")
            valid = CorpusSource.files(args.valid_source, args.valid_target, args.on_error, limit_test)
        return train, valid
    if getattr(args, "tfds", None):
        def tfds(split, limit):
            return CorpusSource.tfds(args.tfds, split, args.source_lang, args.target_lang, args.tfds_data_dir,
                                     args.on_error, limit)

        return tfds("train", limit_train), tfds("validation", limit_test)
    if getattr(args, "tsv", None):
        return CorpusSource.tsv(args.tsv, on_error=args.on_error, max_pairs=limit_train), None
    if getattr(args, "dataset", None) not in (None, "multi30k"):
        raise CliError(f"prepare and --prepared-dir read files, a TSV file, TFDS or Multi30k, not --dataset "
                       f"{args.dataset} (its split is made in memory): train it without --prepared-dir")
    data_dir = args.data_dir or _env_data_dir()
    multi30k = dict(data_dir=data_dir, download=not args.no_download, cache_dir=args.cache_dir, on_error=args.on_error)
    return (CorpusSource.multi30k("train", max_pairs=limit_train, **multi30k),
            CorpusSource.multi30k("val", max_pairs=limit_test, **multi30k))


def _in_cluster() -> bool:
    """Whether ``TF_CONFIG`` describes a cluster of more than one task."""
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    return sum(len(v) for v in cluster.values()) > 1


def _prepared_corpus(args: argparse.Namespace, max_length: int, vocabulary: pathlib.Path | None):
    """The prepared folder of ``train --prepared-dir``: reused, prepared, or prepared again (see README)."""
    from keras_transformer.data.prepare import MANIFEST_NAME, open_prepared, prepare_corpus

    folder = pathlib.Path(args.prepared_dir)
    has_manifest = (folder / MANIFEST_NAME).is_file()
    if _in_cluster():
        # Workers never write the shared folder: it is prepared beforehand (`keras-transformer prepare`).
        if not has_manifest:
            raise CliError(f"{folder} is not prepared; with TF_CONFIG every worker only reads it: run "
                           "`keras-transformer prepare` with the same data flags first")
        corpus = open_prepared(folder)
        print(f"reading the prepared data in {folder} (cluster: no re-preparation)", flush=True)
    else:
        if not _data_flags_given(args) and has_manifest:
            corpus = open_prepared(folder)
            train, valid = corpus.source("train"), corpus.source("valid") if "valid" in corpus.splits else None
            missing = [p for source in (train, valid) if source is not None for p in source.paths
                       if not os.path.isfile(p)]
            if missing:
                print(f"the sources {folder} was prepared from are not here ({', '.join(missing)}): using the "
                      "prepared data as it is", flush=True)
                train = None
            else:
                print(f"checking {folder} against the sources it was prepared from", flush=True)
        else:
            train, valid = _corpus_sources(args)
        if train is not None:
            try:
                corpus = prepare_corpus(
                    folder, train, valid, vocabulary=vocabulary, vocab_size=args.vocab_size,
                    vocab_sample_size=args.vocab_sample_size, max_length=max_length,
                    length_policy=args.length_policy, num_shards=args.num_shards, processes=args.processes,
                    log=lambda line: print(line, flush=True),
                )
            except RuntimeError as error:  # TFDS not prepared and no network, or a tokenizing process died
                raise CliError(str(error)) from error
    problems = []
    if corpus.max_length != max_length:
        problems.append(f"max_length {corpus.max_length} (the model's is {max_length})")
    if corpus.length_policy != args.length_policy:
        problems.append(f"length policy {corpus.length_policy!r} (asked: {args.length_policy!r})")
    if vocabulary is not None:
        import hashlib

        if hashlib.sha256(vocabulary.read_bytes()).hexdigest() != corpus.vocab_sha256:
            problems.append(f"another vocabulary than {vocabulary}")
    if problems:
        raise CliError(f"{folder} was prepared with {', '.join(problems)}; prepare it again with matching settings")
    print(f"      train: {corpus.summary('train')}", flush=True)
    return corpus


def _train(args: argparse.Namespace):
    """Vocabulary, data and training into ``args.model_dir``.

    Returns:
        ``(model, tokenizer, config, corpus, minutes)``: the trained model, its
        tokenizer and configuration, the :class:`~keras_transformer.data.sources.Corpus`
        read (its validation and test splits cut by ``--limit-test``) and the
        training wall time in minutes.
    """
    import keras

    from keras_transformer.config import get_preset
    from keras_transformer.data.pipeline import make_dataset, prepare_pairs
    from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece
    from keras_transformer.evaluation import bleu_metric
    from keras_transformer.training import checkpoints
    from keras_transformer.training import (
        build_model,
        compile_model,
        default_jit_compile,
        fit,
        get_strategy,
        set_precision,
    )
    from keras_transformer.training.validation import BEST_BLEU_WEIGHTS, check_validation_settings, make_validation

    prepared = bool(getattr(args, "prepared_dir", None))
    # Under TF_CONFIG, MultiWorkerMirroredStrategy must exist before TensorFlow runs its first op.
    strategy = get_strategy(args.strategy) if _in_cluster() else None
    keras.utils.set_random_seed(args.seed)  # before any tokenizer exists (tensorflow_text resource)
    out = pathlib.Path(args.model_dir)
    spm_path = out / "spm.model"
    preset_max_length = get_preset(args.preset).max_length
    max_length = args.max_length if args.max_length is not None else preset_max_length
    prepared_data = None
    if prepared:
        from keras_transformer.data.sources import Corpus

        if args.early_stopping_patience:
            raise CliError("--early-stopping-patience needs the validation text, which --prepared-dir (token ids) "
                           "does not keep: train without --prepared-dir to stop early")
        prepared_data = _prepared_corpus(args, max_length, spm_path if spm_path.exists() else None)
        # The folder holds ids only: no validation BLEU (which translates the validation text) on this path.
        corpus = Corpus(str(prepared_data.directory), None, None, None, "test", args.source_lang, args.target_lang)
    else:
        corpus = _read_pairs(args)  # bad data fails before the folder is created
    train_pairs, val_pairs = corpus.train, corpus.valid
    bleu_metric(corpus.target_lang, args.bleu_tokenize)  # a missing tokenizer package fails before training
    check_validation_settings(val_pairs is not None, args.valid_bleu_sentences, args.early_stopping_patience,
                              args.early_stopping_metric)
    out.mkdir(parents=True, exist_ok=True)

    if spm_path.exists():
        print(f"reusing the shared vocabulary {spm_path}", flush=True)
    elif prepared:
        import shutil

        shutil.copyfile(prepared_data.vocabulary_path, spm_path)
        vocab_json = pathlib.Path(prepared_data.vocabulary_path).with_suffix(".json")
        if vocab_json.exists():
            shutil.copyfile(vocab_json, out / "spm.json")
        print(f"using the vocabulary of {prepared_data.directory} ({spm_path})", flush=True)
    else:
        vocab_size = args.vocab_size or 8000
        print(f"training a shared SentencePiece vocabulary of {vocab_size} pieces (Section 3.4)", flush=True)
        train_sentencepiece([train_pairs.sources, train_pairs.targets], str(out / "spm"), vocab_size=vocab_size)
    tokenizer = SubwordTokenizer(str(spm_path))

    overrides = {"vocab_size": tokenizer.vocab_size}
    for flag in ("batch_tokens", "warmup_steps", "dropout_rate", "max_length", "learning_rate_scale", "num_layers",
                 "d_model", "num_heads", "dff", "label_smoothing"):
        if getattr(args, flag, None) is not None:
            overrides[flag] = getattr(args, flag)
    config = get_preset(args.preset, **overrides)
    config_path = out / "config.json"
    record = {"preset": args.preset, "config": config.to_dict(), "vocab_sha256": tokenizer.vocab_sha256}
    if config_path.exists():
        previous = json.loads(config_path.read_text(encoding="utf-8"))
        if previous != record:
            raise CliError(
                f"{config_path} holds another configuration or vocabulary than this command's; "
                "use a new --model-dir (or delete the old one) instead of resuming it"
            )
    checkpoints.atomic_write_text(config_path, json.dumps(record, indent=2) + "\n")

    jit_compile = default_jit_compile() if args.jit_compile is None else args.jit_compile
    precision, why = set_precision(args.precision)
    strategy = strategy or get_strategy(args.strategy)
    # Under XLA every batch of a bucket gets one shape, so XLA compiles once per bucket.
    batching = {
        "batch_tokens": config.batch_tokens,
        "padding": "fixed" if jit_compile else "bucket",
        "num_replicas": strategy.num_replicas_in_sync,
    }
    val_ds = None
    if prepared:
        train_data = prepared_data.epoch_batches(
            batch_tokens=config.batch_tokens, padding=batching["padding"], seed=args.seed, strategy=strategy,
            shuffle_buffer_size=args.shuffle_buffer_size,
        )
        if "valid" in prepared_data.splits:
            val = prepared_data.read_pairs("valid")
            print(f"      valid: {val.report.summary()}", flush=True)
            val_ds = make_dataset(val, shuffle=False, **batching)
        layout = train_data.layout
        print(f"      streaming {train_data.steps_per_epoch} steps per epoch; worker {layout.worker_index + 1} of "
              f"{layout.num_workers} reads {len(train_data.worker_files[layout.worker_index])} of "
              f"{len(prepared_data.files('train'))} shards (batches of <= {train_data.batching.batch_tokens} tokens per "
              f"replica)", flush=True)
    else:
        train = prepare_pairs(train_pairs.sources, train_pairs.targets, tokenizer, config.max_length,
                              args.length_policy)
        print(f"      train: {train.report.summary()}", flush=True)
        # In memory (Multi30k's size): reshuffled at every epoch by tf.data, as before the prepared path existed.
        train_data = make_dataset(train, shuffle=True, seed=args.seed, **batching)
        if val_pairs is not None:
            val = prepare_pairs(val_pairs.sources, val_pairs.targets, tokenizer, config.max_length,
                                args.length_policy)
            val_ds = make_dataset(val, shuffle=False, **batching)

    print(
        f"training preset {args.preset!r} (N={config.num_layers}, d_model={config.d_model}, h={config.num_heads}, "
        f"dff={config.dff}, P_drop={config.dropout_rate}, {config.batch_tokens} tokens/batch) for {args.epochs} "
        f"epochs" + (f", at most {args.max_train_minutes:g} min" if args.max_train_minutes else "")
        + f"; XLA {'on' if jit_compile else 'off'}, precision {precision} ({why}); "
        + getattr(args, "onednn", "oneDNN as TensorFlow decides"),
        flush=True,
    )
    with strategy.scope():
        model = build_model(config)
        compile_model(
            model,
            config,
            jit_compile=jit_compile,
            learning_rate_scale=config.learning_rate_scale,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
        )
    from keras_transformer.training.progress import fit_verbosity

    verbose, progress = fit_verbosity(args.log_every)  # a progress bar on a terminal, else a line every N steps
    validation_bleu, early_stopping = make_validation(
        val_pairs, tokenizer, config, model_dir=out, every_steps=args.valid_bleu_every,
        max_sentences=args.valid_bleu_sentences, beam_size=args.valid_bleu_beam_size,
        target_lang=corpus.target_lang, tokenize=args.bleu_tokenize,
        early_stopping_patience=args.early_stopping_patience, early_stopping_metric=args.early_stopping_metric,
    )
    finished_before = _say_what_a_rerun_does(args, out)
    start = time.monotonic()
    history = fit(
        model,
        train_data,
        model_dir=out,
        epochs=args.epochs,
        validation_data=val_ds,
        save_freq=args.save_freq,
        keep_checkpoints=max(config.checkpoint_average, args.average_last or 0),
        max_train_seconds=args.max_train_minutes * 60 if args.max_train_minutes else None,
        verbose=verbose,
        callbacks=progress,
        validation_bleu=validation_bleu,
        early_stopping=early_stopping,
    )
    minutes = (time.monotonic() - start) / 60
    losses = history.history.get("loss") or [0.0]
    if not math.isfinite(losses[-1]):
        raise CliError(
            f"training diverged (loss {losses[-1]}) and was stopped; the last finite checkpoint is kept in "
            f"{out / 'checkpoints'}. Lower --learning-rate-scale or raise --warmup-steps, and use a new --model-dir"
        )
    state = checkpoints.read_state(out / "checkpoints")
    sources = [out / "checkpoints" / state.latest] if state else []
    if args.average_last and args.average_last > 1:
        sources = _average_into(model, out, args.average_last, args.average_span) or sources
    _save_model_atomically(model, out / "model.keras")
    if sources:
        checkpoints.write_model_record(out / "model.keras", sources, args.command, state=state, epochs=args.epochs)
    trained = "trained nothing (the run was finished)" if finished_before else f"trained in {minutes:.1f} min"
    print(f"      {trained}; saved {checkpoints.describe_model_weights(out / 'model.keras')}", flush=True)
    best_file = pathlib.Path(f"{out / BEST_BLEU_WEIGHTS}.json")
    best = validation_bleu.best if validation_bleu is not None else None
    if validation_bleu is not None and best is None and best_file.is_file():  # a re-run of a stopped run
        best = json.loads(best_file.read_text(encoding="utf-8"))
    if best is not None:
        print(f"      best validation BLEU {best['val_bleu']:.2f} (chrF {best['val_chrf']:.2f}) at step {best['step']}: "
              f"{out / BEST_BLEU_WEIGHTS}", flush=True)
    return model, tokenizer, config, corpus, (None if finished_before else minutes)


def _say_what_a_rerun_does(args: argparse.Namespace, out: pathlib.Path) -> bool:
    """Prints what this command does with a run already in ``out``; returns whether that run was finished.

    ``fit`` resumes from ``out/checkpoints`` (``state.json``): a run that
    reached ``--epochs`` trains nothing more; a run stopped earlier (a kill,
    or ``--max-train-minutes``) continues where it stopped.
    """
    from keras_transformer.training import checkpoints

    state = checkpoints.read_state(out / "checkpoints")
    if state is None:
        return False
    flag = "--output-dir" if args.command == "run" else "--model-dir"
    then = ", then translates test2016 and exports again" if args.command == "run" else ", then saves model.keras again"
    if state.epoch >= args.epochs:
        print(
            f"      {out} already holds a finished run (epoch {state.epoch} of {args.epochs}, step {state.step}); "
            f"re-running trains nothing{then.replace(', then', ': it')} with the trained model; "
            f"use a new {flag} to train again",
            flush=True,
        )
        return True
    position = f"after epoch {state.epoch}" if not state.batch else f"at batch {state.batch} of epoch {state.epoch + 1}"
    budget = f" for at most {args.max_train_minutes:g} more minutes" if args.max_train_minutes else ""
    print(
        f"      {out} holds a run stopped {position} of {args.epochs} (step {state.step}); re-running continues "
        f"training from there{budget}{then}; use a new {flag} to start over",
        flush=True,
    )
    return False


def _cmd_prepare(args: argparse.Namespace) -> int:
    from keras_transformer.data.prepare import prepare_corpus

    train, valid = _corpus_sources(args)
    try:
        corpus = prepare_corpus(
            args.output_dir, train, valid, vocabulary=args.vocab, vocab_size=args.vocab_size,
            vocab_sample_size=args.vocab_sample_size, max_length=args.max_length, length_policy=args.length_policy,
            num_shards=args.num_shards, processes=args.processes, force=args.force,
            log=lambda line: print(line, flush=True),
        )
    except RuntimeError as error:  # TFDS not prepared and no network, or a tokenizing process died
        raise CliError(str(error)) from error
    for split in corpus.splits:
        print(f"{split}: {corpus.summary(split)}", flush=True)
    print(f"train with: keras-transformer train --prepared-dir {corpus.directory} --model-dir DIR ...", flush=True)
    return 0


def _average_into(model, model_dir: pathlib.Path, last: int, span: float = 1.0) -> list[str] | None:
    """Loads into ``model`` the average of the last ``last`` checkpoints (Section 6.1); returns their paths.

    Only checkpoints of the last ``span`` of the training steps count
    (:func:`~keras_transformer.training.checkpoints.checkpoints_to_average`).
    Returns None (and leaves ``model`` as it is) when fewer than 2 qualify.
    """
    from keras_transformer.training import checkpoints

    paths = checkpoints.checkpoints_to_average(checkpoints.list_checkpoints(model_dir / "checkpoints"), last, span)
    if len(paths) < 2:
        within = f" in the last {span:.0%} of the steps" if span < 1 else ""
        print(f"      {len(paths)} checkpoint(s){within} in {model_dir / 'checkpoints'}: nothing to average", flush=True)
        return None
    averaged = checkpoints.average_checkpoints(paths, model_dir / "averaged.weights.h5")
    model.load_weights(averaged)
    names = ", ".join(pathlib.Path(p).name for p in paths)
    print(f"      averaged the last {len(paths)} checkpoints ({names}) into {averaged}", flush=True)
    return paths


def _span(text: str) -> float:
    """argparse type of ``--average-span``: a float in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}") from None
    if not 0.0 < value <= 1.0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text!r}")
    return value


def _make_translator(
    model, tokenizer, config, beam_size: int, length_penalty: float | None = None, jit_compile: bool = False,
    early_stopping: bool = True, xla_max_rows: int | None = 4, **sampling,
):
    """(Translator, its translate function for ``beam_size``, a description); alpha defaults to the config's.

    The translator keeps its own copy of the output projection
    (``cache_output_matrix``): the model it gets is trained.
    """
    from keras_transformer.decoding.translator import Translator

    alpha = config.length_penalty if length_penalty is None else length_penalty
    translator = Translator(
        model,
        tokenizer,
        max_length=config.max_length,
        extra_decode_length=config.extra_decode_length,
        beam_size=beam_size,
        length_penalty=alpha,
        jit_compile=jit_compile,
        early_stopping=early_stopping,
        xla_max_rows=xla_max_rows,
        cache_output_matrix=True,
        **sampling,
    )
    translate_fn = translator.translate if beam_size > 1 else translator.translate_greedy
    search = f"beam search (beam {beam_size}, alpha {alpha})" if beam_size > 1 else "greedy search"
    return translator, translate_fn, search


def _cmd_train(args: argparse.Namespace) -> int:
    _train(args)
    return 0


def _run(args: argparse.Namespace) -> int:
    from keras_transformer.evaluation import score_corpus
    from keras_transformer.export import export_saved_model

    args.model_dir = args.output_dir
    out = pathlib.Path(args.output_dir)
    print("[1/4] vocabulary, data and training", flush=True)
    model, tokenizer, config, corpus, train_minutes = _train(args)
    if train_minutes is None:  # a finished run, re-run: keep the training time it recorded
        previous = out / "results.json"
        train_minutes = json.loads(previous.read_text(encoding="utf-8")).get("train_minutes", 0.0) \
            if previous.is_file() else 0.0
    test, test_name = corpus.test, f"{corpus.name} {corpus.test_name}"
    pair = f"{corpus.source_lang}-{corpus.target_lang}"

    translator, translate_fn, search = _make_translator(
        model, tokenizer, config, args.beam_size, args.length_penalty, early_stopping=args.early_stopping
    )
    print(f"[2/4] translating {test_name} ({len(test)} sentences) with {search}", flush=True)
    hypotheses = _translate_lines(translate_fn, test.sources, batch_size=args.eval_batch_size)
    scores = score_corpus(hypotheses, test.targets, target_lang=corpus.target_lang, tokenize=args.bleu_tokenize)
    hypotheses_path = out / f"{corpus.test_name}.hyp.{corpus.target_lang}"
    hypotheses_path.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    print(f"      {test_name} {pair}:\n      " + str(scores).replace("\n", "\n      "), flush=True)

    print("[3/4] exporting the SavedModel", flush=True)
    export_path = export_saved_model(translator, out / "export", version=1, overwrite=True)
    print(f"      {export_path}  (signature serving_default: 1-D tf.string -> translations)", flush=True)

    print("[4/4] a few test sentences:", flush=True)
    for source, hypothesis, reference in list(zip(test.sources, hypotheses, test.targets))[: args.num_examples]:
        src, tgt = (corpus.source_lang or "src").upper(), (corpus.target_lang or "tgt").upper()
        print(f"  {src}:  {source}\n  {tgt}:  {hypothesis}\n  REF: {reference}\n", flush=True)
    summary = {
        "dataset": corpus.name,
        "language_pair": pair,
        "test_split": corpus.test_name,
        "bleu": round(scores.bleu, 2),
        "chrf": round(scores.chrf, 2),
        "bleu_signature": scores.bleu_signature,
        "train_minutes": round(train_minutes, 2),
        "preset": args.preset,
        "beam_size": args.beam_size,
        "length_penalty": translator.length_penalty,
        "saved_model": export_path,
    }
    best_bleu = out / "best_bleu.weights.h5.json"
    if best_bleu.is_file():
        summary["best_validation"] = json.loads(best_bleu.read_text(encoding="utf-8"))
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


def _load_trained(model_dir: str):
    """(model, tokenizer, config) from a --model-dir written by ``train`` or ``run``."""
    from keras_transformer.decoding.load import load_model_dir

    return load_model_dir(model_dir)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from keras_transformer.data.sources import read_parallel_files
    from keras_transformer.decoding.load import open_translator
    from keras_transformer.evaluation import bleu_metric, score_corpus

    sampling = _sampling_options(args)
    pairs = read_parallel_files(args.source, args.reference)
    bleu_metric(args.target_lang, args.bleu_tokenize)  # a missing tokenizer package fails before translating
    _decoding_threads(args.workers)
    opened = open_translator(
        args.model_dir, beam_size=args.beam_size, length_penalty=args.length_penalty,
        early_stopping=args.early_stopping, **sampling,
    )
    print(f"weights: {opened.weights}", flush=True)
    print(f"translating {args.source} ({len(pairs)} sentences) with {opened.description}", flush=True)
    if args.n_best:
        from keras_transformer.decoding.corpus import format_n_best, n_best_lines

        _check_n_best(args.n_best, opened)
        entries = n_best_lines(opened.require("n_best"), pairs.sources, args.n_best, batch_size=args.batch_size,
                               workers=args.workers)
        hypotheses = [sentence[0][0] if sentence else "" for sentence in entries]  # BLEU of the best hypothesis
        text = format_n_best(entries)
        if args.output:
            pathlib.Path(args.output).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
    else:
        hypotheses = _translate_lines(
            opened.translate, pairs.sources, batch_size=args.batch_size, workers=args.workers
        )
        if args.output:
            pathlib.Path(args.output).write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    print(score_corpus(hypotheses, pairs.targets, target_lang=args.target_lang, tokenize=args.bleu_tokenize),
          flush=True)
    return 0


def _check_n_best(n: int, opened) -> None:
    """``--n-best`` within ``1..beam size`` of the opened translator (before any translation)."""
    opened.require("n_best")
    beam = opened.settings.get("beam_size")
    if isinstance(beam, int) and n > beam:
        raise CliError(
            f"--n-best {n} exceeds the beam size {beam}: beam search keeps {beam} hypotheses per sentence"
            + (" (the SavedModel's exported beam size)" if opened.kind == "saved_model" else "; raise --beam-size")
        )


def _cmd_export(args: argparse.Namespace) -> int:
    model, tokenizer, config = _load_trained(args.model_dir)
    if args.format == "ctranslate2":
        from keras_transformer.export.ctranslate2 import export_ctranslate2

        if args.xla:
            raise CliError("--xla applies to the SavedModel export, not to --format ctranslate2")
        if args.sampling or any(getattr(args, f"sampling_{n}") is not None for n in ("topk", "topp", "temperature")):
            raise CliError("--sampling and --sampling-* apply to the SavedModel export, not to --format ctranslate2")
        alpha = config.length_penalty if args.length_penalty is None else args.length_penalty
        decoding = {"max_length": config.max_length, "extra_decode_length": config.extra_decode_length,
                    "beam_size": args.beam_size, "length_penalty": alpha}
        path = export_ctranslate2(model, tokenizer, args.export_dir, quantization=args.quantization,
                                  decoding=decoding, overwrite=args.overwrite)
        print(f"exported {path} (CTranslate2, weights {args.quantization or 'float32'}; translate it with "
              f"`keras-transformer translate --model {path}`)", flush=True)
        return 0
    if args.quantization:
        raise CliError("--quantization applies to --format ctranslate2")
    from keras_transformer.export import export_saved_model

    sampling = {"sampling_topk": args.sampling_topk, "sampling_topp": args.sampling_topp,
                "sampling_temperature": args.sampling_temperature}
    with_sample = args.sampling or any(v is not None for v in sampling.values())
    translator, _, _ = _make_translator(
        model, tokenizer, config, args.beam_size, args.length_penalty, args.xla,
        early_stopping=args.early_stopping, xla_max_rows=args.xla_max_rows or None,
        **{k: v for k, v in sampling.items() if v is not None},
    )
    path = export_saved_model(translator, args.export_dir, version=args.version, overwrite=args.overwrite,
                              sampling=with_sample)
    xla = "no"
    if args.xla:
        xla = f"yes, for up to {args.xla_max_rows} decoding rows" if args.xla_max_rows else "yes, every search"
    sample = ""
    if with_sample:
        sample = (f"; signature sample: top-k {translator.sampling_topk or 'off'}, top-p {translator.sampling_topp}, "
                  f"temperature {translator.sampling_temperature}")
    print(f"exported {path} (XLA-compiled search: {xla}{sample})", flush=True)
    return 0


def _cmd_average(args: argparse.Namespace) -> int:
    from keras_transformer.training import checkpoints

    if args.last < 1:
        raise CliError(f"--last must be at least 1, got {args.last}")
    folder = pathlib.Path(args.model_dir)
    paths = checkpoints.list_checkpoints(folder / "checkpoints")
    if len(paths) < args.last:
        raise CliError(f"{folder / 'checkpoints'} holds {len(paths)} checkpoints; --last {args.last} needs that many")
    output = args.output or str(folder / "averaged.weights.h5")
    checkpoints.average_checkpoints(paths[-args.last :], output)
    print(f"averaged {', '.join(pathlib.Path(p).name for p in paths[-args.last:])} into {output}", flush=True)
    if args.save_model:
        model, _, _ = _load_trained(args.model_dir)
        model.load_weights(output)
        _save_model_atomically(model, folder / "model.keras")
        checkpoints.write_model_record(
            folder / "model.keras", paths[-args.last :], "average-checkpoints",
            state=checkpoints.read_state(folder / "checkpoints"),
        )
        print(f"saved the averaged model as {checkpoints.describe_model_weights(folder / 'model.keras')}", flush=True)
    return 0


def _split_lines(text: str) -> list[str]:
    """One sentence per ``\\n``-terminated line (a ``\\r`` before it is dropped).

    Unlike ``str.splitlines``, characters such as U+2028 or form feed inside a
    line do not split it, so output line i always translates input line i.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _decode_lines(data: bytes, name: str) -> list[str]:
    """UTF-8 ``data`` as lines (see :func:`_split_lines`).

    Raises:
        CliError: naming ``name``, the 1-based line and the byte column of the
            first invalid UTF-8 sequence.
    """
    try:
        return _split_lines(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise CliError(f"{name}, line {line}: not UTF-8 (invalid byte at column {column}); nothing was translated") from None


def _translate(args: argparse.Namespace) -> int:
    from keras_transformer.decoding.load import folder_kind, open_translator

    if folder_kind(args.model) is None:
        raise CliError(
            f"no model at {args.model}: expected a SavedModel version folder ({args.model}/saved_model.pb), a "
            "CTranslate2 export (model.bin, keras_transformer.json) or a trained model folder (model.keras, "
            "spm.model, config.json)"
        )
    options = _sampling_options(args)
    if args.signature == "sample":
        raise CliError("--signature sample: sample with --seed (and --sampling-topk/--sampling-topp/"
                       "--sampling-temperature) instead")
    if args.input == "-":
        name, data = "stdin", sys.stdin.buffer.read()
    else:
        path = pathlib.Path(args.input)
        if not path.is_file():
            raise CliError(f"input file not found: {path}")
        name, data = str(path), path.read_bytes()
    lines = _decode_lines(data, name)
    _decoding_threads(args.workers)
    opened = open_translator(args.model, beam_size=args.beam_size, length_penalty=args.length_penalty, **options)
    translate_fn = opened.translate
    if args.signature != "serving_default":
        if opened.kind != "saved_model":
            raise CliError("--signature applies to a SavedModel")
        if args.n_best:
            raise CliError("--n-best uses the SavedModel's n_best signature: drop --signature")
        signature = opened.translator.signatures[args.signature]
        translate_fn = lambda batch: signature(batch)  # noqa: E731
    print(f"weights: {opened.weights}", file=sys.stderr, flush=True)
    print(f"translating {name} with {opened.description}", file=sys.stderr, flush=True)
    if args.n_best:
        from keras_transformer.decoding.corpus import format_n_best, n_best_lines

        _check_n_best(args.n_best, opened)
        entries = n_best_lines(opened.require("n_best"), lines, args.n_best, batch_size=args.batch_size,
                               workers=args.workers)
        text = format_n_best(entries)
    else:
        translations = _translate_lines(translate_fn, lines, batch_size=args.batch_size, workers=args.workers)
        text = "".join(t + "\n" for t in translations)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        pathlib.Path(args.output).write_text(text, encoding="utf-8")
    return 0


def _score(args: argparse.Namespace) -> int:
    from keras_transformer.decoding.load import folder_kind, open_translator
    from keras_transformer.decoding.scoring import format_scores, read_aligned_lines, score_lines

    if folder_kind(args.model) is None:
        raise CliError(
            f"no model at {args.model}: expected a trained model folder (model.keras, spm.model, config.json) or a "
            f"SavedModel version folder ({args.model}/saved_model.pb)"
        )
    if args.batch_size < 1:
        raise CliError(f"--batch-size must be at least 1, got {args.batch_size}")
    sources, targets = read_aligned_lines(args.source, args.target)
    opened = open_translator(args.model, length_penalty=args.length_penalty)
    score_fn = opened.require("score")
    alpha = opened.settings.get("length_penalty")
    print(f"scoring {len(sources)} pairs of {args.source} / {args.target} with {args.model} (score = log P / "
          f"((5 + |Y|) / 6)^{alpha})", file=sys.stderr, flush=True)
    scores = score_lines(score_fn, sources, targets, batch_size=args.batch_size, per_token=args.per_token)
    text = format_scores(scores, per_token=args.per_token)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        pathlib.Path(args.output).write_text(text, encoding="utf-8")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from keras_transformer import visualization

    if args.kind == "attention":
        model, tokenizer = visualization.load_model_and_tokenizer(args.model_dir)
        result = visualization.plot_attention_heads(
            model, tokenizer, args.source, args.target, layer=args.layer, path=args.output
        )
        heads, t_len, s_len = result.weights.shape
        if args.target is None:
            print(f"greedy translation: {result.target}", flush=True)
        print(
            f"wrote {result.path}: encoder-decoder attention of decoder layer {result.layer + 1} of {model.num_layers}, "
            f"{heads} heads, {t_len} target x {s_len} source pieces",
            flush=True,
        )
    else:
        result = visualization.plot_positional_encoding(args.d_model, args.length, path=args.output)
        print(f"wrote {result.path}: sinusoidal positional encoding [{args.length}, {args.d_model}]", flush=True)
    return 0


ALPHA_HELP = "beam search length penalty alpha >= 0 (Section 6.1; Wu et al., 2016); default: the model config's (0.6)"


def _alpha(text: str) -> float:
    """``--length-penalty``: a float >= 0, checked before any training or loading starts."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    """An int >= 1 (``--n-best``), checked before any loading starts."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


N_BEST_HELP = (
    "write the N best beam-search hypotheses of each sentence instead of its translation, N lines per sentence, "
    "best first: 'index ||| hypothesis ||| score' (0-based sentence index, score = log P / length penalty with 6 "
    "decimals; the Moses/fairseq n-best format); 1 <= N <= the beam size (default: off)"
)


def add_stopping_flag(p) -> None:
    """``--no-early-stopping``: tensor2tensor's exhaustive stopping bound instead of fairseq/CTranslate2's rule."""
    p.add_argument(
        "--no-early-stopping", dest="early_stopping", action="store_false", default=True,
        help="beam search stops a sentence only when no alive hypothesis can beat its finished ones "
        "(tensor2tensor; slower, same BLEU on Multi30k) instead of once beam-size hypotheses are finished "
        "(default: stop once beam-size hypotheses are finished)",
    )


def _sampling_options(args: argparse.Namespace) -> dict:
    """``open_translator``'s sampling keywords from ``--seed`` / ``--sampling-*`` (empty: no sampling).

    Raises:
        CliError: when sampling flags come with ``--beam-size`` above 1,
            ``--length-penalty`` or ``--n-best`` (all beam search's).
    """
    options = {"sampling_topk": args.sampling_topk, "sampling_topp": args.sampling_topp,
               "sampling_temperature": args.sampling_temperature, "seed": args.seed}
    options = {k: v for k, v in options.items() if v is not None}
    if options and (args.beam_size not in (None, 1) or args.length_penalty is not None):
        raise CliError("--seed and --sampling-topk/--sampling-topp/--sampling-temperature sample; they exclude "
                       "--beam-size and --length-penalty (beam search)")
    if options and getattr(args, "n_best", None):
        raise CliError("--n-best lists beam search's hypotheses; it excludes --seed and --sampling-topk/"
                       "--sampling-topp/--sampling-temperature")
    return options


def _number(text: str, flag: str, cast, ok, what: str):
    """An argparse value of ``cast(text)`` for which ``ok`` holds, else an ArgumentTypeError naming ``what``."""
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{flag} must be {what}, got {text}")
    return value


def _topk(text: str) -> int:
    return _number(text, "--sampling-topk", int, lambda k: k >= 0, "an int >= 0")


def _topp(text: str) -> float:
    return _number(text, "--sampling-topp", float, lambda p: 0.0 < p <= 1.0, "in (0, 1]")


def _temperature(text: str) -> float:
    return _number(text, "--sampling-temperature", float, lambda t: 0.0 < t < math.inf, "a finite number > 0")


def add_sampling_flags(p, seed: bool = True) -> None:
    """``--sampling-topk``, ``--sampling-topp``, ``--sampling-temperature`` (and ``--seed``): sampled translation."""
    p.add_argument(
        "--sampling-topk", type=_topk, default=None, metavar="K",
        help="sample (e.g. for back-translation) from the K most probable tokens of each step (0: from all; 1: "
        "greedy); default: no sampling, or 0 when another sampling flag is given",
    )
    p.add_argument(
        "--sampling-topp", type=_topp, default=None, metavar="P",
        help="sample from the nucleus: the fewest most probable tokens (at most max(K, 64)) whose probability "
        "reaches P, in (0, 1]; default: no sampling, or 1.0 (all) when another sampling flag is given",
    )
    p.add_argument(
        "--sampling-temperature", type=_temperature, default=None, metavar="T",
        help="sample from softmax(logits / T), T > 0; default: no sampling, or 1.0 when another sampling flag is given",
    )
    if seed:
        p.add_argument(
            "--seed", type=int, default=None, metavar="S",
            help="sample with this seed (the same seed, input and --batch-size give the same translations); "
            "default: no sampling, or 0 when a --sampling-* flag is given",
        )


def add_bleu_tokenize_flag(p) -> None:
    """``--bleu-tokenize``: sacreBLEU's tokenizer, overriding the one of the target language."""
    from keras_transformer.evaluation import BLEU_TOKENIZERS

    p.add_argument(
        "--bleu-tokenize", choices=BLEU_TOKENIZERS, default=None,
        help="sacreBLEU tokenizer, e.g. intl (Unicode punctuation split in any script) or char (default: by "
        "--target-lang: zh for Chinese, ja-mecab for Japanese, ko-mecab for Korean, 13a otherwise); chrF needs none",
    )


def _non_negative_int(text: str) -> int:
    """An int >= 0, checked when the flags are parsed."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_workers_flag(p) -> None:
    """``--workers``: batches translated at once (one TensorFlow thread each)."""
    cores = os.cpu_count() or 1
    p.add_argument(
        "--workers", type=int, default=cores,
        help=f"batches translated at once, one TensorFlow thread each (default: the CPU cores, here {cores})",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``keras-transformer`` (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="keras-transformer", description="The Transformer (Vaswani et al., 2017) for machine translation."
    )
    from keras_transformer import __version__

    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add_data_flags(p, files: bool):
        p.add_argument("--data-dir", help="folder holding multi30k/ and tatoeba_spa_eng/ (default: $KERAS_TRANSFORMER_DATA)")
        p.add_argument("--cache-dir", help="where a downloaded Multi30k goes (default: ~/.cache/keras_transformer)")
        p.add_argument("--no-download", action="store_true", help="never download; fail if the files are missing (default: download Multi30k when it is missing)")
        if files:
            p.add_argument("--train-source", help="training source file (plain or .gz), instead of Multi30k (default: none, Multi30k)")
            p.add_argument("--train-target", help="training target file, line-aligned with --train-source (default: none)")
            p.add_argument("--valid-source", help="validation source file (default: none, no validation)")
            p.add_argument("--valid-target", help="validation target file (default: none)")
            p.add_argument("--tsv", help="a TSV file of source<TAB>target pairs, instead of Multi30k (default: none)")
            p.add_argument("--tfds", help="a TFDS translation dataset, e.g. wmt14_translate/de-en, instead of Multi30k (default: none)")
            p.add_argument("--tfds-data-dir", help="TFDS data directory (prepared datasets are used offline; default: TFDS's own, "
                "$TFDS_DATA_DIR or ~/tensorflow_datasets)")
        p.add_argument(
            "--dataset", choices=tuple(DATASET_NAMES), default=None,
            help="a corpus read from --data-dir with its own train/valid/test split (default: multi30k unless "
            "another data flag is given): multi30k (en->de) or tatoeba_spa_eng (tatoeba_spa_eng/spa.txt, es->en, 2,000 valid and "
            "2,000 test pairs held out with seed 0)",
        )
        p.add_argument(
            "--source-lang",
            help="source language: with --dataset, the direction (default: the corpus's, e.g. es for "
            "tatoeba_spa_eng); with --tfds, the feature key (wmt14_translate/de-en reads de->en unless given "
            "--source-lang en); ignored for files",
        )
        p.add_argument(
            "--target-lang",
            help="target language (default: the corpus's; unknown for files/TSV): picks sacreBLEU's tokenizer "
            "(zh: zh, ja: ja-mecab, ko: ko-mecab, else 13a) and, with --dataset/--tfds, the direction",
        )
        add_bleu_tokenize_flag(p)
        p.add_argument(
            "--on-error", choices=("raise", "skip"), default="raise",
            help="bad lines (empty side, invalid UTF-8): stop with an error naming file and line (raise, the default), "
            "or skip and count them",
        )
        p.add_argument("--limit-train", type=int, default=0, help="use only the first N training pairs (default 0: all)")
        p.add_argument("--limit-test", type=int, default=0, help="use only the first N validation/test pairs (default 0: all)")

    def add_training_flags(p, epochs: int, minutes: float, average_last: int):
        p.add_argument("--preset", default="small", help="model preset: tiny, small, base, big (default: small)")
        p.add_argument(
            "--vocab-size", type=int, default=None,
            help="shared SentencePiece vocabulary size (default 8000, or the --prepared-dir folder's)",
        )
        p.add_argument("--batch-tokens", type=int, default=None, help="tokens per batch (default: the preset's)")
        p.add_argument("--warmup-steps", type=int, default=None, help="Eq. 3 warmup (default: the preset's)")
        p.add_argument("--dropout-rate", type=float, default=None, help="P_drop (default: the preset's)")
        p.add_argument("--num-layers", type=int, default=None, help="N, encoder and decoder layers (default: preset's)")
        p.add_argument("--d-model", type=int, default=None, help="model width (default: the preset's)")
        p.add_argument("--num-heads", type=int, default=None, help="attention heads h (default: the preset's)")
        p.add_argument("--dff", type=int, default=None, help="feed-forward inner width (default: the preset's)")
        p.add_argument(
            "--label-smoothing", type=float, default=None, help="epsilon_ls, Section 5.4 (default: the preset's)"
        )
        p.add_argument("--max-length", type=int, default=None, help="longest sequence in tokens (default: preset's)")
        p.add_argument(
            "--length-policy", choices=("drop", "truncate"), default="drop",
            help="what to do with pairs longer than --max-length, reported either way (default: drop)",
        )
        p.add_argument("--epochs", type=int, default=epochs, help=f"passes over the training data (default {epochs})")
        p.add_argument(
            "--max-train-minutes", type=float, default=minutes,
            help=f"stop training after this many minutes (0: no limit; default {minutes:g})",
        )
        p.add_argument(
            "--learning-rate-scale", type=float, default=None, help="multiplies the Eq. 3 learning rate (default: preset's)"
        )
        p.add_argument("--gradient-accumulation-steps", type=int, default=None, help="batches per update (default 1: no accumulation)")
        p.add_argument("--save-freq", type=int, default=None, help="checkpoint every N batches (default: each epoch)")
        p.add_argument(
            "--average-last", type=int, default=average_last,
            help=f"average the last N checkpoints at the end (Section 6.1; 0 or 1: no; default {average_last})",
        )
        p.add_argument(
            "--average-span", type=_span, default=1.0,
            help="with --average-last: only checkpoints from the last fraction of the training steps, e.g. 0.25 "
            "(a time budget fits fewer epochs on a slower machine; default 1: no bound)",
        )
        xla = p.add_mutually_exclusive_group()
        xla.add_argument("--jit-compile", dest="jit_compile", action="store_true", default=None, help="XLA on (default: on with a GPU or TPU, off on a CPU)")
        xla.add_argument("--no-jit-compile", dest="jit_compile", action="store_false", help="XLA off (default: see --jit-compile)")
        p.add_argument(
            "--precision", choices=("auto", "float32", "mixed_float16", "mixed_bfloat16"), default="auto",
            help="auto (default): mixed_bfloat16 where the CPU (AVX512_BF16/AMX), GPU (compute capability >= 8.0) "
            "or TPU has native bfloat16, mixed_float16 with loss scaling on older GPUs, float32 otherwise",
        )
        p.add_argument("--strategy", default="auto", help="tf.distribute strategy: auto, mirrored, multi_worker (TF_CONFIG) or default (default: auto)")
        p.add_argument("--seed", type=int, default=0, help="random seed of initialization, shuffling, dropout (default 0)")
        p.add_argument(
            "--log-every", type=int, default=50,
            help="off a terminal: a progress line every N training steps (default 50); a terminal shows a progress bar",
        )
        p.add_argument(
            "--valid-bleu-every", type=_non_negative_int, default=0,
            help="translate the validation sentences and score BLEU/chrF every N training steps; 0 (default): at "
            "each epoch end. Keeps best_bleu.weights.h5 and logs to TensorBoard",
        )
        p.add_argument(
            "--valid-bleu-sentences", type=_non_negative_int, default=500,
            help="how many validation sentences (the first N) validation BLEU translates (default 500; 0: no "
            "validation BLEU)",
        )
        p.add_argument(
            "--valid-bleu-beam-size", type=_positive_int, default=1,
            help="beams of validation BLEU's search (default 1: greedy, the cheapest)",
        )
        p.add_argument(
            "--early-stopping-patience", type=_non_negative_int, default=0,
            help="stop after P validations without improvement of --early-stopping-metric (default 0: never); "
            "resumable: re-running a stopped run trains nothing",
        )
        p.add_argument(
            "--early-stopping-metric", choices=("bleu", "loss"), default="bleu",
            help="bleu (default): validation BLEU, counted per BLEU validation; loss: validation loss, per epoch",
        )

    run = sub.add_parser(
        "run", help="train, evaluate, export and translate in one go (Multi30k en-de, or --dataset tatoeba_spa_eng)"
    )
    add_data_flags(run, files=False)
    run.add_argument("--output-dir", default="runs/multi30k", help="vocabulary, checkpoints, model and export (default: runs/multi30k)")
    add_training_flags(run, epochs=20, minutes=6.0, average_last=0)
    run.add_argument("--beam-size", type=int, default=4, help="beam size for the test set (1: greedy; default 4)")
    run.add_argument("--length-penalty", type=_alpha, default=None, help=ALPHA_HELP)
    add_stopping_flag(run)
    run.add_argument("--eval-batch-size", type=int, default=128, help="sentences per translation batch (default 128)")
    run.add_argument("--num-examples", type=int, default=5, help="test sentences to print (default 5)")
    run.set_defaults(func=_run)

    def add_prepare_flags(p, prepare_command: bool):
        default = "" if prepare_command else ", when train prepares the folder"
        p.add_argument(
            "--vocab-sample-size", type=int, default=None,
            help="most sentences (both sides) a new vocabulary is trained on, a seeded uniform sample as "
            f"SentencePiece's input_sentence_size (default: the folder's, else 1,000,000{default})",
        )
        p.add_argument(
            "--num-shards", type=int, default=None,
            help="training shards; write a multiple of the workers that will read them (default: the folder's, "
            f"else 32{default})",
        )
        p.add_argument(
            "--processes", type=int, default=None,
            help=f"tokenizing processes (default: the CPU cores, here {os.cpu_count()}{default})",
        )

    train = sub.add_parser("train", help="train a vocabulary and a model (resumes when re-run after a kill)")
    train.add_argument("--model-dir", required=True, help="vocabulary, config, checkpoints, logs and model.keras (required)")
    add_data_flags(train, files=True)
    add_training_flags(train, epochs=20, minutes=0.0, average_last=0)
    train.add_argument(
        "--prepared-dir",
        help="stream the training data from this prepared folder (see `prepare`): prepared first if needed, and "
        "again when the sources, the vocabulary, --max-length or --length-policy changed; without data flags, "
        "the sources it was prepared from (default: none, the data is tokenized into memory at every start)",
    )
    train.add_argument(
        "--shuffle-buffer-size", type=int, default=100_000,
        help="with --prepared-dir: records per shuffle block of each worker (default 100000)",
    )
    add_prepare_flags(train, prepare_command=False)
    train.set_defaults(func=_cmd_train)

    prep = sub.add_parser(
        "prepare", help="tokenize a corpus once into id shards with a manifest, for train --prepared-dir"
    )
    prep.add_argument("--output-dir", required=True, help="the prepared folder (reused when it already matches; required)")
    add_data_flags(prep, files=True)
    prep.add_argument("--vocab", help="an existing SentencePiece model to use (default: train one, or keep the "
                                      "folder's)")
    prep.add_argument(
        "--vocab-size", type=int, default=None, help="size of a trained vocabulary (default: the folder's, else 8000)"
    )
    prep.add_argument(
        "--max-length", type=int, default=256,
        help="longest kept sequence in tokens, EOS included; use the model's (default 256: the base and big presets')",
    )
    prep.add_argument(
        "--length-policy", choices=("drop", "truncate"), default="drop",
        help="what to do with pairs longer than --max-length (counted either way; default drop)",
    )
    add_prepare_flags(prep, prepare_command=True)
    prep.add_argument("--force", action="store_true", help="prepare again even when the folder matches (default: reuse it)")
    prep.set_defaults(func=_cmd_prepare)

    average = sub.add_parser("average-checkpoints", help="average the last N checkpoints (Section 6.1)")
    average.add_argument("--model-dir", required=True, help="the --model-dir of train (or --output-dir of run; required)")
    average.add_argument("--last", type=int, default=5, help="how many (the paper: 5 for base, 20 for big; default 5)")
    average.add_argument("--output", help="where the average goes (default: <model-dir>/averaged.weights.h5)")
    average.add_argument("--save-model", action="store_true", help="also replace <model-dir>/model.keras with it (default: keep model.keras)")
    average.set_defaults(func=_cmd_average)

    evaluate = sub.add_parser("evaluate", help="translate a test set with a trained model and score BLEU/chrF")
    evaluate.add_argument(
        "--model-dir", required=True,
        help="a trained model folder (train/run), a CTranslate2 export, or a SavedModel version folder "
        "(which translates with its exported beam size and alpha); required",
    )
    evaluate.add_argument("--source", required=True, help="source sentences, one per line (required)")
    evaluate.add_argument("--reference", required=True, help="reference translations, line-aligned (required)")
    evaluate.add_argument("--output", help="write the translations (or the --n-best list) here (default: not written)")
    evaluate.add_argument(
        "--target-lang",
        help="language of the references: picks sacreBLEU's tokenizer (zh: zh, ja: ja-mecab, ko: ko-mecab, "
        "any other: 13a; default: none given, 13a)",
    )
    add_bleu_tokenize_flag(evaluate)
    evaluate.add_argument(
        "--beam-size", type=int, default=None, help="beams, 1: greedy (default 4, or a SavedModel's exported one)"
    )
    evaluate.add_argument("--length-penalty", type=_alpha, default=None, help=ALPHA_HELP)
    add_stopping_flag(evaluate)
    evaluate.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    evaluate.add_argument(
        "--n-best", type=_positive_int, default=None,
        help=N_BEST_HELP + "; the list goes to --output (default: stdout) and BLEU/chrF score the best hypothesis",
    )
    add_sampling_flags(evaluate)
    add_workers_flag(evaluate)
    evaluate.set_defaults(func=_cmd_evaluate)

    export = sub.add_parser("export", help="export a trained model as a TF Serving SavedModel or for CTranslate2")
    export.add_argument("--model-dir", required=True, help="the --model-dir of train (or --output-dir of run; required)")
    export.add_argument(
        "--export-dir", required=True,
        help="saved_model: TF Serving base path, the model goes to <dir>/<version>; ctranslate2: the model directory "
        "(required)",
    )
    export.add_argument(
        "--format", choices=("saved_model", "ctranslate2"), default="saved_model",
        help="saved_model (TF Serving, default) or ctranslate2 (pip install 'keras_transformer[ctranslate2]')",
    )
    export.add_argument(
        "--quantization", default=None,
        choices=("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32"),
        help="ctranslate2 weight type (default: float32 as trained)",
    )
    export.add_argument("--version", type=int, default=1, help="saved_model version folder (default 1)")
    export.add_argument("--beam-size", type=int, default=4, help="beam size of serving_default (default 4)")
    export.add_argument("--length-penalty", type=_alpha, default=None, help=ALPHA_HELP)
    add_stopping_flag(export)
    export.add_argument(
        "--xla", action="store_true",
        help="XLA-compiled search for small searches, see --xla-max-rows (serve with --xla_cpu_compilation_enabled; "
        "default: no XLA)",
    )
    export.add_argument(
        "--xla-max-rows", type=int, default=4,
        help="with --xla: the most decoding rows (sentences x beams) a search may have to run in XLA; larger ones "
        "run the graph-mode search, which drops finished sentences (0: every search; default 4: one sentence's "
        "greedy or beam-4 search, where XLA is faster on a CPU)",
    )
    export.add_argument(
        "--sampling", action="store_true",
        help="add the `sample` signature (sentences, seed -> sampled translations, for back-translation) with the "
        "--sampling-* settings (default: not added, unless a --sampling-* flag is given)",
    )
    add_sampling_flags(export, seed=False)
    export.add_argument("--overwrite", action="store_true", help="replace an existing export (default: stop if it exists)")
    export.set_defaults(func=_cmd_export)

    tr = sub.add_parser("translate", help="translate a file or stdin with an export or a trained model")
    tr.add_argument(
        "--model", "--saved-model", dest="model", required=True,
        help="a SavedModel version folder (e.g. runs/multi30k/export/1), a CTranslate2 export or a trained model "
        "folder (e.g. runs/multi30k); required",
    )
    tr.add_argument(
        "--beam-size", type=int, default=None,
        help="beams (1: greedy); default 4, or the export's. A SavedModel keeps the beam size and alpha it was "
        "exported with (--beam-size 1 uses its greedy signature)",
    )
    tr.add_argument("--length-penalty", type=_alpha, default=None, help=ALPHA_HELP)
    tr.add_argument("--input", default="-", help="one sentence per line; - is stdin (default: -, stdin)")
    tr.add_argument("--output", default="-", help="where translations go; - is stdout (default: -, stdout)")
    tr.add_argument(
        "--signature", default="serving_default",
        help="SavedModel signature to call: serving_default, beam_search or greedy (default: serving_default)",
    )
    tr.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    tr.add_argument("--n-best", type=_positive_int, default=None, help=N_BEST_HELP)
    add_sampling_flags(tr)
    add_workers_flag(tr)
    tr.set_defaults(func=_translate)

    sc = sub.add_parser(
        "score",
        help="forced decoding: log-probability and length-normalised score of given translations",
        description="Scores each target line as a translation of the source line (teacher forcing): one line per "
        "pair, 'score<TAB>log_prob<TAB>num_tokens', where log_prob = log P(target | source) (natural log, "
        "EOS included), num_tokens = target pieces + EOS and score = log_prob / ((5 + num_tokens) / 6)^alpha, the "
        "length-normalised score beam search ranks by (Wu et al. 2016). With --per-token two more fields: the "
        "target's pieces and their log-probabilities, space-separated. An empty target is scored as EOS alone, an "
        "empty source as the model sees it (EOS alone); pairs longer than the model's max_length are scored from "
        "their first max_length - 1 pieces and named in a warning.",
    )
    sc.add_argument(
        "--model", required=True,
        help="a trained model folder (e.g. runs/multi30k) or a SavedModel version folder (e.g. "
        "runs/multi30k/export/1, exported with the score signature); required",
    )
    sc.add_argument("--source", required=True, help="source sentences, one per line (UTF-8, plain or .gz; required)")
    sc.add_argument("--target", required=True, help="target sentences, line-aligned with --source (required)")
    sc.add_argument("--per-token", action="store_true", help="also write each target piece and its log-probability (default: off)")
    sc.add_argument("--output", default="-", help="where the score lines go; - is stdout (default: -, stdout)")
    sc.add_argument("--batch-size", type=int, default=64, help="pairs per batch (default 64)")
    sc.add_argument(
        "--length-penalty", type=_alpha, default=None,
        help="alpha of the length normalisation; default: the model config's (0.6), or the SavedModel's exported "
        "alpha (which it must equal)",
    )
    sc.set_defaults(func=_score)

    plot = sub.add_parser("plot", help="draw attention heads or the positional encoding to a PNG")
    kinds = plot.add_subparsers(dest="kind", required=True)
    att = kinds.add_parser(
        "attention", help="encoder-decoder attention of every head of one decoder layer, for one sentence pair"
    )
    att.add_argument(
        "--model-dir", default="runs/multi30k",
        help="the --output-dir of `run` or --model-dir of `train` (model.keras, spm.model); default: runs/multi30k",
    )
    att.add_argument("--source", required=True, help="the source sentence (required)")
    att.add_argument("--target", default=None, help="the target sentence (default: the model's greedy translation)")
    att.add_argument("--layer", type=int, default=-1, help="decoder layer, negative counts from the end (default: -1)")
    att.add_argument("--output", default="attention.png", help="the PNG to write (default: attention.png)")
    att.set_defaults(func=_plot)
    pe = kinds.add_parser("positional-encoding", help="the sinusoid matrix of Section 3.5")
    pe.add_argument("--d-model", type=int, default=256, help="encoding width, even (default 256)")
    pe.add_argument("--length", type=int, default=100, help="number of positions (default 100)")
    pe.add_argument("--output", default="positional_encoding.png", help="the PNG to write (default: positional_encoding.png)")
    pe.set_defaults(func=_plot)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``keras-transformer`` console script.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 2 on bad input (the error is printed
        to stderr as one line).
    """
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from keras_transformer.runtime import default_onednn

    onednn = default_onednn()  # before TensorFlow loads: it reads the switch once
    # Keras warns that fit() ignores shuffle=True for a tf.data input; ours shuffles itself.
    warnings.filterwarnings("ignore", message=r".*`shuffle=True` was passed.*")
    from keras_transformer.evaluation import MissingTokenizerPackages

    args = build_parser().parse_args(argv)
    args.onednn = onednn
    try:
        return args.func(args)
    except (CliError, FileNotFoundError, ValueError, MissingTokenizerPackages) as error:
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
