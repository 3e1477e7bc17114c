"""The Runner: every workflow of a run, over one run folder and its settings.

:class:`Runner` is the Python API that the command line, the Colab notebook
and the scripts call (the command line only parses flags into
:class:`~keras_transformer.settings.RunSettings`, makes one call and prints).
It owns the order of the steps, resuming, the records of the run folder
(:class:`~keras_transformer.run_folder.RunFolder`) and what a re-run does:

==================  ===========================================================================
method              what it does
==================  ===========================================================================
:meth:`~Runner.prepare`    tokenizes the training data once into id shards, for streaming
:meth:`~Runner.train`      vocabulary, model, ``model.fit`` (resumes when re-run), averaging, ``model.keras``
:meth:`~Runner.average`    averages the last checkpoints (Section 6.1)
:meth:`~Runner.evaluate`   translates a test set and scores sacreBLEU / chrF
:meth:`~Runner.translate`  translates sentences (or a file) with beam search, greedy search or sampling
:meth:`~Runner.score`      forced decoding: log P(target | source) of given translations
:meth:`~Runner.export`     a TF Serving SavedModel, or a CTranslate2 model directory
:meth:`~Runner.run`        the main job: train, translate and score the test split, export, ``results.json``
:meth:`~Runner.plot_attention`  the encoder-decoder attention heads of one sentence pair
==================  ===========================================================================

The decoding methods also take an export: ``Runner("runs/multi30k/export/1")``
translates with the SavedModel (its exported beam size), and a CTranslate2
directory with CTranslate2.

Example (the Quickstart's main job):

>>> from keras_transformer import DataSettings, Runner, RunSettings
>>> settings = RunSettings.quickstart(data=DataSettings(data_dir="../shared/data"))
>>> results = Runner("runs/multi30k", settings).run()  # doctest: +SKIP
>>> results["bleu"]  # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from keras_transformer.run_folder import RunFolder
from keras_transformer.runner import training as run_training
from keras_transformer.runner import translating
from keras_transformer.settings import DEFAULT_AVERAGE_LAST, QUICKSTART_RUN_DIR, RunError, RunSettings

__all__ = ["Runner"]


def _print(line: str) -> None:
    print(line, flush=True)


class Runner:
    """The workflows of one run (see the module docstring).

    Args:
        run_dir: the run folder (created by :meth:`train`), or for the
            decoding methods any model folder: a SavedModel version folder or
            a CTranslate2 export.
        settings: the run's :class:`~keras_transformer.settings.RunSettings`
            (default: every default).
        log: where progress lines go (default: stdout, flushed).

    Attributes:
        folder: the :class:`~keras_transformer.run_folder.RunFolder`.
        settings: the settings.

    Raises:
        RunError: from the methods, for settings or inputs at fault (the
            message names the setting, file or line).
    """

    def __init__(self, run_dir: str | os.PathLike = QUICKSTART_RUN_DIR, settings: RunSettings | None = None, *,
                 log: Callable[[str], None] | None = None):
        from keras_transformer.runtime import default_onednn

        self.folder = RunFolder(run_dir)
        self.settings = settings or RunSettings()
        self.log = log or _print
        self._onednn = default_onednn()  # before TensorFlow loads, when it has not yet

    # ------------------------------------------------------------------ data and training

    def prepare(self, output_dir: str | os.PathLike, *, force: bool = False, max_length: int | None = None):
        """Tokenizes the settings' training data once into id shards with a manifest (WMT's size).

        Args:
            output_dir: the prepared folder (reused when it already matches).
            force: prepare again even when it matches.
            max_length: longest kept sequence, EOS included (default: the
                preset's ``max_length`` of ``training.max_length``).

        Returns:
            The :class:`~keras_transformer.data.PreparedCorpus`.

        Raises:
            RunError: for data settings at fault, or TFDS data that is not
                prepared and cannot be downloaded.
        """
        from keras_transformer.runner.data import prepare

        self.settings.vocabulary.check()
        corpus = prepare(output_dir, self.settings.data, self.settings.vocabulary,
                         max_length or self._max_length(), self.log, force=force)
        for split in corpus.splits:
            self.log(f"{split}: {corpus.summary(split)}")
        return corpus

    def _max_length(self) -> int:
        from keras_transformer.config import TransformerConfig, get_preset

        training = self.settings.training
        if training.max_length:
            return training.max_length
        return get_preset(training.preset).max_length if training.preset else TransformerConfig.max_length

    def train(self, *, then: str = "saves model.keras again", saved_by: str = "train"):
        """Trains the run: vocabulary, model, ``fit``, averaging, ``model.keras``; a re-run resumes.

        Args:
            then: what follows training, for the re-run message.
            saved_by: recorded with ``model.keras``.

        Returns:
            A :class:`~keras_transformer.runner.training.TrainResult`.

        Raises:
            RunError: for settings or data at fault, a folder holding another
                run, or a diverged training.
        """
        return run_training.train(self.folder, self.settings, saved_by=saved_by, then=then, onednn=self._onednn,
                                  log=self.log)

    def average(self, last: int = DEFAULT_AVERAGE_LAST, *, output: str | os.PathLike | None = None, save_model: bool = False):
        """Averages the last ``last`` checkpoints (Section 6.1) into ``output`` (and ``model.keras``).

        Args:
            last: how many (the paper: 5 for base, 20 for big).
            output: default ``averaged.weights.h5`` in the run folder.
            save_model: also replace ``model.keras`` with the average.

        Returns:
            The path of the averaged weights (``str``).

        Raises:
            RunError: for ``last`` < 1, or fewer checkpoints than ``last``.
        """
        from keras_transformer.training import checkpoints

        if isinstance(last, bool) or not isinstance(last, int) or last < 1:
            raise RunError(f"{{argument.last}} must be at least 1, got {last!r}")
        paths = checkpoints.list_checkpoints(self.folder.checkpoints)
        if len(paths) < last:
            raise RunError(f"{self.folder.checkpoints} holds {len(paths)} checkpoints; {{argument.last}} {last} needs "
                           "that many")
        output = os.fspath(output or self.folder.averaged)
        checkpoints.average_checkpoints(paths[-last:], output)
        self.log(f"averaged {', '.join(os.path.basename(p) for p in paths[-last:])} into {output}")
        if save_model:
            loaded = self.folder.load()
            loaded.model.load_weights(output)
            self.folder.save_model(loaded.model, paths[-last:], "average-checkpoints",
                                   state=checkpoints.read_state(self.folder.checkpoints))
            self.log(f"saved the averaged model as {self.folder.describe_weights()}")
        return output

    # ------------------------------------------------------------------ decoding

    def open_translator(self, *, sampling: bool = True):
        """The run's model (or export) opened with the decoding settings.

        Returns:
            An :class:`~keras_transformer.decoding.load.OpenedTranslator`.

        Raises:
            RunError: for a folder that is no model, or decoding settings at fault.
        """
        from keras_transformer.runtime import decoding_threads

        decoding_threads(self.settings.decoding.resolved_workers())
        try:
            return translating.open_model(self.folder.path, self.settings.decoding, sampling=sampling)
        except ValueError as error:  # settings a SavedModel cannot change, sampling it cannot do
            if isinstance(error, RunError):
                raise
            raise RunError(str(error)) from None

    def _describe_search(self, opened) -> str:
        """What the opened translator runs, with MBR when the decoding settings ask for it."""
        return opened.description + translating.mbr_description(self.settings.decoding)

    def translate(self, sentences: Sequence[str], *, n_best: int | None = None, signature: str | None = None):
        """Translates sentences with the decoding settings.

        Args:
            sentences: source sentences (``str``).
            n_best: give the ``n_best`` best hypotheses of each sentence with
                their scores (beam search) instead of its translation.
            signature: a SavedModel signature other than ``serving_default``
                (``beam_search``, ``greedy``).

        Returns:
            One translation per sentence (``list[str]``), or with ``n_best``
            one ``[(hypothesis, score), ...]`` list per sentence, best first.

        Raises:
            RunError: for decoding settings or arguments at fault.
        """
        translating.check_request(self.settings.decoding, n_best)
        opened = self.open_translator()
        self.log(f"weights: {opened.weights}")
        return translating.translate_batches(opened, list(sentences), n_best, self.settings.decoding, signature)

    def translate_file(self, input: str | os.PathLike = "-", output: str | os.PathLike = "-", *,
                       n_best: int | None = None, signature: str | None = None) -> int:
        """Translates a UTF-8 file (``"-"``: stdin), one translation per input line, into ``output`` (``"-"``: stdout).

        With ``n_best``, ``N`` lines ``index ||| hypothesis ||| score`` per
        input line (Moses/fairseq). An empty line translates to an empty line.

        Returns:
            The number of input lines.

        Raises:
            RunError: for a missing input, invalid UTF-8 (naming the line;
                nothing is written), or settings at fault.
        """
        from keras_transformer.decoding.corpus import format_n_best

        from keras_transformer.decoding.stream import is_stream

        translating.check_model_folder(self.folder.path)
        translating.check_request(self.settings.decoding, n_best)
        translating.check_signature(signature, n_best, self.settings.decoding.mbr_candidates)
        if is_stream(input):
            return self._translate_stream(input, output, n_best, signature)
        name, lines = translating.read_input_lines(input)
        opened = self.open_translator()
        self.log(f"weights: {opened.weights}")
        self.log(f"translating {name} with {self._describe_search(opened)}")
        result = translating.translate_batches(opened, lines, n_best, self.settings.decoding, signature)
        text = format_n_best(result) if n_best else "".join(t + "\n" for t in result)
        translating.write_output(output, text)
        return len(lines)

    def _translate_stream(self, input, output, n_best, signature) -> int:
        """:meth:`translate_file` of a stream: each batch of the lines already arrived written when translated."""
        from keras_transformer.decoding.corpus import format_n_best
        from keras_transformer.decoding.stream import translate_stream

        opened = self.open_translator()
        if n_best:
            translating.check_n_best(n_best, opened)
        self.log(f"weights: {opened.weights}")
        name = "stdin" if os.fspath(input) == "-" else str(input)
        self.log(f"translating {name} as its lines arrive, with {self._describe_search(opened)}")

        def translate_batch(lines: list[str], before: int) -> list[str]:
            result = translating.translate_batches(opened, lines, n_best, self.settings.decoding, signature,
                                                   progress=False, line_offset=before)
            if n_best:
                return [format_n_best([entries], start=before + i) for i, entries in enumerate(result)]
            return [t + "\n" for t in result]

        if os.fspath(output) == "-":
            write, kept = (lambda text: (sys.stdout.write(text), sys.stdout.flush())), None
        else:  # a file: written whole at the end (atomically), never half
            kept = []
            write = kept.append
        stream = sys.stdin.buffer if name == "stdin" else open(input, "rb")
        try:
            count = translate_stream(translate_batch, stream, write, self.settings.decoding.batch_size, name)
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
        if kept is not None:
            translating.write_output(output, "".join(kept))
        return count

    def evaluate(self, source: str | os.PathLike, reference: str | os.PathLike, *,
                 output: str | os.PathLike | None = None, n_best: int | None = None, target_lang: str | None = None):
        """Translates a test set and scores it with sacreBLEU BLEU and chrF.

        Args:
            source: source sentences, one per line.
            reference: reference translations, line-aligned.
            output: where the translations (or the n-best list) go; None: not
                written; ``"-"``: stdout.
            n_best: write the n-best lists; BLEU scores their best hypothesis.
            target_lang: the references' language (picks sacreBLEU's
                tokenizer and the Moses rules of the lowercased tokenized
                BLEU); default ``data.target_lang``, else the target
                language the model folder's record names, else none (13a,
                English rules).

        Returns:
            The :class:`~keras_transformer.evaluation.Scores` (printed too).

        Raises:
            RunError, FileNotFoundError, ValueError: for settings or files at
                fault (misaligned files, invalid UTF-8).
        """
        from keras_transformer.data import read_parallel_files
        from keras_transformer.decoding.corpus import format_n_best
        from keras_transformer.evaluation import bleu_metric, score_corpus

        translating.check_request(self.settings.decoding, n_best)
        lang = target_lang or self.settings.data.target_lang or self.folder.trained_target_lang()
        tokenize = self.settings.evaluation.bleu_tokenize
        pairs = read_parallel_files(source, reference)
        bleu_metric(lang, tokenize)  # a missing tokenizer package fails before translating
        opened = self.open_translator()
        self.log(f"weights: {opened.weights}")
        self.log(f"translating {source} ({len(pairs)} sentences) with {self._describe_search(opened)}")
        result = translating.translate_batches(opened, pairs.sources, n_best, self.settings.decoding)
        if n_best:
            hypotheses = [entries[0][0] if entries else "" for entries in result]  # BLEU of the best hypothesis
            translating.write_output(output or "-", format_n_best(result))
        else:
            hypotheses = result
            translating.write_output(output, "".join(h + "\n" for h in hypotheses))
        scores = score_corpus(hypotheses, pairs.targets, target_lang=lang, tokenize=tokenize)
        self.log(str(scores))
        return scores

    def score(self, source: str | os.PathLike, target: str | os.PathLike, *, output: str | os.PathLike | None = "-",
              per_token: bool = False):
        """Forced decoding: ``log P(target | source)`` and the length-normalized score of each pair.

        Writes ``score<TAB>log_prob<TAB>num_tokens`` lines (with
        ``per_token`` also the pieces and their log-probabilities) to
        ``output``; see :mod:`keras_transformer.decoding.scoring`.

        Returns:
            The :class:`~keras_transformer.decoding.scoring.PairScore` list.

        Raises:
            RunError: for a folder without the score function, or settings at fault.
            FileNotFoundError, ValueError: for missing, misaligned or non-UTF-8 files.
        """
        from keras_transformer.decoding.scoring import format_scores, read_aligned_lines, score_lines

        translating.check_model_folder(self.folder.path)
        if self.settings.decoding.batch_size < 1:
            raise RunError(f"{{decoding.batch_size}} must be at least 1, got {self.settings.decoding.batch_size}")
        sources, targets = read_aligned_lines(source, target)
        opened = self.open_translator(sampling=False)
        score_fn = opened.require("score")
        alpha = opened.settings.get("length_penalty")
        self.log(f"scoring {len(sources)} pairs of {source} / {target} with {self.folder.path} (score = log P / "
                 f"((5 + |Y|) / 6)^{alpha})")
        scores = score_lines(score_fn, sources, targets, batch_size=self.settings.decoding.batch_size,
                             per_token=per_token)
        translating.write_output(output, format_scores(scores, per_token=per_token))
        return scores

    def export(self, export_dir: str | os.PathLike | None = None):
        """Exports the trained model with the export and decoding settings.

        Args:
            export_dir: SavedModel: TF Serving's base path (default the run
                folder's ``export/``; the model goes to ``<dir>/<version>``);
                CTranslate2: the model directory (required).

        Returns:
            An :class:`~keras_transformer.runner.translating.ExportResult`.

        Raises:
            RunError: for a folder that is no model folder, or settings of one
                format given to the other.
        """
        settings = self.settings.export
        if export_dir is None:
            if settings.format != "saved_model":
                raise RunError("a ctranslate2 {export.format} needs {argument.export_dir}")
            export_dir = self.folder.export_dir
        return translating.export(self.load_models(), export_dir, settings, self.settings.decoding, self.log)

    def load_models(self):
        """``(model, tokenizer, config)`` of the run folder, or of its ensemble with ``decoding.ensemble``'s folders.

        Raises:
            RunError: for a folder that is no model folder, or ensemble
                members with another vocabulary.
        """
        from keras_transformer.decoding.ensemble import load_ensemble

        return load_ensemble([self.folder.path, *self.settings.decoding.ensemble])

    # ------------------------------------------------------------------ the main job

    def run(self) -> dict[str, Any]:
        """The main job: train, translate and score the test split, export, a few examples, ``results.json``.

        Re-running a finished run trains nothing: it translates, scores and
        exports again with the trained model.

        Returns:
            The ``results.json`` record: ``dataset``, ``language_pair``,
            ``test_split``, ``bleu``, ``chrf``, ``bleu_signature``, ``bleu_lc_tok``
            (the literature's lowercased Moses-tokenized BLEU) and its signature,
            ``train_minutes``, ``preset``, ``beam_size``, ``length_penalty``,
            ``saved_model`` and ``best_validation`` (when validated).

        Raises:
            RunError: as :meth:`train`; for a corpus without a test split.
        """
        from keras_transformer.runner.main_job import run

        return run(self)

    def test(self, trained=None):
        """Translates the corpus's test split with beam search (Section 6.1) and scores sacreBLEU BLEU and chrF.

        Args:
            trained: the :meth:`train` result to test (default: the run
                folder's model, and the test split the data settings name).

        Returns:
            A :class:`~keras_transformer.runner.main_job.TestResult`; the
            translations are also written to ``<test>.hyp.<lang>``.

        Raises:
            RunError: for a corpus without a test split (files, TSV, TFDS).
        """
        from keras_transformer.runner.main_job import test

        return test(self, trained)

    def plot_attention(self, source: str, target: str | None = None, *, layer: int = -1,
                       output: str | os.PathLike | None = "attention.png"):
        """The encoder-decoder attention of every head of one decoder layer, for a sentence pair (Section 3.2.3).

        Args:
            source: the source sentence.
            target: the target sentence (default: the model's greedy translation).
            layer: the decoder layer, negative counts from the end.
            output: the PNG to write (None: not written).

        Returns:
            The :class:`~keras_transformer.visualization.AttentionPlot`.

        Raises:
            RunError: for a folder that is no model folder.
            ValueError: for a layer out of range or a path not ending in ``.png``.
        """
        from keras_transformer.visualization import plot_attention_heads

        loaded = self.folder.load()
        return plot_attention_heads(loaded.model, loaded.tokenizer, source, target, layer=layer, path=output)


def stderr_log(line: str) -> None:
    """A ``log`` for :class:`Runner` that writes to stderr (when stdout carries translations)."""
    print(line, file=sys.stderr, flush=True)


def elapsed(start: float) -> float:
    """Minutes since ``start`` (``time.monotonic()``)."""
    return (time.monotonic() - start) / 60
