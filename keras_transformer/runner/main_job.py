"""The main job of a run (``keras-transformer run``, :meth:`keras_transformer.Runner.run`), in four steps.

1. vocabulary, data and training (:meth:`~keras_transformer.Runner.train`);
2. the test split translated with beam search (Section 6.1; with
   ``decoding.mbr_candidates``, then MBR over its best hypotheses) and
   scored with sacreBLEU BLEU and chrF;
3. the TF Serving SavedModel in ``export/1/``;
4. a few test sentences with their translations, and ``results.json``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_transformer.runner import translating
from keras_transformer.settings import DEFAULT_BEAM_SIZE, RunError

__all__ = ["TestResult", "run", "test"]


@dataclasses.dataclass
class TestResult:
    """What :meth:`keras_transformer.Runner.test` leaves.

    Attributes:
        scores: the :class:`~keras_transformer.evaluation.Scores` (BLEU, chrF, signatures).
        hypotheses: the test translations, in order (also written to
            ``<test>.hyp.<lang>`` in the run folder).
        corpus: the :class:`~keras_transformer.data.Corpus` whose test split was translated.
        search: ``"beam search (beam 4, alpha 0.6)"`` (and ``", then MBR (chrf)
            over its 4 best"``) or ``"greedy search"``.
    """

    scores: Any
    hypotheses: list[str]
    corpus: Any
    search: str


def test(runner, trained=None) -> TestResult:
    """:meth:`keras_transformer.Runner.test`: the test split translated (Section 6.1) and scored.

    Args:
        runner: the :class:`~keras_transformer.Runner`.
        trained: a :class:`~keras_transformer.runner.training.TrainResult`
            (default: the run folder's model and the settings' corpus).

    Raises:
        RunError: for a corpus without a test split.
    """
    from keras_transformer.decoding.corpus import translate_lines
    from keras_transformer.evaluation import score_corpus
    from keras_transformer.runner.data import read_corpus

    settings = runner.settings
    if trained is None:
        model, tokenizer, config = runner.load_models()
        corpus = read_corpus(settings.data, runner.log)
    else:
        model, tokenizer, config, corpus = trained.model, trained.tokenizer, trained.config, trained.corpus
    test = corpus.test
    if test is None:
        raise RunError(f"{corpus.name} has no test split to translate: name a {{data.dataset}}, or evaluate a "
                       "test set of your own (Runner.evaluate, `keras-transformer evaluate`)")
    decoding = _search(settings.decoding)
    decoding.check()
    translator, translate_fn, search = translating.make_translator(model, tokenizer, config, decoding)
    runner.log(f"translating {corpus.name} {corpus.test_name} ({len(test)} sentences) with {search}")
    if decoding.mbr_candidates:
        hypotheses = translating.mbr_lines(translator.translate_n_best, test.sources, decoding,
                                           batch_size=settings.evaluation.test_batch_size)
    else:
        hypotheses = translate_lines(translate_fn, test.sources, batch_size=settings.evaluation.test_batch_size)
    scores = score_corpus(hypotheses, test.targets, target_lang=corpus.target_lang,
                          tokenize=settings.evaluation.bleu_tokenize)
    runner.folder.write_lines(runner.folder.hypotheses(corpus.test_name, corpus.target_lang), hypotheses)
    pair = f"{corpus.source_lang}-{corpus.target_lang}"
    runner.log(f"      {corpus.name} {corpus.test_name} {pair}:\n      " + str(scores).replace("\n", "\n      "))
    return TestResult(scores, hypotheses, corpus, search)


def _search(decoding):
    """The decoding settings with the beam size made explicit (beam search unless asked otherwise)."""
    return decoding.replace(beam_size=DEFAULT_BEAM_SIZE if decoding.beam_size is None else decoding.beam_size)


def _examples(runner, corpus, hypotheses) -> None:
    src, tgt = (corpus.source_lang or "src").upper(), (corpus.target_lang or "tgt").upper()
    examples = list(zip(corpus.test.sources, hypotheses, corpus.test.targets))[: runner.settings.evaluation.num_examples]
    for source, hypothesis, reference in examples:
        runner.log(f"  {src}:  {source}\n  {tgt}:  {hypothesis}\n  REF: {reference}\n")


def run(runner) -> dict[str, Any]:
    """:meth:`keras_transformer.Runner.run` (see the module docstring).

    Returns:
        The ``results.json`` record.
    """
    folder, settings = runner.folder, runner.settings
    settings.check()
    _search(settings.decoding).check()  # the test split's search (e.g. MBR within the default beam), before training
    runner.log("[1/4] vocabulary, data and training")
    trained = runner.train(then="translates the test split and exports again", saved_by="run")
    minutes = trained.minutes
    if minutes is None:  # a finished run, re-run: keep the training time it recorded
        minutes = (folder.read_results() or {}).get("train_minutes", 0.0)
    runner.log("[2/4] the test split")
    tested = runner.test(trained)
    runner.log("[3/4] exporting the SavedModel")
    search = _search(settings.decoding)
    exported = translating.export((trained.model, trained.tokenizer, trained.config), folder.export_dir,
                                  settings.export.replace(version=1, overwrite=True), search, runner.log)
    runner.log("[4/4] a few test sentences:")
    corpus = tested.corpus
    _examples(runner, corpus, tested.hypotheses)
    scores = tested.scores
    results = {
        "dataset": corpus.name,
        "language_pair": f"{corpus.source_lang}-{corpus.target_lang}",
        "test_split": corpus.test_name,
        "bleu": round(scores.bleu, 2),
        "chrf": round(scores.chrf, 2),
        "bleu_signature": scores.bleu_signature,
        # The literature's figure (lowercased, Moses-tokenized), when the target has that convention.
        "bleu_lc_tok": None if scores.tokenized_bleu is None else round(scores.tokenized_bleu, 2),
        "bleu_lc_tok_signature": scores.tokenized_bleu_signature,
        "train_minutes": round(minutes, 2),
        "preset": settings.training.preset,
        "beam_size": search.beam_size,
        "length_penalty": trained.config.length_penalty if search.length_penalty is None else search.length_penalty,
        "mbr_candidates": search.mbr_candidates,
        "mbr_metric": search.mbr_metric if search.mbr_candidates else None,
        "saved_model": exported.path,
    }
    best = folder.best_validation()
    if best is not None:
        results["best_validation"] = best
    folder.write_results(results)
    _closing_lines(runner, results, tested, trained)
    return results


def _closing_lines(runner, results, tested, trained) -> None:
    """Where everything is, and the scores once more, after the examples."""
    folder, corpus = runner.folder, tested.corpus
    tokenized = f", {results['bleu_lc_tok']:.2f} lowercased tokenized" if results.get("bleu_lc_tok") is not None else ""
    trained_for = "nothing trained (a finished run)" if trained.minutes is None else \
        f"{results['train_minutes']:.1f} min of training"
    runner.log(f"done: {corpus.name} {corpus.test_name} BLEU {results['bleu']:.2f}{tokenized} (chrF "
               f"{results['chrf']:.2f}), {trained_for}")
    runner.log(f"  results:     {folder.results_path}")
    runner.log(f"  model:       {folder.model_path} ({trained.weights.split(': ', 1)[-1].split(';')[0]})")
    runner.log(f"  SavedModel:  {results['saved_model']}")
    runner.log(f"  translations of the test split: {folder.hypotheses(corpus.test_name, corpus.target_lang)}")
    runner.log(f"  translate:   echo \"...\" | keras-transformer translate --model {results['saved_model']}")
