"""The ``keras-transformer`` command line: flags -> :class:`~keras_transformer.settings.RunSettings` -> one
:class:`~keras_transformer.Runner` call -> printed.

Commands (each the Runner method of the same name):

``run``
    The main job in one go, on Multi30k English→German (or ``--dataset
    tatoeba_spa_eng``, Spanish→English, or ``tatoeba_cmn_eng``,
    Chinese→English): vocabulary, training, BLEU on the
    test split, the SavedModel export and a few translated test sentences.
``train``
    Vocabulary and model from a named corpus, parallel files, a TSV file,
    TFDS or a prepared folder (``--prepared-dir``), under a ``tf.distribute``
    strategy, with XLA, mixed precision, gradient accumulation, validation
    BLEU and early stopping as asked; re-running the same command after a
    kill resumes where it stopped.
``prepare``
    Tokenize a corpus once into sharded id files with a manifest, for
    ``train --prepared-dir``.
``average-checkpoints``
    Average the last N checkpoints (Section 6.1).
``evaluate`` / ``export``
    Score a test set (sacreBLEU, chrF) / export a TF Serving SavedModel or a
    CTranslate2 model directory.
``translate`` / ``score``
    Translate a file or stdin (beam search, greedy, sampling, n-best lists) /
    forced-decoding scores of given translations.
``plot attention`` / ``plot positional-encoding``
    The encoder-decoder attention heads of a sentence pair / the sinusoids
    of Section 3.5, to a PNG.

Every flag that is a run setting takes its default and help text from
:mod:`keras_transformer.settings`; the library names settings in its
messages (``data.valid_source``) and this module writes them as flags
(``--valid-source``). Every command stops with a one-line error (exit status
2) on bad input, naming the file or flag at fault.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
import warnings
from collections.abc import Sequence

from keras_transformer import settings as kt_settings
from keras_transformer.settings import DEFAULT_AVERAGE_LAST, QUICKSTART_RUN_DIR, RunSettings

__all__ = ["build_parser", "main"]

#: When this process started the command line (the closing lines say how long the command took).
_STARTED = time.monotonic()

#: ``--dataset`` choices (also :data:`keras_transformer.settings.DATASET_NAMES`).
DATASET_NAMES = kt_settings.DATASET_NAMES

#: Setting path -> its flag. The library names settings as ``{data.valid_source}``; messages and help texts
#: write them as these flags.
FLAGS = {
    "data.data_dir": "--data-dir", "data.cache_dir": "--cache-dir", "data.download": "--no-download",
    "data.train_source": "--train-source", "data.train_target": "--train-target",
    "data.valid_source": "--valid-source", "data.valid_target": "--valid-target", "data.tsv": "--tsv",
    "data.tfds": "--tfds", "data.tfds_data_dir": "--tfds-data-dir", "data.dataset": "--dataset",
    "data.source_lang": "--source-lang", "data.target_lang": "--target-lang", "data.on_error": "--on-error",
    "data.limit_train": "--limit-train", "data.limit_test": "--limit-test", "data.length_policy": "--length-policy",
    "data.prepared_dir": "--prepared-dir", "data.shuffle_buffer_size": "--shuffle-buffer-size",
    "data.subword_samples": "--subword-samples", "data.subword_alpha": "--subword-alpha",
    "data.num_shards": "--num-shards", "data.processes": "--processes",
    "vocabulary.vocab_size": "--vocab-size", "vocabulary.sample_size": "--vocab-sample-size",
    "vocabulary.model": "--vocab",
    "training.preset": "--preset", "training.batch_tokens": "--batch-tokens", "training.warmup_steps": "--warmup-steps",
    "training.dropout_rate": "--dropout-rate", "training.attention_dropout_rate": "--attention-dropout-rate",
    "training.num_layers": "--num-layers", "training.d_model": "--d-model", "training.num_heads": "--num-heads",
    "training.dff": "--dff", "training.norm_first": "--norm-first", "training.label_smoothing": "--label-smoothing",
    "training.max_length": "--max-length",
    "training.learning_rate_scale": "--learning-rate-scale", "training.epochs": "--epochs",
    "training.max_train_minutes": "--max-train-minutes", "training.cooldown_fraction": "--cooldown-fraction",
    "training.gradient_accumulation_steps": "--gradient-accumulation-steps", "training.save_freq": "--save-freq",
    "training.average_last": "--average-last", "training.average_span": "--average-span",
    "training.jit_compile": "--jit-compile", "training.precision": "--precision", "training.strategy": "--strategy",
    "training.seed": "--seed", "training.log_every": "--log-every",
    "validation.bleu_every": "--valid-bleu-every", "validation.bleu_sentences": "--valid-bleu-sentences",
    "validation.bleu_beam_size": "--valid-bleu-beam-size",
    "validation.early_stopping_patience": "--early-stopping-patience",
    "validation.early_stopping_metric": "--early-stopping-metric",
    "evaluation.bleu_tokenize": "--bleu-tokenize", "evaluation.test_batch_size": "--eval-batch-size",
    "evaluation.num_examples": "--num-examples",
    "decoding.beam_size": "--beam-size", "decoding.length_penalty": "--length-penalty",
    "decoding.early_stopping": "--no-early-stopping", "decoding.batch_size": "--batch-size",
    "decoding.workers": "--workers", "decoding.sampling_topk": "--sampling-topk",
    "decoding.sampling_topp": "--sampling-topp", "decoding.sampling_temperature": "--sampling-temperature",
    "decoding.seed": "--seed", "decoding.no_repeat_ngram_size": "--no-repeat-ngram-size",
    "decoding.repetition_penalty": "--repetition-penalty", "decoding.placeholders": "--no-placeholders",
    "decoding.mbr_candidates": "--mbr-candidates", "decoding.mbr_metric": "--mbr-metric",
    "export.format": "--format", "export.version": "--version", "export.quantization": "--quantization",
    "export.xla": "--xla", "export.xla_max_rows": "--xla-max-rows", "export.sampling": "--sampling",
    "export.overwrite": "--overwrite", "decoding.ensemble": "--model-dir",
    # Arguments of the Runner's methods that messages name.
    "argument.n_best": "--n-best", "argument.signature": "--signature", "argument.last": "--last",
    "argument.input": "--input", "argument.export_dir": "--export-dir", "argument.force": "--force",
}


def flag_name(path: str) -> str:
    """The flag of a setting path, for messages (the path itself when no command has that flag)."""
    return FLAGS.get(path, path)


# ---------------------------------------------------------------------- flag value types


def _number(text: str, cast, ok, what: str, flag: str = ""):
    try:
        value = cast(text)
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise argparse.ArgumentTypeError(f"not {kind}: {text!r}") from None
    if not ok(value):  # also rejects nan
        raise argparse.ArgumentTypeError(f"{flag + ' ' if flag else ''}must be {what}, got {text}")
    return value


def _alpha(text: str) -> float:
    return _number(text, float, lambda v: v >= 0, ">= 0")


def _positive_int(text: str) -> int:
    return _number(text, int, lambda v: v >= 1, ">= 1")


def _non_negative_int(text: str) -> int:
    return _number(text, int, lambda v: v >= 0, ">= 0")


def _positive_float(text: str) -> float:
    return _number(text, float, lambda v: v > 0, "> 0")


def _span(text: str) -> float:
    return _number(text, float, lambda v: 0.0 < v <= 1.0, "in (0, 1]")


def _topk(text: str) -> int:
    return _number(text, int, lambda k: k >= 0, "an int >= 0", "--sampling-topk")


def _topp(text: str) -> float:
    return _number(text, float, lambda p: 0.0 < p <= 1.0, "in (0, 1]", "--sampling-topp")


def _temperature(text: str) -> float:
    return _number(text, float, lambda t: 0.0 < t < math.inf, "a finite number > 0", "--sampling-temperature")


N_BEST_HELP = (
    "write the N best beam-search hypotheses of each sentence instead of its translation, N lines per sentence, "
    "best first: 'index ||| hypothesis ||| score' (0-based sentence index, score = log P / length penalty with 6 "
    "decimals; the Moses/fairseq n-best format); 1 <= N <= the beam size (default: off)"
)


# ---------------------------------------------------------------------- flags from settings


class _Flags:
    """Adds a parser's flags whose default and help come from a :class:`RunSettings`, remembering their settings.

    Args:
        parser: the command's parser.
        base: the settings its defaults come from.
    """

    def __init__(self, parser: argparse.ArgumentParser, base: RunSettings):
        self.parser, self.base, self.fields = parser, base, {}
        parser.set_defaults(_fields=self.fields, _base=base)

    def help(self, path: str, extra: str = "") -> tuple[str, object]:
        section, name = path.split(".")
        values = getattr(self.base, section)
        text, default_text, _ = kt_settings.setting_help(type(values), name)
        default = getattr(values, name)
        field_default = {f.name: f.default for f in dataclasses.fields(values)}[name]
        shown = default_text if default_text is not None and default == field_default else (
            f"{default:g}" if isinstance(default, float) else str(default))
        return f"{kt_settings.render(text, flag_name)}{extra} (default: {shown})", default

    def add(self, path: str, *, extra: str = "", negate: bool = False, group=None, text: str = "", **kwargs):
        """The flag of the setting ``path`` (:data:`FLAGS`); ``negate``: ``store_false`` of a boolean setting.

        ``text`` replaces the setting's help text (a negating flag says what it turns off).
        """
        flag = FLAGS[path]
        help_text, default = self.help(path, extra)
        if text:
            help_text = f"{text} (default: {help_text.rsplit('(default: ', 1)[1]}"
        dest = kwargs.pop("dest", flag.lstrip("-").replace("-", "_"))
        choices = kt_settings.setting_help(type(getattr(self.base, path.split(".")[0])), path.split(".")[1])[2]
        if negate:
            kwargs.update(action="store_false")
        elif isinstance(default, bool) and "action" not in kwargs:
            kwargs.update(action="store_true")
        elif choices and "choices" not in kwargs:
            kwargs["choices"] = choices
        self.fields[dest] = path
        (group or self.parser).add_argument(flag, dest=dest, default=default, help=help_text, **kwargs)

    def add_on_off(self, path: str, *, off_help: str, text: str = "") -> None:
        """``--name`` / ``--no-name`` (mutually exclusive) for a setting whose None means "decided elsewhere"."""
        group = self.parser.add_mutually_exclusive_group()
        self.add(path, group=group, action="store_true", text=text)
        flag = FLAGS[path]
        group.add_argument("--no-" + flag.lstrip("-"), dest=flag.lstrip("-").replace("-", "_"), action="store_false",
                           default=None, help=f"{off_help} (default: see {flag})")


def _data_flags(flags: _Flags, files: bool) -> None:
    flags.add("data.data_dir")
    flags.add("data.cache_dir")
    flags.add("data.download", negate=True, text="never download; fail if the files are missing")
    if files:
        for name in ("train_source", "train_target", "valid_source", "valid_target", "tsv", "tfds", "tfds_data_dir"):
            flags.add("data." + name)
    flags.add("data.dataset")
    flags.add("data.source_lang")
    flags.add("data.target_lang")
    flags.add("evaluation.bleu_tokenize", choices=_bleu_tokenizers())
    flags.add("data.on_error")
    flags.add("data.limit_train", type=int)
    flags.add("data.limit_test", type=int)


def _bleu_tokenizers():
    from keras_transformer.evaluation import BLEU_TOKENIZERS

    return BLEU_TOKENIZERS


def _training_flags(flags: _Flags) -> None:
    flags.add("training.preset")
    flags.add("vocabulary.vocab_size", type=int)
    for name, kind in (("batch_tokens", int), ("warmup_steps", int), ("dropout_rate", float),
                       ("attention_dropout_rate", float), ("num_layers", int), ("d_model", int), ("num_heads", int),
                       ("dff", int), ("label_smoothing", float), ("max_length", int)):
        flags.add("training." + name, type=kind)
    flags.add_on_off("training.norm_first", text="pre-LayerNorm, x + Sublayer(LayerNorm(x)) (Xiong et al., 2020)",
                     off_help="the paper's post-LayerNorm (Section 3.1)")
    flags.add("data.length_policy")
    flags.add("data.subword_samples", type=_non_negative_int)
    flags.add("data.subword_alpha", type=_positive_float)
    for name, kind in (("epochs", int), ("max_train_minutes", float), ("cooldown_fraction", float),
                       ("learning_rate_scale", float),
                       ("gradient_accumulation_steps", int), ("save_freq", int), ("average_last", int),
                       ("average_span", _span)):
        flags.add("training." + name, type=kind)
    flags.add_on_off("training.jit_compile", off_help="XLA off")
    for name, kind in (("precision", None), ("strategy", None), ("seed", int), ("log_every", int)):
        flags.add("training." + name, type=kind)
    for name, kind in (("bleu_every", _non_negative_int), ("bleu_sentences", _non_negative_int),
                       ("bleu_beam_size", _positive_int), ("early_stopping_patience", _non_negative_int)):
        flags.add("validation." + name, type=kind)
    flags.add("validation.early_stopping_metric")


def _prepare_flags(flags: _Flags) -> None:
    flags.add("vocabulary.sample_size", type=int)
    flags.add("data.num_shards", type=int)
    flags.add("data.processes", type=int)


def _beam_flags(flags: _Flags, early_stopping: bool = True) -> None:
    flags.add("decoding.beam_size", type=int)
    flags.add("decoding.length_penalty", type=_alpha)
    if early_stopping:
        flags.add("decoding.early_stopping", negate=True)


def _mbr_flags(flags: _Flags) -> None:
    """Minimum Bayes risk selection from beam search's best hypotheses."""
    flags.add("decoding.mbr_candidates", type=_non_negative_int, metavar="N")
    flags.add("decoding.mbr_metric")


def _sampling_flags(flags: _Flags, seed: bool = True) -> None:
    flags.add("decoding.sampling_topk", type=_topk, metavar="K")
    flags.add("decoding.sampling_topp", type=_topp, metavar="P")
    flags.add("decoding.sampling_temperature", type=_temperature, metavar="T")
    if seed:
        flags.add("decoding.seed", type=int, metavar="S")


def _guard_flags(flags: _Flags) -> None:
    """The repetition guard's flags and the switch of carried-through spans."""
    for path, kind in (("decoding.no_repeat_ngram_size", _non_negative_int), ("decoding.repetition_penalty", float)):
        flags.add(path, type=kind)
    flags.add("decoding.placeholders", negate=True)


def _batch_flags(flags: _Flags, workers: bool = True) -> None:
    flags.add("decoding.batch_size", type=int)
    if workers:
        flags.add("decoding.workers", type=int)


# ---------------------------------------------------------------------- commands


def _settings(args: argparse.Namespace) -> RunSettings:
    """The :class:`RunSettings` of the parsed flags: the command's base settings with every flag's value."""
    sections: dict[str, dict] = {}
    for dest, path in args._fields.items():
        section, name = path.split(".")
        sections.setdefault(section, {})[name] = getattr(args, dest)
    settings = args._base
    for section, values in sections.items():
        settings = settings.replace_in(section, **values)
    return settings


def _runner(args: argparse.Namespace, folder: str | list[str], stderr: bool = False):
    """The Runner of ``folder``; several folders (``--model-dir A B``) make an ensemble of A with the others."""
    from keras_transformer.runner.runner import Runner, stderr_log

    settings = _settings(args)
    if isinstance(folder, list):
        folder, others = folder[0], folder[1:]
        settings = settings.replace_in("decoding", ensemble=tuple(others))
    return Runner(folder, settings, log=stderr_log if stderr else None)


def _took() -> str:
    """How long this command has run, for its closing line (TensorFlow's start-up included)."""
    seconds = time.monotonic() - _STARTED
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def _cmd_run(args: argparse.Namespace) -> int:
    _runner(args, args.output_dir).run()
    print(f"the whole command took {_took()}", flush=True)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    _runner(args, args.model_dir).train()
    print(f"the whole command took {_took()}; the model is {args.model_dir}/model.keras", flush=True)
    return 0


def _cmd_prepare(args: argparse.Namespace) -> int:
    corpus = _runner(args, args.output_dir).prepare(args.output_dir, force=args.force, max_length=args.max_length)
    print(f"train with: keras-transformer train --prepared-dir {corpus.directory} --model-dir DIR ...", flush=True)
    return 0


def _cmd_average(args: argparse.Namespace) -> int:
    _runner(args, args.model_dir).average(args.last, output=args.output, save_model=args.save_model)
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    _runner(args, args.model_dir).evaluate(args.source, args.reference, output=args.output, n_best=args.n_best,
                                           target_lang=args.target_lang)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    _runner(args, args.model_dir).export(args.export_dir)
    return 0


def _cmd_translate(args: argparse.Namespace) -> int:
    _runner(args, args.model, stderr=True).translate_file(args.input, args.output, n_best=args.n_best,
                                                           signature=args.signature)
    return 0


def _cmd_score(args: argparse.Namespace) -> int:
    _runner(args, args.model, stderr=True).score(args.source, args.target, output=args.output,
                                                  per_token=args.per_token)
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from keras_transformer import visualization

    if args.kind == "positional-encoding":
        result = visualization.plot_positional_encoding(args.d_model, args.length, path=args.output)
        print(f"wrote {result.path}: sinusoidal positional encoding [{args.length}, {args.d_model}]", flush=True)
        return 0
    result = _runner(args, args.model_dir).plot_attention(args.source, args.target, layer=args.layer,
                                                          output=args.output)
    heads, t_len, s_len = result.weights.shape
    if args.target is None:
        print(f"greedy translation: {result.target}", flush=True)
    print(f"wrote {result.path}: encoder-decoder attention of decoder layer {result.layer + 1} of {result.num_layers}, "
          f"{heads} heads, "
          f"{t_len} target x {s_len} source pieces", flush=True)
    return 0


# ---------------------------------------------------------------------- the parser


def _add_run(sub) -> None:
    run = sub.add_parser("run", help="train, evaluate, export and translate in one go (Multi30k en-de, or "
                         "--dataset tatoeba_spa_eng / tatoeba_cmn_eng)")
    flags = _Flags(run, RunSettings.quickstart())
    _data_flags(flags, files=False)
    run.add_argument("--output-dir", default=QUICKSTART_RUN_DIR,
                     help=f"vocabulary, checkpoints, model and export (default: {QUICKSTART_RUN_DIR})")
    _training_flags(flags)
    _beam_flags(flags)
    _mbr_flags(flags)
    _guard_flags(flags)
    flags.add("evaluation.test_batch_size", type=int)
    flags.add("evaluation.num_examples", type=int)
    run.set_defaults(func=_cmd_run)


def _add_train(sub) -> None:
    train = sub.add_parser("train", help="train a vocabulary and a model (resumes when re-run after a kill)")
    train.add_argument("--model-dir", required=True,
                       help="vocabulary, config, checkpoints, logs and model.keras (required)")
    flags = _Flags(train, RunSettings())
    _data_flags(flags, files=True)
    _training_flags(flags)
    flags.add("data.prepared_dir")
    flags.add("data.shuffle_buffer_size", type=int)
    _prepare_flags(flags)
    train.set_defaults(func=_cmd_train)


def _add_prepare(sub) -> None:
    from keras_transformer.config import TransformerConfig

    prep = sub.add_parser("prepare", help="tokenize a corpus once into id shards with a manifest, for train "
                          "--prepared-dir")
    prep.add_argument("--output-dir", required=True, help="the prepared folder (reused when it already matches; "
                      "required)")
    flags = _Flags(prep, RunSettings())
    _data_flags(flags, files=True)
    flags.add("vocabulary.model")
    flags.add("vocabulary.vocab_size", type=int)
    prep.add_argument("--max-length", type=int, default=TransformerConfig.max_length,
                      help="longest kept sequence in tokens, EOS included; use the model's (default "
                      f"{TransformerConfig.max_length}: the base and big presets')")
    flags.add("data.length_policy")
    _prepare_flags(flags)
    prep.add_argument("--force", action="store_true", help="prepare again even when the folder matches "
                      "(default: reuse it)")
    prep.set_defaults(func=_cmd_prepare)


def _add_average(sub) -> None:
    average = sub.add_parser("average-checkpoints", help="average the last N checkpoints (Section 6.1)")
    average.add_argument("--model-dir", required=True, help="the --model-dir of train (or --output-dir of run; "
                         "required)")
    average.add_argument("--last", type=int, default=DEFAULT_AVERAGE_LAST,
                         help=f"how many (the paper: 5 for base, 20 for big; default {DEFAULT_AVERAGE_LAST})")
    average.add_argument("--output", help="where the average goes (default: <model-dir>/averaged.weights.h5)")
    average.add_argument("--save-model", action="store_true", help="also replace <model-dir>/model.keras with it "
                         "(default: keep model.keras)")
    _Flags(average, RunSettings())
    average.set_defaults(func=_cmd_average)


def _add_evaluate(sub) -> None:
    evaluate = sub.add_parser("evaluate", help="translate a test set with a trained model and score BLEU/chrF")
    evaluate.add_argument("--model-dir", required=True, nargs="+", help="a trained model folder (train/run), a "
                          "CTranslate2 export, or a SavedModel version folder (which translates with its exported beam "
                          "size and alpha); several trained model folders (one vocabulary) translate as an ensemble, "
                          "their log-probabilities averaged at each step; required")
    evaluate.add_argument("--source", required=True, help="source sentences, one per line (required)")
    evaluate.add_argument("--reference", required=True, help="reference translations, line-aligned (required)")
    evaluate.add_argument("--output", help="write the translations (or the --n-best list) here (default: not "
                          "written)")
    evaluate.add_argument("--target-lang", help="language of the references: picks sacreBLEU's tokenizer (zh: zh, "
                          "ja: ja-mecab, ko: ko-mecab, any other: 13a) and the Moses rules of the lowercased "
                          "tokenized BLEU (default: the target language the model folder was trained on, as its "
                          "config.json records it; none recorded: 13a, English rules)")
    flags = _Flags(evaluate, RunSettings())
    flags.add("evaluation.bleu_tokenize", choices=_bleu_tokenizers())
    _beam_flags(flags)
    _batch_flags(flags, workers=False)
    evaluate.add_argument("--n-best", type=_positive_int, default=None, help=N_BEST_HELP + "; the list goes to "
                          "--output (default: stdout) and BLEU/chrF score the best hypothesis")
    _mbr_flags(flags)
    _sampling_flags(flags)
    _guard_flags(flags)
    flags.add("decoding.workers", type=int)
    evaluate.set_defaults(func=_cmd_evaluate)


def _add_export(sub) -> None:
    export = sub.add_parser("export", help="export a trained model as a TF Serving SavedModel or for CTranslate2")
    export.add_argument("--model-dir", required=True, nargs="+", help="the --model-dir of train (or --output-dir of "
                        "run); several folders (one vocabulary) export one SavedModel of their ensemble; required")
    export.add_argument("--export-dir", required=True, help="saved_model: TF Serving base path, the model goes to "
                        "<dir>/<version>; ctranslate2: the model directory (required)")
    flags = _Flags(export, RunSettings())
    flags.add("export.format")
    flags.add("export.quantization")
    flags.add("export.version", type=int)
    flags.add("decoding.beam_size", type=int, extra=" of serving_default")
    flags.add("decoding.length_penalty", type=_alpha)
    flags.add("decoding.early_stopping", negate=True)
    flags.add("export.xla")
    flags.add("export.xla_max_rows", type=int)
    flags.add("export.sampling")
    _sampling_flags(flags, seed=False)
    _guard_flags(flags)
    flags.add("export.overwrite")
    export.set_defaults(func=_cmd_export)


def _add_translate(sub) -> None:
    tr = sub.add_parser("translate", help="translate a file or stdin with an export or a trained model")
    tr.add_argument("--model", "--saved-model", dest="model", required=True, nargs="+", help="a SavedModel version "
                    "folder (e.g. runs/multi30k/export/1), a CTranslate2 export or a trained model folder (e.g. "
                    "runs/multi30k); several trained model folders (one vocabulary) translate as an ensemble; "
                    "required")
    flags = _Flags(tr, RunSettings())
    _beam_flags(flags, early_stopping=False)
    tr.add_argument("--input", default="-", help="one sentence per line; - is stdin (default: -, stdin)")
    tr.add_argument("--output", default="-", help="where translations go; - is stdout (default: -, stdout)")
    tr.add_argument("--signature", default="serving_default", help="the SavedModel signature that translates: "
                    "serving_default or beam_search (beam search as exported) or greedy; of its other signatures, "
                    "n_best is --n-best's, sample is --seed's, score is the score command's, and token_ids gives ids, "
                    "not text (default: serving_default)")
    _batch_flags(flags, workers=False)
    tr.add_argument("--n-best", type=_positive_int, default=None, help=N_BEST_HELP)
    _mbr_flags(flags)
    _sampling_flags(flags)
    _guard_flags(flags)
    flags.add("decoding.workers", type=int)
    tr.set_defaults(func=_cmd_translate)


SCORE_DESCRIPTION = (
    "Scores each target line as a translation of the source line (teacher forcing): one line per pair, "
    "'score<TAB>log_prob<TAB>num_tokens', where log_prob = log P(target | source) (natural log, EOS included), "
    "num_tokens = target pieces + EOS and score = log_prob / ((5 + num_tokens) / 6)^alpha, the length-normalised "
    "score beam search ranks by (Wu et al. 2016). With --per-token two more fields: the target's pieces and their "
    "log-probabilities, space-separated. An empty target is scored as EOS alone, an empty source as the model sees "
    "it (EOS alone); pairs longer than the model's max_length are scored from their first max_length - 1 pieces and "
    "named in a warning."
)


def _add_score(sub) -> None:
    sc = sub.add_parser("score", help="forced decoding: log-probability and length-normalised score of given "
                        "translations", description=SCORE_DESCRIPTION)
    sc.add_argument("--model", required=True, nargs="+", help="a trained model folder (e.g. runs/multi30k) or a "
                    "SavedModel version folder (e.g. runs/multi30k/export/1, exported with the score signature); "
                    "several trained model folders score as an ensemble; required")
    sc.add_argument("--source", required=True, help="source sentences, one per line (UTF-8, plain or .gz; "
                    "required)")
    sc.add_argument("--target", required=True, help="target sentences, line-aligned with --source (required)")
    sc.add_argument("--per-token", action="store_true", help="also write each target piece and its "
                    "log-probability (default: off)")
    sc.add_argument("--output", default="-", help="where the score lines go; - is stdout (default: -, stdout)")
    flags = _Flags(sc, RunSettings())
    _batch_flags(flags, workers=False)
    flags.add("decoding.length_penalty", type=_alpha, extra="; a SavedModel scores with its "
              "exported alpha, which it must equal")
    sc.set_defaults(func=_cmd_score)


def _add_plot(sub) -> None:
    plot = sub.add_parser("plot", help="draw attention heads or the positional encoding to a PNG")
    kinds = plot.add_subparsers(dest="kind", required=True)
    att = kinds.add_parser("attention", help="encoder-decoder attention of every head of one decoder layer, for one "
                           "sentence pair")
    att.add_argument("--model-dir", default=QUICKSTART_RUN_DIR, help="a trained model folder (the --output-dir of "
                     f"`run` or --model-dir of `train`); default: {QUICKSTART_RUN_DIR}")
    att.add_argument("--source", required=True, help="the source sentence (required)")
    att.add_argument("--target", default=None, help="the target sentence (default: the model's greedy translation)")
    att.add_argument("--layer", type=int, default=-1, help="decoder layer, negative counts from the end (default: "
                     "-1)")
    att.add_argument("--output", default="attention.png", help="the PNG to write (default: attention.png)")
    _Flags(att, RunSettings())
    att.set_defaults(func=_cmd_plot)
    pe = kinds.add_parser("positional-encoding", help="the sinusoid matrix of Section 3.5")
    pe.add_argument("--d-model", type=int, default=256, help="encoding width, even (default 256)")
    pe.add_argument("--length", type=int, default=100, help="number of positions (default 100)")
    pe.add_argument("--output", default="positional_encoding.png", help="the PNG to write (default: "
                    "positional_encoding.png)")
    pe.set_defaults(func=_cmd_plot)


#: What each command does, shown under its usage line (``--help``).
DESCRIPTIONS = {
    "run": "The main job in one go: trains (or resumes) a shared SentencePiece vocabulary and a Transformer on "
           "Multi30k English->German (or --dataset), translates the test split with beam search and scores it "
           "(sacreBLEU, chrF, and the literature's lowercased tokenized BLEU), exports the TF Serving SavedModel to "
           "<output-dir>/export/1 and prints a few translated test sentences. Re-running it resumes a stopped run; "
           "a finished one is only translated and exported again.",
    "train": "Trains a vocabulary and a model into --model-dir from a named corpus, line-aligned files, a TSV file, "
             "TFDS or a prepared folder; re-running the same command after a kill resumes where it stopped.",
    "prepare": "Tokenizes a corpus once into sharded id files with a manifest, which `train --prepared-dir` streams "
               "(WMT's size); a folder that already matches is reused.",
    "average-checkpoints": "Averages the weights of the last N checkpoints of a run folder (Section 6.1).",
    "evaluate": "Translates a test set with a trained model folder (or several, as an ensemble), a SavedModel or a "
                "CTranslate2 export and scores it against the references: sacreBLEU BLEU and chrF with their "
                "signatures.",
    "export": "Exports a trained model folder (or several, as an ensemble) as a TF Serving SavedModel "
              "(<export-dir>/<version>) or as a CTranslate2 model directory.",
    "translate": "Translates one sentence per input line into one line of output, with a SavedModel (the beam size "
                 "and alpha it was exported with), a CTranslate2 export or trained model folders (beam search, greedy "
                 "search or sampling chosen here). An empty line gives an empty line; a line without letters or "
                 "digits comes back as it is; from stdin or a pipe, each translation is written as soon as its line "
                 "is translated, so the command works as a filter.",
    "plot": "Draws the encoder-decoder attention heads of a sentence pair, or the positional encoding, to a PNG.",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``keras-transformer`` (see the module docstring)."""
    from keras_transformer import __version__

    parser = argparse.ArgumentParser(prog="keras-transformer",
                                     description="The Transformer (Vaswani et al., 2017) for machine translation.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_run, _add_train, _add_prepare, _add_average, _add_evaluate, _add_export, _add_translate,
                _add_score, _add_plot):
        add(sub)
    for name, command in sub.choices.items():
        command.description = command.description or DESCRIPTIONS[name]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``keras-transformer`` console script.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 2 on bad input (the error is printed
        to stderr as one line, settings named by their flags).
    """
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from keras_transformer.runtime import default_onednn

    default_onednn()  # before TensorFlow loads: it reads the switch once (the Runner prints what holds)
    # Keras warns that fit() ignores shuffle=True for a tf.data input; ours shuffles itself.
    warnings.filterwarnings("ignore", message=r".*`shuffle=True` was passed.*")
    from keras_transformer.evaluation import MissingTokenizerPackages

    global _STARTED
    _STARTED = time.monotonic() if argv is not None else _STARTED  # in-process calls: from the call
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError, RuntimeError, MissingTokenizerPackages) as error:
        if isinstance(error, RuntimeError) and not isinstance(error, kt_settings.SettingsMessage):
            raise  # a fault of ours or of a library: the traceback is due
        message = error.render(flag_name) if isinstance(error, kt_settings.SettingsMessage) else str(error)
        print(f"keras-transformer {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
