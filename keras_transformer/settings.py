"""The settings of a run, with every default in one place.

A run (:class:`keras_transformer.Runner`) reads its data, trains or reuses a
shared vocabulary, trains a model, validates it, translates and scores the
test split and exports it. :class:`RunSettings` holds every choice it makes,
in sections:

==============  =====================  ==========================================================
section         class                  what it decides
==============  =====================  ==========================================================
``data``        :class:`DataSettings`  which parallel text (a named corpus, files, TSV, TFDS or a
                                       prepared folder), languages, bad lines, limits
``vocabulary``  :class:`VocabularySettings`  the shared SentencePiece vocabulary (Section 3.4)
``training``    :class:`TrainingSettings`    the preset and its overrides (Table 3), epochs, time
                                       budget, precision, XLA, strategy, averaging (Section 6.1)
``validation``  :class:`ValidationSettings`  validation BLEU during training and early stopping
``evaluation``  :class:`EvaluationSettings`  how BLEU is scored (sacreBLEU's tokenizer), the test
                                       translation of ``run``
``decoding``    :class:`DecodingSettings`    beam search (Section 6.1) or sampling, batches, threads
``export``      :class:`ExportSettings`      the SavedModel / CTranslate2 export
==============  =====================  ==========================================================

The model's own hyper-parameters (Table 3) live in
:class:`keras_transformer.config.TransformerConfig` and its presets; a field
of :class:`TrainingSettings` left at ``None`` keeps the preset's value.

Every field's metadata holds its help text (``help``) and, for a default
that is not a plain value, what the default means (``default_text``). Texts
name other settings as ``{section.field}``: :func:`render` writes them as
``data.valid_source`` (the Python API's name) and the command line as its
flag (``--valid-source``); :class:`RunError` messages use the same
placeholders, so the library never speaks in flag names.

This module imports nothing but the standard library: lower layers take
their defaults from here (for example ``Translator``'s beam size), and the
command line builds its parser from it without loading TensorFlow.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "DEFAULT_AVERAGE_LAST",
    "DEFAULT_BEAM_SIZE",
    "DEFAULT_NUM_SHARDS",
    "DEFAULT_SUBWORD_ALPHA",
    "DEFAULT_VOCAB_SAMPLE_SIZE",
    "DEFAULT_VOCAB_SIZE",
    "DATASET_NAMES",
    "QUICKSTART_RUN_DIR",
    "DataSettings",
    "DecodingSettings",
    "EvaluationSettings",
    "ExportSettings",
    "RunError",
    "SettingsMessage",
    "RunSettings",
    "TrainingSettings",
    "ValidationSettings",
    "VocabularySettings",
    "render",
    "setting_help",
]

#: Pieces of a newly trained shared vocabulary (Section 3.4; the paper's 37k BPE is WMT's size).
DEFAULT_VOCAB_SIZE = 8000
#: Most sentences (both sides) a new vocabulary is trained on (a seeded uniform sample).
DEFAULT_VOCAB_SAMPLE_SIZE = 1_000_000
#: Training shards of a prepared folder (write a multiple of the workers that read them).
DEFAULT_NUM_SHARDS = 32
#: The exponent of sampled segmentations (subword regularization, Kudo 2018; ``data.subword_samples``):
#: on Multi30k's 8k unigram vocabulary, 0.4 changes about half the sentences and adds about 5% pieces
#: (0.3: three quarters, 11%; 0.5: a third, 3%).
DEFAULT_SUBWORD_ALPHA = 0.4
#: Beams of beam search (Section 6.1: "beam search with a beam size of 4").
DEFAULT_BEAM_SIZE = 4
#: Checkpoints ``average-checkpoints`` averages (Section 6.1: "the last 5 checkpoints" of the base model).
DEFAULT_AVERAGE_LAST = 5
#: Where the Quickstart (``keras-transformer run``, :meth:`RunSettings.quickstart`) writes its run.
QUICKSTART_RUN_DIR = "runs/multi30k"
#: The training settings of the Quickstart's main job (``keras-transformer run`` without flags,
#: :meth:`RunSettings.quickstart`): a budget of a few minutes, about four epochs of Multi30k on a
#: 2-core CPU. Chosen on the Multi30k validation set (README "Quickstart"): the ``compact`` preset
#: (twice `small`'s steps per minute), no dropout (the model sees each sentence about four
#: times; dropout only slows it down) and the average of the checkpoints of the last 200
#: updates (Section 6.1's averaging, written every 50 updates instead of per epoch).
QUICKSTART_TRAINING: dict[str, Any] = {"preset": "compact", "max_train_minutes": 6.0, "dropout_rate": 0.0,
                                       "save_freq": 50, "average_last": 4, "average_span": 0.3}
#: The training budget of the Quickstart's main job, in minutes.
QUICKSTART_TRAIN_MINUTES = QUICKSTART_TRAINING["max_train_minutes"]
#: The named corpora of ``data.dataset`` (:data:`keras_transformer.data.DATASETS` has their languages).
DATASET_NAMES = ("multi30k", "tatoeba_spa_eng", "tatoeba_cmn_eng")

_PLACEHOLDER = re.compile(r"\{([a-z_]+\.[a-z_0-9]+)\}")


def render(text: str, name_of: Callable[[str], str] | None = None) -> str:
    """``text`` with its ``{section.field}`` placeholders written as setting names.

    A placeholder ``{argument.name}`` names an argument of a
    :class:`~keras_transformer.Runner` method (``{argument.n_best}``),
    written ``n_best`` by default.

    Args:
        text: a help text or message with placeholders such as
            ``{data.valid_source}``.
        name_of: maps ``"data.valid_source"`` to the name to show (the
            command line passes its flag names); default: the name itself.

    Returns:
        The text, e.g. ``"give both data.valid_source and data.valid_target"``.
    """
    name_of = name_of or (lambda path: path.split(".", 1)[1] if path.startswith("argument.") else path)
    return _PLACEHOLDER.sub(lambda match: name_of(match.group(1)), text)


class SettingsMessage:
    """An exception whose message may name settings as ``{section.field}`` placeholders.

    ``str(error)`` writes them as Python names (``data.valid_source``);
    :meth:`render` lets the command line write its flags instead. Mixed into
    :class:`RunError` and the few library errors that name a setting.

    Args:
        template: the message, with placeholders.
    """

    def __init__(self, template: str):
        super().__init__(template)
        self.template = template

    def render(self, name_of: Callable[[str], str] | None = None) -> str:
        """The message with the settings named by ``name_of`` (see :func:`render`)."""
        return render(self.template, name_of)

    def __str__(self) -> str:
        return self.render()


class RunError(SettingsMessage, ValueError):
    """A mistake in a run's settings or inputs, said in one sentence (no traceback is due).

    Its message names settings as placeholders (:class:`SettingsMessage`).
    """


def _setting(default: Any, help: str, default_text: str | None = None, choices: tuple | None = None) -> Any:
    metadata = {"help": help, "default_text": default_text, "choices": choices}
    return dataclasses.field(default=default, metadata=metadata)


def _preset_value(help: str) -> Any:
    """A :class:`TrainingSettings` field that overrides the preset's value when not None."""
    return _setting(None, help, "the preset's")


def setting_help(section: type, name: str) -> tuple[str, str, tuple | None]:
    """``(help, default text, choices)`` of the field ``name`` of a settings class.

    The default text is the field's ``default_text``, else its default value
    (``"0"``, ``"raise"``, ...).

    Raises:
        KeyError: for an unknown field.
    """
    field = {f.name: f for f in dataclasses.fields(section)}[name]
    text = field.metadata["default_text"]
    if text is None:
        text = f"{field.default:g}" if isinstance(field.default, float) else str(field.default)
    return field.metadata["help"], text, field.metadata["choices"]


class _Section:
    """What every settings section shares: checked construction and ``replace``."""

    def replace(self, **changes: Any):
        """A copy with ``changes`` applied.

        Raises:
            RunError: for an unknown field.
        """
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise RunError(f"{type(self).__name__} has no setting {', '.join(unknown)}; it has {', '.join(sorted(names))}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serializable dict."""
        return dataclasses.asdict(self)


def _check_at_least(section: str, values: dict[str, Any], minimum: int) -> None:
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
            raise RunError(f"{{{section}.{name}}} must be an integer >= {minimum}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class DataSettings(_Section):
    """Which parallel text a run reads, and how (Section 5.1).

    One source at a time: a named ``dataset`` (read from ``data_dir``, with
    its own train/validation/test split), line-aligned files
    (``train_source``/``train_target``, optional ``valid_*``), a TSV file, a
    TFDS translation dataset, or, for training, a prepared folder
    (``prepared_dir``, token-id shards streamed from disk; WMT's size).
    With none given, Multi30k English->German.

    Raises:
        RunError: from :meth:`check`, for two sources at once, half a file
            pair, or a bad number or choice.
    """

    dataset: str | None = _setting(
        None, "a corpus read from {data.data_dir} with its own train/valid/test split: multi30k (en->de), "
        "tatoeba_spa_eng (tatoeba_spa_eng/spa.txt, es->en, 2,000 valid and 2,000 test pairs held out with seed 0) "
        "or tatoeba_cmn_eng (tatoeba_cmn_eng/cmn.txt, zh->en, 1,000 and 1,000 held out)",
        "multi30k unless another data source is given", DATASET_NAMES)
    data_dir: str | None = _setting(None, "folder holding multi30k/, tatoeba_spa_eng/ and tatoeba_cmn_eng/", "$KERAS_TRANSFORMER_DATA")
    cache_dir: str | None = _setting(None, "where a downloaded Multi30k goes", "~/.cache/keras_transformer")
    download: bool = _setting(True, "download Multi30k when it is missing (off: fail if the files are missing)",
                              "download")
    train_source: str | None = _setting(None, "training source file (plain or .gz), instead of Multi30k",
                                        "none, Multi30k")
    train_target: str | None = _setting(None, "training target file, line-aligned with {data.train_source}", "none")
    valid_source: str | None = _setting(None, "validation source file", "none, no validation")
    valid_target: str | None = _setting(None, "validation target file", "none")
    tsv: str | None = _setting(None, "a TSV file of source<TAB>target pairs, instead of Multi30k", "none")
    tfds: str | None = _setting(None, "a TFDS translation dataset, e.g. wmt14_translate/de-en, instead of Multi30k",
                                "none")
    tfds_data_dir: str | None = _setting(None, "TFDS data directory (prepared datasets are used offline)",
                                         "TFDS's own, $TFDS_DATA_DIR or ~/tensorflow_datasets")
    source_lang: str | None = _setting(
        None, "source language: with {data.dataset}, the direction; with {data.tfds}, the feature key "
        "(wmt14_translate/de-en reads de->en unless the source language is en); ignored for files",
        "the corpus's, e.g. es for tatoeba_spa_eng")
    target_lang: str | None = _setting(
        None, "target language: picks sacreBLEU's tokenizer (zh: zh, ja: ja-mecab, ko: ko-mecab, else 13a) and, "
        "with {data.dataset}/{data.tfds}, the direction", "the corpus's; unknown for files/TSV")
    on_error: str = _setting("raise", "bad lines (empty side, invalid UTF-8): stop with an error naming file and "
                             "line (raise), or skip and count them (skip)", choices=("raise", "skip"))
    limit_train: int = _setting(0, "use only the first N training pairs (0: all)")
    limit_test: int = _setting(0, "use only the first N validation/test pairs (0: all)")
    length_policy: str = _setting("drop", "what to do with pairs longer than the model's max_length, reported "
                                  "either way", choices=("drop", "truncate"))
    prepared_dir: str | None = _setting(
        None, "stream the training data from this prepared folder: prepared first if needed, and again when the "
        "sources, the vocabulary, the max length or {data.length_policy} changed; without a data source, the "
        "sources it was prepared from", "none, the data is tokenized into memory at every start")
    subword_samples: int = _setting(
        0, "subword regularization (Kudo, 2018): add N segmentations of each training pair drawn from the unigram "
        "vocabulary to its best one, fixed when the data is prepared, so that an epoch covers the data 1 + N times; "
        "in-memory training data only (0: off)")
    subword_alpha: float = _setting(
        DEFAULT_SUBWORD_ALPHA, "the exponent of those draws, P(segmentation)^alpha (smaller: more varied pieces)")
    shuffle_buffer_size: int = _setting(100_000, "with {data.prepared_dir}: records per shuffle block of each worker")
    num_shards: int | None = _setting(None, "training shards of a prepared folder; write a multiple of the workers "
                                      "that will read them", f"the folder's, else {DEFAULT_NUM_SHARDS}")
    processes: int | None = _setting(None, "tokenizing processes of a preparation",
                                     f"the CPU cores, here {os.cpu_count()}")

    def check(self) -> None:
        """Raises :class:`RunError` for settings that cannot hold together (before any work)."""
        _check_at_least("data", {"limit_train": self.limit_train, "limit_test": self.limit_test,
                                 "subword_samples": self.subword_samples}, 0)
        if not self.subword_alpha > 0:
            raise RunError(f"{{data.subword_alpha}} must be > 0, got {self.subword_alpha!r}")
        if self.subword_samples and self.prepared_dir:
            raise RunError("{data.subword_samples} needs in-memory training data: a {data.prepared_dir} holds one "
                           "segmentation of each pair")
        _check_at_least("data", {"shuffle_buffer_size": self.shuffle_buffer_size, "num_shards": self.num_shards,
                                 "processes": self.processes}, 1)
        if self.dataset is not None and self.dataset not in DATASET_NAMES:
            raise RunError(f"{{data.dataset}} must be one of {', '.join(DATASET_NAMES)}, got {self.dataset!r}")
        sources = self.sources_given()
        if len(sources) > 1:
            raise RunError(f"give one data source, not {' and '.join(sources)}")
        for first, second in (("train_source", "train_target"), ("valid_source", "valid_target")):
            if bool(getattr(self, first)) != bool(getattr(self, second)):
                raise RunError(f"give both {{data.{first}}} and {{data.{second}}}")

    def sources_given(self) -> list[str]:
        """The data sources named (placeholders such as ``{data.tsv}``), in a fixed order."""
        given = [("{data.train_source}/{data.train_target}", self.train_source or self.train_target),
                 ("{data.tsv}", self.tsv), ("{data.tfds}", self.tfds), ("{data.dataset}", self.dataset)]
        return [name for name, value in given if value]

    @property
    def files_given(self) -> bool:
        """Whether the training data is named (files, TSV or TFDS) instead of a corpus."""
        return bool(self.train_source or self.train_target or self.tsv or self.tfds)

    def resolved_data_dir(self) -> str | None:
        """``data_dir``, else ``$KERAS_TRANSFORMER_DATA``, else None."""
        return self.data_dir or os.environ.get("KERAS_TRANSFORMER_DATA") or None


@dataclasses.dataclass(frozen=True)
class VocabularySettings(_Section):
    """The shared source/target SentencePiece vocabulary (Section 3.4: one vocabulary, tied embeddings)."""

    vocab_size: int | None = _setting(
        None, "shared SentencePiece vocabulary size", f"{DEFAULT_VOCAB_SIZE}, or the prepared folder's")
    sample_size: int | None = _setting(
        None, "most sentences (both sides) a new vocabulary is trained on, a seeded uniform sample as "
        "SentencePiece's input_sentence_size", f"the folder's, else {DEFAULT_VOCAB_SAMPLE_SIZE:,}")
    model: str | None = _setting(None, "an existing SentencePiece model to use instead of training one",
                                 "train one, or keep the prepared folder's")

    def check(self) -> None:
        """Raises :class:`RunError` for a vocabulary size or sample size below 1."""
        _check_at_least("vocabulary", {"vocab_size": self.vocab_size, "sample_size": self.sample_size}, 1)


#: The :class:`TrainingSettings` fields that override a field of the preset's TransformerConfig.
CONFIG_OVERRIDES = ("batch_tokens", "warmup_steps", "dropout_rate", "attention_dropout_rate", "max_length",
                    "learning_rate_scale", "num_layers", "d_model", "num_heads", "dff", "label_smoothing",
                    "norm_first")


@dataclasses.dataclass(frozen=True)
class TrainingSettings(_Section):
    """The model (a preset of Table 3 and overrides) and how it trains (Section 5).

    A field of :data:`CONFIG_OVERRIDES` left at None keeps the preset's value.
    """

    preset: str = _setting("small", "model preset: tiny, compact, small, base, big (keras_transformer.config.PRESETS)")
    batch_tokens: int | None = _preset_value("tokens per batch (Section 5.1)")
    warmup_steps: int | None = _preset_value("Eq. 3 warmup")
    dropout_rate: float | None = _preset_value("P_drop, residual dropout (Section 5.4)")
    attention_dropout_rate: float | None = _preset_value("dropout on the attention weights (not in the paper)")
    num_layers: int | None = _preset_value("N, encoder and decoder layers")
    d_model: int | None = _preset_value("model width")
    num_heads: int | None = _preset_value("attention heads h")
    dff: int | None = _preset_value("feed-forward inner width (Eq. 2)")
    norm_first: bool | None = _preset_value("pre-LayerNorm, x + Sublayer(LayerNorm(x)) (Xiong et al., 2020); False: "
                                            "the paper's post-LayerNorm, LayerNorm(x + Sublayer(x)) (Section 3.1)")
    label_smoothing: float | None = _preset_value("epsilon_ls, Section 5.4")
    max_length: int | None = _preset_value("longest sequence in tokens, EOS included")
    learning_rate_scale: float | None = _preset_value("multiplies the Eq. 3 learning rate")
    epochs: int = _setting(20, "passes over the training data")
    max_train_minutes: float = _setting(0.0, "stop training after this many minutes (0: no limit)")
    cooldown_fraction: float = _setting(
        0.0, "with {training.max_train_minutes}: the learning rate decays linearly to 0 over this last fraction of "
        "the time budget, e.g. 0.3 (a cooldown, not in the paper; 0: Eq. 3 to the end)")
    gradient_accumulation_steps: int | None = _setting(None, "batches per update", "1: no accumulation")
    save_freq: int | None = _setting(None, "checkpoint every N batches (0: each epoch)", "each epoch")
    average_last: int = _setting(0, "average the last N checkpoints at the end (Section 6.1; 0 or 1: no)")
    average_span: float = _setting(1.0, "with {training.average_last}: only checkpoints from the last fraction of "
                                   "the training steps, e.g. 0.25 (a time budget fits fewer epochs on a slower "
                                   "machine; 1: no bound)")
    jit_compile: bool | None = _setting(None, "XLA for the training step", "on with a GPU or TPU, off on a CPU")
    precision: str = _setting(
        "auto", "auto: mixed_bfloat16 where the CPU (AVX512_BF16/AMX), GPU (compute capability >= 8.0) or TPU has "
        "native bfloat16, mixed_float16 with loss scaling on older GPUs, float32 otherwise",
        choices=("auto", "float32", "mixed_float16", "mixed_bfloat16"))
    strategy: str = _setting("auto", "tf.distribute strategy: auto, mirrored, multi_worker (TF_CONFIG) or default")
    seed: int = _setting(0, "random seed of initialization, shuffling, dropout")
    log_every: int = _setting(50, "off a terminal: a progress line every N training steps (a terminal shows a "
                              "progress bar)")

    def check(self) -> None:
        """Raises :class:`RunError` for a bad epoch count, budget, averaging or an unknown preset."""
        from keras_transformer.config import PRESETS

        if self.preset not in PRESETS:
            raise RunError(f"{{training.preset}}: unknown preset {self.preset!r}; known presets: {sorted(PRESETS)}")
        _check_at_least("training", {"epochs": self.epochs, "log_every": self.log_every,
                                     "gradient_accumulation_steps": self.gradient_accumulation_steps}, 1)
        _check_at_least("training", {"average_last": self.average_last, "save_freq": self.save_freq}, 0)
        if not self.max_train_minutes >= 0:
            raise RunError(f"{{training.max_train_minutes}} must be >= 0, got {self.max_train_minutes!r}")
        if not 0.0 <= self.cooldown_fraction <= 1.0:
            raise RunError(f"{{training.cooldown_fraction}} must be in [0, 1], got {self.cooldown_fraction!r}")
        if self.cooldown_fraction and not self.max_train_minutes:
            raise RunError("{training.cooldown_fraction} needs {training.max_train_minutes}: the cooldown is the end "
                           "of a time budget")
        if not 0.0 < self.average_span <= 1.0:
            raise RunError(f"{{training.average_span}} must be in (0, 1], got {self.average_span!r}")

    def config_overrides(self) -> dict[str, Any]:
        """The TransformerConfig fields this run sets (those of :data:`CONFIG_OVERRIDES` not None)."""
        return {name: getattr(self, name) for name in CONFIG_OVERRIDES if getattr(self, name) is not None}


@dataclasses.dataclass(frozen=True)
class ValidationSettings(_Section):
    """Validation BLEU during training and early stopping (:mod:`keras_transformer.training.validation`)."""

    bleu_every: int = _setting(0, "translate the validation sentences and score BLEU/chrF every N training steps; "
                               "0: at each epoch end. Keeps best_bleu.weights.h5 and logs to TensorBoard")
    bleu_sentences: int = _setting(500, "how many validation sentences (the first N) validation BLEU translates "
                                   "(0: no validation BLEU)")
    bleu_beam_size: int = _setting(1, "beams of validation BLEU's search (1: greedy, the cheapest)")
    early_stopping_patience: int = _setting(
        0, "stop after P validations without improvement of {validation.early_stopping_metric} (0: never); "
        "resumable: re-running a stopped run trains nothing")
    early_stopping_metric: str = _setting(
        "bleu", "bleu: validation BLEU, counted per BLEU validation; loss: validation loss, per epoch",
        choices=("bleu", "loss"))

    def check(self, has_validation_set: bool | None = None) -> None:
        """Raises :class:`RunError` when early stopping has nothing to monitor, or for a negative number.

        Args:
            has_validation_set: whether the run has validation pairs (None:
                not known yet, not checked).
        """
        _check_at_least("validation", {"bleu_every": self.bleu_every, "bleu_sentences": self.bleu_sentences,
                                       "early_stopping_patience": self.early_stopping_patience}, 0)
        _check_at_least("validation", {"bleu_beam_size": self.bleu_beam_size}, 1)
        if self.early_stopping_metric not in ("bleu", "loss"):
            raise RunError(f"{{validation.early_stopping_metric}} must be bleu or loss, got "
                           f"{self.early_stopping_metric!r}")
        if self.early_stopping_patience and has_validation_set is False:
            raise RunError("{validation.early_stopping_patience} needs a validation set (e.g. "
                           "{data.valid_source}/{data.valid_target})")
        if self.early_stopping_patience and self.early_stopping_metric == "bleu" and not self.bleu_sentences:
            raise RunError("{validation.early_stopping_metric} bleu needs validation BLEU: "
                           "{validation.bleu_sentences} must be > 0")


@dataclasses.dataclass(frozen=True)
class EvaluationSettings(_Section):
    """How translations are scored (sacreBLEU, chrF) and what ``run`` shows of the test split."""

    bleu_tokenize: str | None = _setting(
        None, "sacreBLEU tokenizer, e.g. intl (Unicode punctuation split in any script) or char; chrF needs none",
        "by the target language: zh for Chinese, ja-mecab for Japanese, ko-mecab for Korean, 13a otherwise")
    test_batch_size: int = _setting(128, "sentences per translation batch of the test split")
    num_examples: int = _setting(5, "test sentences to print")

    def check(self) -> None:
        """Raises :class:`RunError` for a batch size below 1 or a negative example count."""
        _check_at_least("evaluation", {"test_batch_size": self.test_batch_size}, 1)
        _check_at_least("evaluation", {"num_examples": self.num_examples}, 0)


@dataclasses.dataclass(frozen=True)
class DecodingSettings(_Section):
    """How sentences are translated: beam search (Section 6.1), greedy search or sampling.

    Any sampling setting (or ``seed``) means sampling, which excludes beam
    search's ``beam_size`` above 1 and ``length_penalty``.
    """

    beam_size: int | None = _setting(None, "beams (1: greedy). A SavedModel keeps the beam size and alpha it was "
                                     "exported with (1 uses its greedy signature)",
                                     f"{DEFAULT_BEAM_SIZE}, or the export's")
    length_penalty: float | None = _setting(None, "beam search length penalty alpha >= 0 (Section 6.1; Wu et al., "
                                            "2016)", "the model config's (0.6)")
    early_stopping: bool = _setting(
        True, "beam search stops a sentence once beam-size hypotheses are finished (off: only when no alive "
        "hypothesis can beat its finished ones, as tensor2tensor; slower, same BLEU on Multi30k)",
        "stop once beam-size hypotheses are finished")
    ensemble: tuple = _setting((), "further trained model folders (with the same vocabulary) whose models translate "
                               "with this one as an ensemble: their log-probabilities are averaged at each step",
                               "none, one model")
    mbr_candidates: int = _setting(
        0, "minimum Bayes risk decoding (Kumar and Byrne, 2004): translate with the hypothesis, of beam search's N "
        "best, that agrees most with the others ({decoding.mbr_metric} against each, weighted by the softmax of their "
        "scores); N <= the beam size (e.g. 4 with beam 8). With chrF it lengthens the output: on Multi30k's test2016 "
        "it raised chrF and lowered BLEU", "0, off: the best-scored hypothesis")
    mbr_metric: str = _setting("chrf", "the agreement {decoding.mbr_candidates} maximizes: sacreBLEU chrF or "
                               "sentence BLEU", choices=("chrf", "bleu"))
    no_repeat_ngram_size: int = _setting(
        0, "a repetition guard of every search: never write an n-gram of this size twice (0: off; n >= 2; "
        "CTranslate2's and fairseq's option of that name)")
    repetition_penalty: float = _setting(
        1.0, "a repetition guard of every search: divide the positive logits of the tokens already written by this "
        "(and multiply the negative ones), >= 1 (1: off; CTRL, Keskar et al. 2019)")
    placeholders: bool = _setting(
        True, "carry numbers, web and e-mail addresses of the source through unchanged (a placeholder piece for the "
        "model; vocabularies that have it, trained since it exists) (off: translate them as any text)", "on")
    batch_size: int = _setting(64, "sentences per batch")
    workers: int | None = _setting(None, "batches translated at once, one TensorFlow thread each",
                                   f"the CPU cores, here {os.cpu_count() or 1}")
    sampling_topk: int | None = _setting(None, "sample (e.g. for back-translation) from the K most probable tokens "
                                         "of each step (0: from all; 1: greedy)",
                                         "no sampling, or 0 when another sampling setting is given")
    sampling_topp: float | None = _setting(None, "sample from the nucleus: the fewest most probable tokens (at most "
                                           "max(K, 64)) whose probability reaches P, in (0, 1]",
                                           "no sampling, or 1.0 (all) when another sampling setting is given")
    sampling_temperature: float | None = _setting(None, "sample from softmax(logits / T), T > 0",
                                                  "no sampling, or 1.0 when another sampling setting is given")
    seed: int | None = _setting(None, "sample with this seed (the same seed, input and batch size give the same "
                                "translations)", "no sampling, or 0 when a sampling setting is given")

    def check(self, sampling_excludes_beam_search: bool = True) -> None:
        """Raises :class:`RunError` for numbers out of range or sampling mixed with beam search.

        Args:
            sampling_excludes_beam_search: refuse sampling settings given with
                a beam size above 1 or a length penalty (translation: one or
                the other). An export adds a ``sample`` signature beside beam
                search, and passes False.
        """
        _check_at_least("decoding", {"beam_size": self.beam_size, "batch_size": self.batch_size,
                                     "workers": self.workers}, 1)
        if self.length_penalty is not None and not self.length_penalty >= 0:
            raise RunError(f"{{decoding.length_penalty}} must be >= 0, got {self.length_penalty!r}")
        if isinstance(self.no_repeat_ngram_size, bool) or self.no_repeat_ngram_size < 0 or \
                self.no_repeat_ngram_size == 1:
            raise RunError(f"{{decoding.no_repeat_ngram_size}} must be 0 (off) or >= 2, got {self.no_repeat_ngram_size}")
        if not 1.0 <= self.repetition_penalty < float("inf"):
            raise RunError(f"{{decoding.repetition_penalty}} must be a finite number >= 1, got "
                           f"{self.repetition_penalty!r}")
        if self.sampling_topk is not None and (isinstance(self.sampling_topk, bool) or self.sampling_topk < 0):
            raise RunError(f"{{decoding.sampling_topk}} must be an int >= 0, got {self.sampling_topk!r}")
        if self.sampling_topp is not None and not 0.0 < self.sampling_topp <= 1.0:
            raise RunError(f"{{decoding.sampling_topp}} must be in (0, 1], got {self.sampling_topp!r}")
        if self.sampling_temperature is not None and not 0.0 < self.sampling_temperature < float("inf"):
            raise RunError(f"{{decoding.sampling_temperature}} must be a finite number > 0, got "
                           f"{self.sampling_temperature!r}")
        if isinstance(self.mbr_candidates, bool) or not isinstance(self.mbr_candidates, int) or \
                self.mbr_candidates < 0:
            raise RunError(f"{{decoding.mbr_candidates}} must be an int >= 0 (0: off), got {self.mbr_candidates!r}")
        if self.mbr_metric not in ("chrf", "bleu"):
            raise RunError(f"{{decoding.mbr_metric}} must be chrf or bleu, got {self.mbr_metric!r}")
        if self.mbr_candidates and self.beam_size is not None and self.mbr_candidates > self.beam_size:
            raise RunError(f"{{decoding.mbr_candidates}} {self.mbr_candidates} exceeds {{decoding.beam_size}} "
                           f"{self.beam_size}: MBR chooses among beam search's hypotheses; raise the beam size")
        if self.mbr_candidates and self.sampling:
            raise RunError("{decoding.mbr_candidates} chooses among beam search's hypotheses; it excludes "
                           "{decoding.seed} and {decoding.sampling_topk}/{decoding.sampling_topp}/"
                           "{decoding.sampling_temperature}")
        if sampling_excludes_beam_search and self.sampling and (
                self.beam_size not in (None, 1) or self.length_penalty is not None):
            raise RunError("{decoding.seed} and {decoding.sampling_topk}/{decoding.sampling_topp}/"
                           "{decoding.sampling_temperature} sample; they exclude {decoding.beam_size} and "
                           "{decoding.length_penalty} (beam search)")

    @property
    def sampling(self) -> bool:
        """Whether a sampling setting or a seed is given."""
        return any(v is not None for v in (self.sampling_topk, self.sampling_topp, self.sampling_temperature,
                                            self.seed))

    def guard_options(self) -> dict[str, Any]:
        """The repetition guard's and the placeholders' settings, as Translator keywords."""
        return {"no_repeat_ngram_size": self.no_repeat_ngram_size, "repetition_penalty": self.repetition_penalty,
                "placeholders": self.placeholders}

    def sampling_options(self) -> dict[str, Any]:
        """The sampling settings given, as ``open_translator`` keywords (empty: no sampling)."""
        options = {"sampling_topk": self.sampling_topk, "sampling_topp": self.sampling_topp,
                   "sampling_temperature": self.sampling_temperature, "seed": self.seed}
        return {k: v for k, v in options.items() if v is not None}

    def resolved_workers(self) -> int:
        """``workers``, else the CPU cores."""
        return self.workers or os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class ExportSettings(_Section):
    """The exports of a trained model: a TF Serving SavedModel or a CTranslate2 model directory."""

    format: str = _setting("saved_model", "saved_model (TF Serving) or ctranslate2 (pip install "
                           "'keras_transformer[ctranslate2]')", choices=("saved_model", "ctranslate2"))
    version: int = _setting(1, "SavedModel version folder")
    quantization: str | None = _setting(
        None, "ctranslate2 weight type", "float32 as trained",
        ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32"))
    xla: bool = _setting(False, "XLA-compiled search for small searches, see {export.xla_max_rows} (serve with "
                         "--xla_cpu_compilation_enabled)", "no XLA")
    xla_max_rows: int = _setting(4, "with {export.xla}: the most decoding rows (sentences x beams) a search may "
                                 "have to run in XLA; larger ones run the graph-mode search, which drops finished "
                                 "sentences (0: every search; 4: one sentence's greedy or beam-4 search, where XLA "
                                 "is faster on a CPU)")
    sampling: bool = _setting(False, "add the `sample` signature (sentences, seed -> sampled translations, for "
                              "back-translation) with the sampling settings",
                              "not added, unless a sampling setting is given")
    overwrite: bool = _setting(False, "replace an existing export", "stop if it exists")

    def check(self) -> None:
        """Raises :class:`RunError` for a version below 1 or a negative ``xla_max_rows``."""
        _check_at_least("export", {"version": self.version}, 1)
        _check_at_least("export", {"xla_max_rows": self.xla_max_rows}, 0)


@dataclasses.dataclass(frozen=True)
class RunSettings(_Section):
    """Every setting of a run, in sections (see the module docstring).

    Example:

    >>> settings = RunSettings.quickstart(data=DataSettings(data_dir="../shared/data"))
    >>> settings.training.max_train_minutes
    6.0
    >>> settings.replace_in("training", epochs=3).training.epochs
    3
    """

    data: DataSettings = dataclasses.field(default_factory=DataSettings)
    vocabulary: VocabularySettings = dataclasses.field(default_factory=VocabularySettings)
    training: TrainingSettings = dataclasses.field(default_factory=TrainingSettings)
    validation: ValidationSettings = dataclasses.field(default_factory=ValidationSettings)
    evaluation: EvaluationSettings = dataclasses.field(default_factory=EvaluationSettings)
    decoding: DecodingSettings = dataclasses.field(default_factory=DecodingSettings)
    export: ExportSettings = dataclasses.field(default_factory=ExportSettings)

    @classmethod
    def quickstart(cls, **sections: Any) -> "RunSettings":
        """The settings of the Quickstart's main job (``keras-transformer run``).

        The defaults, with the training settings of :data:`QUICKSTART_TRAINING`
        (the ``compact`` preset for :data:`QUICKSTART_TRAIN_MINUTES` minutes, no
        dropout, the average of the checkpoints of the last 200 updates); ``sections``
        replace whole sections (``data=DataSettings(data_dir=...)``;
        ``training=...`` replaces all of them).
        """
        settings = cls(**sections)
        if "training" not in sections:
            settings = settings.replace_in("training", **QUICKSTART_TRAINING)
        return settings

    def replace_in(self, section: str, **changes: Any) -> "RunSettings":
        """A copy with the fields ``changes`` of one section replaced.

        Raises:
            RunError: for an unknown section or field.
        """
        if section not in {f.name for f in dataclasses.fields(self)}:
            raise RunError(f"RunSettings has no section {section!r}")
        return dataclasses.replace(self, **{section: getattr(self, section).replace(**changes)})

    def check(self) -> None:
        """Checks every section (:class:`RunError` naming the first setting at fault)."""
        for field in dataclasses.fields(self):
            getattr(self, field.name).check()

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> "RunSettings":
        """Settings from :meth:`to_dict`'s output (missing fields keep their defaults).

        Raises:
            RunError: for an unknown section or field.
        """
        sections = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(record) - set(sections))
        if unknown:
            raise RunError(f"RunSettings has no section {', '.join(unknown)}")
        built = {}
        for name, values in record.items():
            section_cls = sections[name].default_factory
            # JSON has no tuples: a list stands for a tuple-valued setting (decoding.ensemble).
            built[name] = section_cls().replace(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
        return cls(**built)
