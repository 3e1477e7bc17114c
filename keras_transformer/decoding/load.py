"""Opening what training and export leave on disk, for translation.

Three kinds of folder translate sentences:

================  ======================================================  =========================================
kind              recognized by                                           translates with
================  ======================================================  =========================================
``model_dir``     ``model.keras``, ``spm.model``, ``config.json``          a :class:`~keras_transformer.decoding.Translator`
                  (``keras-transformer train`` / ``run``)                  built now: beam size and alpha chosen per run
``saved_model``   ``saved_model.pb`` (an export's version folder)          its ``serving_default`` / ``greedy`` /
                                                                          ``sample`` signatures: the settings it was
                                                                          exported with
``ctranslate2``   ``model.bin`` + ``keras_transformer.json``               :class:`~keras_transformer.decoding.ctranslate2.CTranslate2Translator`
                  (``export --format ctranslate2``)                        (beam size and alpha chosen per run)
================  ======================================================  =========================================

:func:`open_translator` returns a :class:`OpenedTranslator` whose
``translate`` maps a 1-D ``tf.string`` batch to a dict holding
``translations`` (and ``truncated``), the interface of
:func:`keras_transformer.decoding.corpus.translate_lines`; ``n_best`` (every
beam's text and score, :func:`keras_transformer.decoding.corpus.n_best_lines`)
and ``score`` (forced decoding,
:func:`keras_transformer.decoding.scoring.score_lines`) where the folder
offers them: a model folder always, a SavedModel exported with the ``n_best``
and ``score`` signatures, a CTranslate2 export never (``unavailable`` says
why).

Sampling (``seed`` or a ``sampling_*`` setting given, e.g. for
back-translation) translates a model folder with
:meth:`~keras_transformer.decoding.Translator.translate_sampled` and a
SavedModel with its ``sample`` signature. Each batch samples with its own seed,
a fingerprint of ``seed`` and the batch's sentences (:func:`batch_seed`): the
batches of a corpus draw different random numbers (the same seed for every
batch would give row ``r`` of every batch the same noise), and running the
same command again gives the same translations, whatever the number of
``workers``; another batch size regroups the sentences and samples anew.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Callable
from typing import Any

from keras_transformer.settings import DEFAULT_BEAM_SIZE, RunError

__all__ = ["open_translator", "OpenedTranslator", "folder_kind", "batch_seed"]


def folder_kind(path: str | os.PathLike) -> str | None:
    """``"model_dir"``, ``"saved_model"``, ``"ctranslate2"`` or None (see the module docstring)."""
    path = pathlib.Path(path)
    if (path / "saved_model.pb").is_file():
        return "saved_model"
    if (path / "model.bin").is_file() and (path / "keras_transformer.json").is_file():
        return "ctranslate2"
    from keras_transformer.run_folder import RunFolder

    if RunFolder(path).is_model_folder():
        return "model_dir"
    return None


@dataclasses.dataclass
class OpenedTranslator:
    """A translator opened by :func:`open_translator`.

    Attributes:
        kind: ``"model_dir"``, ``"saved_model"`` or ``"ctranslate2"``.
        translate: ``tf.string [B] -> {"translations": [B] strings,
            "truncated": [B] bool}`` (tensors or lists).
        description: what it runs, e.g. ``"beam search (beam 4, alpha 0.6)"``.
        settings: the decoding settings in force (``beam_size``,
            ``length_penalty``, ...).
        translator: the underlying object (a ``Translator``, a loaded
            SavedModel or a ``CTranslate2Translator``).
        weights: which weights translate, e.g. ``"runs/m/model.keras: the
            average of the last 5 checkpoints (...)"`` (for a model folder,
            from the record training leaves next to ``model.keras``, see
            :meth:`keras_transformer.run_folder.RunFolder.describe_weights`).
        n_best: ``tf.string [B] -> {"translations": [B, beam] strings,
            "scores": [B, beam] float32, "truncated": [B] bool}``
            (:meth:`Translator.translate_n_best
            <keras_transformer.decoding.Translator.translate_n_best>`), or
            None (see ``unavailable``).
        score: ``(tf.string [B], tf.string [B]) -> dict`` of
            :meth:`Translator.score <keras_transformer.decoding.Translator.score>`,
            or None (see ``unavailable``).
        unavailable: ``"n_best"`` / ``"score"`` -> why that function is None,
            a sentence naming the folder.
    """

    kind: str
    translate: Callable[[Any], dict[str, Any]]
    description: str
    settings: dict[str, Any]
    translator: Any
    weights: str = ""
    n_best: Callable[[Any], dict[str, Any]] | None = None
    score: Callable[[Any, Any], dict[str, Any]] | None = None
    unavailable: dict[str, str] = dataclasses.field(default_factory=dict)

    def require(self, what: str) -> Callable[..., dict[str, Any]]:
        """The ``"n_best"`` or ``"score"`` function.

        Raises:
            ValueError: saying why this folder does not offer it.
        """
        fn = getattr(self, what)
        if fn is None:
            raise RunError(self.unavailable.get(what, f"{what} is not available for this {self.kind}"))
        return fn


def _search_description(beam_size: int, alpha: float) -> str:
    return f"beam search (beam {beam_size}, alpha {float(alpha)})" if beam_size > 1 else "greedy search"


def _sampling_description(top_k: int, top_p: float, temperature: float, seed: int) -> str:
    return f"sampling (top-k {top_k or 'off'}, top-p {float(top_p)}, temperature {float(temperature)}, seed {seed})"


def batch_seed(seed: int, sentences: Any) -> Any:
    """The sampling seed of one batch: a fingerprint of ``seed`` and the batch's sentences.

    Args:
        seed: the user's seed (Python int).
        sentences: ``[B]`` ``tf.string``, the batch.

    Returns:
        int64 scalar tensor in ``[0, 2^63 - 1)``: FarmHash Fingerprint64
        (``tf.strings.to_hash_bucket_fast``, stable across platforms and
        releases) of the seed and the newline-joined sentences.
    """
    import tensorflow as tf

    text = tf.strings.reduce_join(tf.concat([[str(int(seed))], sentences], axis=0), separator="\n")
    return tf.strings.to_hash_bucket_fast(text, 2**63 - 1)


def open_translator(
    path: str | os.PathLike,
    beam_size: int | None = None,
    length_penalty: float | None = None,
    early_stopping: bool | None = None,
    jit_compile: bool = False,
    sampling_topk: int | None = None,
    sampling_topp: float | None = None,
    sampling_temperature: float | None = None,
    seed: int | None = None,
    ensemble: "tuple | list" = (),
    no_repeat_ngram_size: int = 0,
    repetition_penalty: float = 1.0,
    placeholders: bool = True,
) -> OpenedTranslator:
    """Opens a trained model folder, a SavedModel or a CTranslate2 export for translation.

    Args:
        path: the folder (see the module docstring for the three kinds).
        beam_size: beams (1 = greedy); default 4 for a model folder, the
            export's for a CTranslate2 export. A SavedModel translates with the
            settings it was exported with: ``beam_size=1`` picks its ``greedy``
            signature, any other value must equal the exported one.
        length_penalty: alpha >= 0; default the model config's (model folder)
            or the export's. Must be None or the exported value for a
            SavedModel.
        early_stopping: beam search's stopping rule (model folder only;
            default True, see :class:`~keras_transformer.decoding.Translator`).
        jit_compile: XLA for single sentences (model folder only).
        sampling_topk: sample, keeping the k most probable tokens of each
            step (0: all). Any ``sampling_*`` or ``seed`` given means sampling
            (see the module docstring); the others default to the model
            folder's defaults (top-k 0, top-p 1.0, temperature 1.0) or the
            SavedModel's exported settings, which a given value must equal.
        sampling_topp: sample from the nucleus of probability p (1: all).
        sampling_temperature: divide the logits by it before sampling.
        seed: the sampling seed (int; default 0); batches derive their own
            from it (:func:`batch_seed`).
        no_repeat_ngram_size, repetition_penalty: the repetition guard of
            every search (:class:`~keras_transformer.decoding.Translator`); a
            SavedModel keeps the guard it was exported with, which these must
            equal; a CTranslate2 export applies CTranslate2's own options.
        placeholders: carry numbers, web and e-mail addresses through
            (:mod:`keras_transformer.data.placeholders`; vocabularies with the
            placeholder piece only). A SavedModel keeps what it was exported
            with: False is refused for one exported with them.
        ensemble: further trained model folders (same vocabulary) translated
            with ``path`` as one :class:`~keras_transformer.decoding.ensemble.Ensemble`
            (model folders only).

    Returns:
        an :class:`OpenedTranslator`.

    Raises:
        ValueError: for a folder of none of the three kinds (naming what it
            looked for), settings a SavedModel cannot change (naming the
            exported ones), sampling settings out of range, sampling with a
            beam size above 1 or a length penalty, sampling from a SavedModel
            exported without the ``sample`` signature or from a CTranslate2
            export.
    """
    guard = {"no_repeat_ngram_size": no_repeat_ngram_size, "repetition_penalty": repetition_penalty}
    kind = folder_kind(path)
    text_rules = dict(guard, placeholders=placeholders)
    if kind is None:
        raise ValueError(
            f"{path} is neither a trained model folder (model.keras, spm.model, config.json), a SavedModel version folder "
            "(saved_model.pb) nor a CTranslate2 export (model.bin, keras_transformer.json)"
        )
    sampling = {"top_k": sampling_topk, "top_p": sampling_topp, "temperature": sampling_temperature}
    sample = seed is not None or any(value is not None for value in sampling.values())
    if sample:
        if beam_size not in (None, 1) or length_penalty is not None:
            raise ValueError("sampling (a seed or sampling settings) and beam search (beam size, length penalty) "
                             "exclude each other: give one or the other")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int, got {seed!r}")
        seed = 0 if seed is None else seed
        from keras_transformer.decoding.search import check_sampling

        top_k, top_p, temperature = check_sampling(
            0 if sampling_topk is None else sampling_topk, 1.0 if sampling_topp is None else sampling_topp,
            1.0 if sampling_temperature is None else sampling_temperature,
        )
        if kind == "ctranslate2":
            raise RunError(f"{path} is a CTranslate2 export, which translates without sampling here; sample with "
                           "the trained model folder or a SavedModel exported with {export.sampling}")
    if ensemble and kind != "model_dir":
        raise RunError(f"{path} is a {kind.replace('_', ' ')}: an ensemble is made of trained model folders; export "
                       "the ensemble from them ({decoding.ensemble})")
    if kind == "model_dir":
        from keras_transformer.decoding.ensemble import load_ensemble
        from keras_transformer.decoding.translator import Translator
        from keras_transformer.run_folder import RunFolder

        model, tokenizer, config = load_ensemble([path, *ensemble])
        weights = "; ".join(RunFolder(p).describe_weights() for p in [path, *ensemble])
        if ensemble:
            weights = f"an ensemble of {len(ensemble) + 1} models: {weights}"
        if sample:
            translator = Translator(
                model, tokenizer, max_length=config.max_length, extra_decode_length=config.extra_decode_length,
                jit_compile=jit_compile, sampling_topk=top_k, sampling_topp=top_p, sampling_temperature=temperature,
                cache_output_matrix=True, **text_rules,
            )
            return OpenedTranslator(
                kind, _sampled(translator.translate_sampled, seed),
                _sampling_description(top_k, top_p, temperature, seed), dict(translator.get_config(), seed=seed),
                translator, weights,
            )
        beam = DEFAULT_BEAM_SIZE if beam_size is None else beam_size
        alpha = config.length_penalty if length_penalty is None else float(length_penalty)
        translator = Translator(
            model, tokenizer, max_length=config.max_length, extra_decode_length=config.extra_decode_length,
            beam_size=beam, length_penalty=alpha, jit_compile=jit_compile,
            early_stopping=True if early_stopping is None else early_stopping, cache_output_matrix=True,
            **text_rules,
        )
        fn = translator.translate if beam > 1 else translator.translate_greedy
        return OpenedTranslator(kind, fn, _search_description(beam, alpha), translator.get_config(), translator,
                                weights, n_best=translator.translate_n_best,
                                score=translator.score)
    if kind == "ctranslate2":
        import tensorflow as tf  # noqa: F401  (batches arrive as tf.string tensors)

        from keras_transformer.decoding.ctranslate2 import CTranslate2Translator

        translator = CTranslate2Translator(path, beam_size=beam_size, length_penalty=length_penalty, **text_rules)

        def translate(batch):
            texts = [s.decode("utf-8", errors="replace") for s in batch.numpy()]
            out = translator.translate(texts)
            return {"translations": out["translations"], "truncated": out["truncated"]}

        settings = translator.get_config()
        unavailable = {
            "n_best": f"{path} is a CTranslate2 export, which gives no n-best lists here: CTranslate2 ranks "
            "hypotheses by log P / |Y|^alpha, not by our scores (Wu et al.'s length penalty), so its list would not "
            "be sorted by the scores we report; use the trained model folder or a SavedModel",
            "score": f"{path} is a CTranslate2 export, which cannot score with our length normalisation; use the "
            "trained model folder or a SavedModel",
        }
        return OpenedTranslator(kind, translate, "CTranslate2 " + _search_description(
            settings["beam_size"], settings["length_penalty"]), settings, translator,
            f"{pathlib.Path(path) / 'model.bin'} (the weights exported to CTranslate2)",
            unavailable=unavailable)

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the SavedModel)

    config_path = pathlib.Path(path, "assets.extra", "export_config.json")
    record = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    decoding = record.get("decoding", {})
    for name, value in guard.items():  # exported settings, as the beam size (exports before the guard: off)
        exported = decoding.get(name, 1.0 if name == "repetition_penalty" else 0)
        if float(value) != float(exported):
            raise RunError(f"the SavedModel {path} was exported with {name} {exported}: it translates with that "
                           f"setting; re-export it with {{decoding.{name}}} {value} for another")
    if not placeholders and decoding.get("placeholders"):
        raise RunError(f"the SavedModel {path} was exported carrying numbers and addresses through placeholders: it "
                       "translates so; re-export it with {decoding.placeholders} off for another")
    if sample:
        return _open_saved_model_sampling(path, record, sampling, seed)
    exported_beam, exported_alpha = decoding.get("beam_size"), decoding.get("length_penalty")
    if beam_size not in (None, 1) and exported_beam is not None and beam_size != exported_beam:
        raise RunError(
            f"the SavedModel {path} was exported with beam {exported_beam}: it translates with that setting "
            "(or greedy with beam 1); re-export it with another {decoding.beam_size} for another"
        )
    if length_penalty is not None and exported_alpha is not None and float(length_penalty) != float(exported_alpha):
        raise RunError(
            f"the SavedModel {path} was exported with alpha {exported_alpha}: re-export it "
            "with another {decoding.length_penalty} for another"
        )
    loaded = tf.saved_model.load(str(path))
    greedy = beam_size == 1
    signature = loaded.signatures["greedy" if greedy else "serving_default"]
    beam = 1 if greedy else (exported_beam or 0)
    description = ("SavedModel " + _search_description(beam, exported_alpha or 0.0)) if beam else "SavedModel"
    opened = OpenedTranslator(kind, lambda batch: signature(batch), description, dict(decoding), loaded,
                              f"{pathlib.Path(path) / 'variables'} (the weights exported in the SavedModel)")
    old = ("was exported before the {name} signature existed: re-export it (Runner.export, `keras-transformer "
           "export`) from its trained model folder, or use that folder")
    if "n_best" not in loaded.signatures:
        opened.unavailable["n_best"] = f"the SavedModel {path} " + old.format(name="n_best")
    elif greedy:
        opened.unavailable["n_best"] = (
            f"the SavedModel {path} gives n-best lists with the beam size it was exported with "
            f"({exported_beam}), not greedy search: drop " "{decoding.beam_size} 1"
        )
    else:
        n_best = loaded.signatures["n_best"]
        opened.n_best = lambda batch: n_best(sentences=batch)
    if "score" not in loaded.signatures:
        opened.unavailable["score"] = f"the SavedModel {path} " + old.format(name="score")
    else:
        score = loaded.signatures["score"]
        opened.score = lambda sentences, targets: score(sentences=sentences, targets=targets)
    return opened


def _sampled(translate_sampled: Callable[..., Any], seed: int) -> Callable[[Any], Any]:
    """``batch -> translate_sampled(batch, batch_seed(seed, batch))`` (see the module docstring)."""

    def translate(batch):
        return translate_sampled(batch, batch_seed(seed, batch))

    return translate


def _open_saved_model_sampling(path: Any, record: dict[str, Any], asked: dict[str, Any],
                               seed: int) -> OpenedTranslator:
    """A SavedModel's ``sample`` signature, after checking the asked settings against the exported ones.

    ``record`` is the export's ``export_config.json`` (empty when missing):
    its ``"sampling"`` entry (null without the signature) is checked before
    the SavedModel is loaded.
    """
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the SavedModel)

    def no_signature(signatures):
        return RunError(
            f"the SavedModel {path} was exported without the `sample` signature (signatures: {signatures}); "
            "re-export it with {export.sampling} (and {decoding.sampling_topk}/{decoding.sampling_topp}/"
            "{decoding.sampling_temperature}) to sample"
        )

    exported = record.get("sampling") or {}
    if "sampling" in record and not exported:
        raise no_signature(", ".join(sorted(record.get("signatures", {}))))
    for name, value in asked.items():
        if value is not None and name in exported and float(value) != float(exported[name]):
            raise RunError(
                f"the SavedModel {path} samples with {name.replace('_', '-')} {exported[name]} (exported), not "
                f"{value}; re-export it with {{decoding.sampling_{name.replace('_', '')}}} {value} for another"
            )
    loaded = tf.saved_model.load(str(path))
    if "sample" not in loaded.signatures:
        raise no_signature(", ".join(sorted(loaded.signatures)))
    signature = loaded.signatures["sample"]

    def translate_sampled(batch, batch_seed_value):
        return signature(sentences=batch, seed=batch_seed_value)

    description = "SavedModel " + _sampling_description(
        exported.get("top_k", 0), exported.get("top_p", 1.0), exported.get("temperature", 1.0), seed
    )
    return OpenedTranslator("saved_model", _sampled(translate_sampled, seed), description,
                            dict(exported, seed=seed), loaded,
                            f"{pathlib.Path(path) / 'variables'} (the weights exported in the SavedModel)")
