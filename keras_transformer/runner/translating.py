"""Translating, scoring and exporting a trained model with a run's decoding settings (Section 6.1).

The models a run leaves translate through one interface,
:class:`~keras_transformer.decoding.load.OpenedTranslator`
(:func:`open_model`): a model folder (beam size and alpha chosen per call), a
SavedModel version folder (the settings it was exported with) or a
CTranslate2 export. These functions are the steps of
:meth:`keras_transformer.Runner.translate`, ``evaluate``, ``score`` and
``export``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from keras_transformer.settings import DEFAULT_BEAM_SIZE, DecodingSettings, ExportSettings, RunError

__all__ = ["ExportResult", "check_n_best", "check_request", "export", "make_translator", "mbr_description",
           "mbr_lines", "open_model", "read_input_lines"]

Log = Callable[[str], None]


def open_model(path: str | os.PathLike, decoding: DecodingSettings, sampling: bool = True, **overrides: Any):
    """Opens a model folder, SavedModel or CTranslate2 export with the decoding settings.

    Args:
        path: the folder.
        decoding: beam size, alpha, stopping rule and sampling settings.
        sampling: pass the sampling settings on (False: beam/greedy only).
        **overrides: further keywords of
            :func:`~keras_transformer.decoding.load.open_translator`.

    Returns:
        The :class:`~keras_transformer.decoding.load.OpenedTranslator`.

    Raises:
        RunError: for a folder of none of the three kinds, or settings that
            exclude each other.
    """
    from keras_transformer.decoding.load import open_translator

    decoding.check()
    options = dict(beam_size=decoding.beam_size, length_penalty=decoding.length_penalty,
                   early_stopping=decoding.early_stopping, ensemble=tuple(decoding.ensemble),
                   **decoding.guard_options())
    if sampling:
        options.update(decoding.sampling_options())
    options.update(overrides)
    return open_translator(path, **options)


def check_signature(signature: str | None, n_best: int | None = None, mbr: int = 0) -> None:
    """A SavedModel signature asked for translating lines, checked before anything is loaded.

    Raises:
        RunError: for ``sample``, ``n_best``, ``score`` or ``token_ids`` (each
            has its own way in), or a signature given with ``n_best`` or MBR
            (``mbr`` candidates above 0).
    """
    if signature in (None, "serving_default"):
        return
    if signature == "sample":
        raise RunError("{argument.signature} sample: sample with {decoding.seed} (and {decoding.sampling_topk}/"
                       "{decoding.sampling_topp}/{decoding.sampling_temperature}) instead")
    if signature in ("n_best", "score", "token_ids"):
        use = {"n_best": "give {argument.n_best} instead", "score": "score translations with Runner.score "
               "(`keras-transformer score`)", "token_ids": "it gives token ids, not text"}[signature]
        raise RunError(f"{{argument.signature}} {signature} does not translate lines into lines: {use}")
    if n_best:
        raise RunError("{argument.n_best} uses the SavedModel's n_best signature: drop {argument.signature}")
    if mbr:
        raise RunError("{decoding.mbr_candidates} uses the SavedModel's n_best signature: drop {argument.signature}")


def check_model_folder(path: str | os.PathLike) -> str:
    """The kind of model folder ``path`` is (``"model_dir"``, ``"saved_model"``, ``"ctranslate2"``), before loading it.

    Raises:
        RunError: for a folder of none of the three kinds, naming what was looked for.
    """
    from keras_transformer.decoding.load import folder_kind

    kind = folder_kind(path)
    if kind is None:
        raise RunError(
            f"no model at {path}: expected a SavedModel version folder ({path}/saved_model.pb), a CTranslate2 export "
            "(model.bin, keras_transformer.json) or a trained model folder (model.keras, spm.model, config.json)"
        )
    return kind


def check_request(decoding: DecodingSettings, n_best: int | None = None) -> None:
    """Checks decoding settings and an n-best size before any model is loaded.

    Raises:
        RunError: for settings out of range, sampling mixed with beam search,
            an n-best size below 1, or n-best lists asked of sampling.
    """
    decoding.check()
    if n_best is not None and (isinstance(n_best, bool) or not isinstance(n_best, int) or n_best < 1):
        raise RunError(f"{{argument.n_best}} must be an int >= 1, got {n_best!r}")
    if n_best and decoding.sampling:
        raise RunError("{argument.n_best} lists beam search's hypotheses; it excludes {decoding.seed} and "
                       "{decoding.sampling_topk}/{decoding.sampling_topp}/{decoding.sampling_temperature}")
    if n_best and decoding.mbr_candidates:
        raise RunError("{argument.n_best} lists beam search's hypotheses best-scored first; it excludes "
                       "{decoding.mbr_candidates} (which picks one of them)")


def check_n_best(n: int, opened, what: str = "{argument.n_best}") -> None:
    """``n`` (n-best list size) within ``1..beam size`` of the opened translator, before any translation.

    Args:
        n: the list size.
        opened: the :class:`~keras_transformer.decoding.load.OpenedTranslator`.
        what: the setting that asks for the lists, as messages name it.

    Raises:
        RunError: when ``n`` exceeds the beam size, or the translator gives
            no n-best lists (saying why).
    """
    opened.require("n_best")
    beam = opened.settings.get("beam_size")
    if isinstance(beam, int) and n > beam:
        raise RunError(
            f"{what} {n} exceeds the beam size {beam}: beam search keeps {beam} hypotheses per sentence"
            + (" (the SavedModel's exported beam size)" if opened.kind == "saved_model" else
               "; raise {decoding.beam_size}")
        )


def mbr_description(decoding: DecodingSettings) -> str:
    """``", then MBR (chrf) over its 4 best"`` for MBR decoding settings, else ``""``."""
    if not decoding.mbr_candidates:
        return ""
    return f", then MBR ({decoding.mbr_metric}) over its {decoding.mbr_candidates} best"


def mbr_lines(n_best_fn, lines: Sequence[str], decoding: DecodingSettings, *, batch_size: int, workers: int = 1,
              progress: bool = True, line_offset: int = 0) -> list[str]:
    """Translations of ``lines`` by MBR over beam search's n-best lists (:mod:`keras_transformer.decoding.mbr`).

    Args:
        n_best_fn: a Translator's ``translate_n_best`` or an opened
            translator's ``n_best`` (see
            :func:`~keras_transformer.decoding.corpus.n_best_lines`).
        lines: the sentences.
        decoding: ``mbr_candidates`` (>= 1) and ``mbr_metric``.
        batch_size, workers, progress, line_offset: as
            :func:`~keras_transformer.decoding.corpus.n_best_lines`'s.

    Returns:
        One translation per line (``list[str]``), in order.
    """
    from keras_transformer.decoding.corpus import n_best_lines
    from keras_transformer.decoding.mbr import mbr_translations

    n_best = n_best_lines(n_best_fn, lines, decoding.mbr_candidates, batch_size=batch_size, workers=workers,
                          progress=progress, line_offset=line_offset)
    return mbr_translations(n_best, decoding.mbr_candidates, decoding.mbr_metric)


def read_input_lines(path: str | os.PathLike) -> tuple[str, list[str]]:
    """``(name, lines)`` of a UTF-8 text input; ``"-"`` is stdin.

    Raises:
        RunError: for a missing file, or invalid UTF-8 (naming the line and
            byte column; nothing is translated then).
    """
    from keras_transformer.decoding.scoring import decode_lines, read_text_lines

    if os.fspath(path) == "-":
        name, data = "stdin", sys.stdin.buffer.read()
        try:
            return name, decode_lines(data, name)
        except ValueError as error:
            raise RunError(f"{error}; nothing was translated") from None
    path = pathlib.Path(path)
    if not path.exists():
        raise RunError(f"input file not found: {path}")
    if path.is_dir():
        raise RunError(f"the input {path} is a folder, not a file of lines")
    try:
        return str(path), read_text_lines(path)
    except ValueError as error:
        raise RunError(f"{error}; nothing was translated") from None


def write_output(path: str | os.PathLike | None, text: str) -> None:
    """``text`` to the file ``path`` (atomically), to stdout for ``"-"``, nowhere for None."""
    from keras_transformer.run_folder import atomic_write_text

    if path is None:
        return
    if os.fspath(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        atomic_write_text(path, text)


def make_translator(model, tokenizer, config, decoding: DecodingSettings, *, jit_compile: bool = False,
                    xla_max_rows: int | None = 4, **sampling: Any):
    """A :class:`~keras_transformer.decoding.Translator` on a trained model, with the decoding settings.

    The translator keeps its own copy of the output projection
    (``cache_output_matrix``): the model it gets is trained.

    Args:
        model, tokenizer, config: the trained model, its vocabulary and configuration.
        decoding: beam size (default :data:`~keras_transformer.settings.DEFAULT_BEAM_SIZE`), alpha
            (default ``config.length_penalty``) and stopping rule.
        jit_compile: XLA for small searches (exports).
        xla_max_rows: the most decoding rows an XLA search may have.
        **sampling: ``sampling_topk``/``sampling_topp``/``sampling_temperature``.

    Returns:
        ``(translator, translate function for the beam size, a description)``.
    """
    from keras_transformer.decoding.translator import Translator

    beam_size = DEFAULT_BEAM_SIZE if decoding.beam_size is None else decoding.beam_size
    alpha = config.length_penalty if decoding.length_penalty is None else decoding.length_penalty
    translator = Translator(
        model, tokenizer, max_length=config.max_length, extra_decode_length=config.extra_decode_length,
        beam_size=beam_size, length_penalty=alpha, jit_compile=jit_compile, early_stopping=decoding.early_stopping,
        xla_max_rows=xla_max_rows, cache_output_matrix=True, **decoding.guard_options(), **sampling,
    )
    translate_fn = translator.translate if beam_size > 1 else translator.translate_greedy
    search = f"beam search (beam {beam_size}, alpha {alpha})" if beam_size > 1 else "greedy search"
    return translator, translate_fn, search + mbr_description(decoding)


@dataclasses.dataclass
class ExportResult:
    """What :meth:`keras_transformer.Runner.export` wrote.

    Attributes:
        path: the export (a SavedModel version folder, or a CTranslate2
            model directory).
        format: ``"saved_model"`` or ``"ctranslate2"``.
        description: one line on what it runs.
    """

    path: str
    format: str
    description: str


def export(loaded, export_dir: str | os.PathLike, settings: ExportSettings, decoding: DecodingSettings,
           log: Log) -> ExportResult:
    """Exports a loaded model folder as a TF Serving SavedModel or a CTranslate2 model directory.

    Args:
        loaded: ``(model, tokenizer, config)`` (:meth:`RunFolder.load
            <keras_transformer.run_folder.RunFolder.load>`, or an ensemble's,
            :func:`~keras_transformer.decoding.ensemble.load_ensemble`).
        export_dir: SavedModel: the TF Serving base path (the model goes to
            ``<dir>/<version>``); CTranslate2: the model directory.
        settings: format, version, quantization, XLA, sampling, overwrite.
        decoding: beam size and alpha of ``serving_default``; sampling settings.
        log: where the closing line goes.

    Raises:
        RunError: for settings of one format given to the other.
    """
    settings.check()
    decoding.check(sampling_excludes_beam_search=False)
    model, tokenizer, config = loaded
    sampling = {k: v for k, v in (("sampling_topk", decoding.sampling_topk), ("sampling_topp", decoding.sampling_topp),
                                  ("sampling_temperature", decoding.sampling_temperature)) if v is not None}
    if settings.format == "ctranslate2":
        return _export_ctranslate2(model, tokenizer, config, export_dir, settings, decoding, sampling, log)
    if settings.quantization:
        raise RunError("{export.quantization} applies to the ctranslate2 {export.format}")
    from keras_transformer.export import export_saved_model

    with_sample = settings.sampling or bool(sampling)
    translator, _, _ = make_translator(model, tokenizer, config, decoding, jit_compile=settings.xla,
                                       xla_max_rows=settings.xla_max_rows or None, **sampling)
    path = export_saved_model(translator, export_dir, version=settings.version, overwrite=settings.overwrite,
                              sampling=with_sample)
    xla = "no"
    if settings.xla:
        xla = f"yes, for up to {settings.xla_max_rows} decoding rows" if settings.xla_max_rows else "yes, every search"
    sample = ""
    if with_sample:
        sample = (f"; signature sample: top-k {translator.sampling_topk or 'off'}, top-p {translator.sampling_topp}, "
                  f"temperature {translator.sampling_temperature}")
    description = f"XLA-compiled search: {xla}{sample}"
    log(f"exported {path} ({description})")
    if decoding.mbr_candidates:
        log(f"  its serving_default gives beam search's best hypothesis; MBR ({decoding.mbr_metric} over the "
            f"{decoding.mbr_candidates} best) runs in Python over its n_best signature: translating with the "
            "SavedModel and the same MBR setting applies it")
    return ExportResult(path, "saved_model", description)


def _export_ctranslate2(model, tokenizer, config, export_dir, settings: ExportSettings, decoding: DecodingSettings,
                        sampling: dict, log: Log) -> ExportResult:
    from keras_transformer.export.ctranslate2 import export_ctranslate2

    from keras_transformer.decoding.ensemble import Ensemble

    if isinstance(model, Ensemble):
        raise RunError("a ctranslate2 {export.format} holds one model, not an ensemble ({decoding.ensemble}); "
                       "export the ensemble as a SavedModel")
    if settings.xla:
        raise RunError("{export.xla} applies to the SavedModel export, not to the ctranslate2 {export.format}")
    if settings.sampling or sampling:
        raise RunError("{export.sampling} and the sampling settings apply to the SavedModel export, not to the "
                       "ctranslate2 {export.format}")
    alpha = config.length_penalty if decoding.length_penalty is None else decoding.length_penalty
    beam_size = DEFAULT_BEAM_SIZE if decoding.beam_size is None else decoding.beam_size
    options = {"max_length": config.max_length, "extra_decode_length": config.extra_decode_length,
               "beam_size": beam_size, "length_penalty": alpha}
    path = export_ctranslate2(model, tokenizer, export_dir, quantization=settings.quantization, decoding=options,
                              overwrite=settings.overwrite)
    description = f"CTranslate2, weights {settings.quantization or 'float32'}"
    log(f"exported {path} ({description}; Runner({str(path)!r}).translate or `keras-transformer translate --model "
        f"{path}` translate with it)")
    return ExportResult(str(path), "ctranslate2", description)


def translate_batches(opened, lines: Sequence[str], n_best: int | None, decoding: DecodingSettings,
                      signature: str | None = None, progress: bool = True, line_offset: int = 0):
    """Translations (or n-best lists) of ``lines`` with an opened translator.

    Args:
        opened: an :class:`~keras_transformer.decoding.load.OpenedTranslator`.
        lines: the sentences.
        n_best: hypotheses per sentence (None: the translation only).
        decoding: batch size, workers and MBR (``mbr_candidates`` above 0:
            each translation is the MBR choice among that many of beam
            search's best, :func:`mbr_lines`).
        signature: a SavedModel signature other than ``serving_default``.
        progress, line_offset: as :func:`~keras_transformer.decoding.corpus.translate_lines`'s.

    Returns:
        ``list[str]``, or with ``n_best`` a ``list`` of ``(hypothesis, score)`` lists.

    Raises:
        RunError: for a signature of something other than a SavedModel, or
            with ``n_best`` or MBR, or an n-best size (or MBR candidates) the
            translator cannot give.
    """
    from keras_transformer.decoding.corpus import n_best_lines, translate_lines

    translate_fn = opened.translate
    if signature not in (None, "serving_default"):
        check_signature(signature, n_best)
        if opened.kind != "saved_model":
            raise RunError("{argument.signature} applies to a SavedModel")
        if signature not in opened.translator.signatures:
            raise RunError(f"the SavedModel has no signature {signature!r}; it has "
                           f"{', '.join(sorted(opened.translator.signatures))}")
        function = opened.translator.signatures[signature]
        translate_fn = lambda batch: function(batch)  # noqa: E731
    workers = decoding.resolved_workers()
    check_request(decoding, n_best)
    if decoding.mbr_candidates:
        check_signature(signature, mbr=decoding.mbr_candidates)
        check_n_best(decoding.mbr_candidates, opened, "{decoding.mbr_candidates}")
        return mbr_lines(opened.require("n_best"), lines, decoding, batch_size=decoding.batch_size, workers=workers,
                         progress=progress, line_offset=line_offset)
    if n_best:
        check_n_best(n_best, opened)
        return n_best_lines(opened.require("n_best"), lines, n_best, batch_size=decoding.batch_size, workers=workers,
                            progress=progress, line_offset=line_offset)
    return translate_lines(translate_fn, lines, batch_size=decoding.batch_size, workers=workers, progress=progress,
                           line_offset=line_offset)
