"""Pictures of the model: encoder-decoder attention heads and the positional encoding.

* :func:`plot_attention_heads`: one heat map per head of the encoder-decoder
  (cross) attention of one decoder layer for a sentence pair (Section 3.2.3,
  "Attention Visualizations" at the end of the paper), x-axis the source
  pieces, y-axis the target pieces.
* :func:`plot_positional_encoding`: the sinusoid matrix of Section 3.5.

Pieces of scripts that matplotlib's default font lacks (Chinese, Japanese,
Korean) are drawn with a CJK font found at run time (:func:`cjk_font`): an
installed one (e.g. Debian's ``fonts-noto-cjk``), else Noto Sans CJK SC from
the ``mplfonts`` package (``pip install "keras_transformer[cjk]"``); without
either, a warning says how to get one, and the labels are boxes.

Figures are drawn with matplotlib's Agg canvas on a ``matplotlib.figure.Figure``
(no ``pyplot``, no display, the global backend is left alone), so they work on
a headless server, in tests and in notebooks (show the written PNG, e.g. with
``IPython.display.Image``, or display the returned figure).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import pathlib
import unicodedata
import warnings
from typing import Any

import numpy as np

__all__ = [
    "AttentionPlot",
    "PositionalEncodingPlot",
    "attention_matrices",
    "cjk_font",
    "plot_attention_heads",
    "plot_positional_encoding",
    "positional_encoding_matrix",
]

_PathLike = str | os.PathLike


@dataclasses.dataclass
class AttentionPlot:
    """What :func:`plot_attention_heads` drew.

    Attributes:
        figure: the ``matplotlib.figure.Figure``: ``num_heads`` heat-map axes
            (:attr:`head_axes`, titled ``head 1``..``head h``) plus one colour-bar
            axes.
        head_axes: the heat-map axes, one per head, in head order.
        weights: float32 ``np.ndarray`` ``[num_heads, T, S]``, the plotted
            cross-attention weights of the chosen decoder layer (each row sums to
            1 over the S source positions; no padding in a single pair).
        source_pieces: the S source pieces (``pieces + ["</s>"]``), x-axis labels.
        target_pieces: the T target pieces (``pieces + ["</s>"]``, row ``t`` is
            the decoder position that predicts piece ``t``), y-axis labels.
        target: the target sentence (given, or the greedy translation).
        layer: the decoder layer index plotted (0-based, non-negative).
        path: the PNG written, or ``None``.
        num_layers: the model's decoder layers.
        label_font: the family of the CJK font the axis labels were drawn
            with (:func:`cjk_font`), or None (no CJK piece, or no such font).
    """

    figure: Any
    head_axes: list
    weights: np.ndarray
    source_pieces: list[str]
    target_pieces: list[str]
    target: str
    layer: int
    path: str | None
    num_layers: int = 0
    label_font: str | None = None


@dataclasses.dataclass
class PositionalEncodingPlot:
    """What :func:`plot_positional_encoding` drew.

    Attributes:
        figure: the ``matplotlib.figure.Figure`` (the matrix axes and a colour bar).
        matrix: float32 ``np.ndarray`` ``[length, d_model]``, ``PE(pos, 2i) =
            sin(pos / 10000^(2i/d_model))``, ``PE(pos, 2i+1) = cos(...)``.
        path: the PNG written, or ``None``.
    """

    figure: Any
    matrix: np.ndarray
    path: str | None


def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: _PathLike | None) -> str | None:
    if path is None:
        return None
    path = pathlib.Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"the output path must end in .png, got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", bbox_inches="tight")
    return str(path)


#: Installed fonts that draw Chinese (and Japanese, Korean) looked for by family name, best first.
CJK_FONT_NAMES = (
    "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",
    "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback", "Microsoft YaHei", "PingFang SC",
    "Heiti SC", "SimHei", "Noto Sans CJK KR", "Noto Sans CJK TC",
)
#: The font of the ``mplfonts`` package used when no installed font has the glyphs.
MPLFONTS_FILE = "NotoSansCJKsc-Regular.otf"
_NO_CJK_FONT = (
    "no font with Chinese/Japanese/Korean glyphs was found, so the pieces {chars} are drawn as boxes: "
    'pip install "keras_transformer[cjk]" (the mplfonts package, Noto Sans CJK SC), or install a CJK font '
    "(Debian/Ubuntu: apt install fonts-noto-cjk; then delete matplotlib's font cache, ~/.cache/matplotlib)"
)


@functools.lru_cache(maxsize=None)
def cjk_font() -> str | None:
    """The family name of a font that draws CJK characters, found at run time (cached), or None.

    An installed font of :data:`CJK_FONT_NAMES` (matplotlib's font list: the
    system's fonts, e.g. Debian's ``fonts-noto-cjk``), else the ``mplfonts``
    package's Noto Sans CJK SC (:data:`MPLFONTS_FILE`, registered with
    matplotlib here; ``pip install "keras_transformer[cjk]"``).

    Returns:
        ``str`` (e.g. ``"Noto Sans CJK SC"``), or None when neither exists.
    """
    from matplotlib import font_manager

    installed = {font.name for font in font_manager.fontManager.ttflist}
    for name in CJK_FONT_NAMES:
        if name in installed:
            return name
    spec = importlib.util.find_spec("mplfonts")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "fonts" / MPLFONTS_FILE
    if not path.is_file():
        return None
    font_manager.fontManager.addfont(str(path))
    return font_manager.FontProperties(fname=str(path)).get_name()


def _wide_characters(labels: list[str]) -> list[str]:
    """The distinct East Asian wide or full-width characters of ``labels`` (those the default font lacks)."""
    found = dict.fromkeys(c for label in labels for c in label if unicodedata.east_asian_width(c) in ("W", "F"))
    return list(found)


def _label_font(labels: list[str]) -> str | None:
    """:func:`cjk_font` when ``labels`` hold CJK characters (warning when there is none), else None."""
    wide = _wide_characters(labels)
    if not wide:
        return None
    font = cjk_font()
    if font is None:
        shown = "".join(wide[:8]) + ("..." if len(wide) > 8 else "")
        warnings.warn(_NO_CJK_FONT.format(chars=shown), stacklevel=3)
    return font


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


# --------------------------------------------------------------------------- loading


def _load_model(path: _PathLike):
    from keras_transformer.saving import load_model

    return load_model(path, compile=False)


def _load_tokenizer(path: _PathLike):
    from keras_transformer.data.tokenizer import SubwordTokenizer

    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SentencePiece model file not found: {path}")
    return SubwordTokenizer(str(path))


# --------------------------------------------------------------------------- attention


def _pieces(tokenizer, ids: list[int]) -> list[str]:
    if not ids:
        return []
    ids = np.asarray(ids, np.int32)
    pieces = tokenizer.id_to_piece(ids).numpy()
    return [p.decode("utf-8", errors="replace") for p in pieces]


def _greedy_translation_ids(model, tokenizer, source: str) -> list[int]:
    """Target pieces (no BOS/EOS) of the greedy translation of ``source``."""
    import tensorflow as tf

    from keras_transformer.decoding.translator import Translator

    translator = Translator(model, tokenizer, max_length=int(model.max_length), beam_size=1)
    ids = translator.translate_greedy(tf.constant([source]))["output_ids"].numpy()[0].tolist()
    eos = tokenizer.eos_id
    ids = ids[: ids.index(eos)] if eos in ids else ids
    return [i for i in ids if i != 0]


def attention_matrices(model, tokenizer, source: str, target: str | None = None) -> dict[str, Any]:
    """Cross-attention weights of every decoder layer for one sentence pair.

    Args:
        model: a :class:`keras_transformer.Transformer` (with
            :meth:`~keras_transformer.Transformer.attention_weights`).
        tokenizer: the shared :class:`~keras_transformer.data.tokenizer.SubwordTokenizer`.
        source: the source sentence (``str``, not empty).
        target: the target sentence, or ``None`` to use the model's greedy
            translation of ``source`` (Section 6.1 search with beam 1).

    Returns:
        dict with ``weights``: list of N float32 ``np.ndarray`` ``[num_heads, T,
        S]`` (one per decoder layer); ``source_ids`` (S ints, pieces + EOS);
        ``target_ids`` (T ints, pieces + EOS, the predicted side);
        ``source_pieces`` and ``target_pieces`` (their pieces); ``target``
        (the target sentence used).

    Raises:
        ValueError: for an empty source (or one with no pieces), or a source or
            target longer than ``model.max_length - 1`` pieces.
    """
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"the source sentence is empty: {source!r}")
    if target is not None and not isinstance(target, str):
        raise ValueError(f"target must be a str or None, got {type(target).__name__}")
    source_pieces_ids = tokenizer.encode([source])[0]
    if not source_pieces_ids:
        raise ValueError(f"the source sentence has no pieces after tokenization: {source!r}")
    if target is None:
        target_pieces_ids = _greedy_translation_ids(model, tokenizer, source)
        target = tokenizer.decode([target_pieces_ids])[0]
    else:
        target_pieces_ids = tokenizer.encode([target])[0]
    limit = int(model.max_length) - 1
    for side, ids in (("source", source_pieces_ids), ("target", target_pieces_ids)):
        if len(ids) > limit:
            raise ValueError(
                f"the {side} sentence has {len(ids)} pieces; the model takes at most {limit} "
                f"(max_length {model.max_length} minus EOS/BOS)"
            )
    eos, bos = tokenizer.eos_id, tokenizer.bos_id
    source_ids = list(source_pieces_ids) + [eos]
    target_in = [bos] + list(target_pieces_ids)
    target_out = list(target_pieces_ids) + [eos]
    weights = model.attention_weights(np.asarray([source_ids], np.int32), np.asarray([target_in], np.int32))
    layers = [np.asarray(weights[f"layer_{i}"], np.float32)[0] for i in range(len(weights))]
    return {
        "weights": layers,
        "source_ids": source_ids,
        "target_ids": target_out,
        "source_pieces": _pieces(tokenizer, source_ids),
        "target_pieces": _pieces(tokenizer, target_out),
        "target": target,
    }


def plot_attention_heads(
    model: Any,
    tokenizer: Any,
    source: str,
    target: str | None = None,
    *,
    layer: int = -1,
    path: _PathLike | None = None,
    max_columns: int = 4,
) -> AttentionPlot:
    """Heat maps of every head of one decoder layer's encoder-decoder attention.

    Multi-head attention (Section 3.2.2) lets each head attend to different
    source positions; this draws, for a sentence pair, the weights
    ``softmax(Q K^T / sqrt(d_k))`` (Eq. 1) of each head of the attention over
    the encoder output ("encoder-decoder attention", Section 3.2.3) in decoder
    layer ``layer``: a grid of ``num_heads`` panels with the source pieces on
    the x-axis and the target pieces on the y-axis (row ``t`` = the decoder
    position predicting target piece ``t``), one colour scale (0 to the
    largest weight) shared by all panels.

    Args:
        model: a :class:`keras_transformer.Transformer`, or the path of a
            ``.keras`` file holding one.
        tokenizer: the shared ``SubwordTokenizer``, or the path of its
            ``.model`` file. Axis labels come from ``tokenizer.id_to_piece``.
        source: the source sentence (``str``).
        target: the target sentence; ``None`` translates ``source`` first with
            greedy search (:class:`keras_transformer.decoding.Translator`) and
            plots the attention over the model's own translation.
        layer: decoder layer index, Python ``int``; negative counts from the
            end (default ``-1``, the last layer).
        path: where to write the PNG (parent folders are created), or ``None``
            to only return the figure.
        max_columns: panels per row of the grid.

    Returns:
        :class:`AttentionPlot` (the figure, its ``num_heads`` heat-map axes, the
        float32 weights ``[num_heads, T, S]``, the labels, the target used and
        the PNG path).

    Raises:
        ValueError: for an empty source, a ``layer`` out of range, a sentence
            longer than the model's ``max_length``, or a ``path`` not ending in
            ``.png``.
        FileNotFoundError: when ``model`` or ``tokenizer`` is a path to a
            missing file.

    Warns:
        UserWarning: when pieces hold CJK characters and no font draws them
            (:func:`cjk_font`), naming the characters and how to install one.

    Example:

    >>> result = plot_attention_heads(model, tokenizer, "A dog runs.",
    ...                               path="att.png")             # doctest: +SKIP
    >>> result.weights.shape                                      # doctest: +SKIP
    (4, 7, 5)
    """
    if isinstance(model, (str, os.PathLike)):
        model = _load_model(model)
    if isinstance(tokenizer, (str, os.PathLike)):
        tokenizer = _load_tokenizer(tokenizer)
    num_layers = int(model.num_layers)
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not -num_layers <= layer < num_layers:
        raise ValueError(f"layer must be an int in [{-num_layers}, {num_layers - 1}] (the model has {num_layers} decoder layers), got {layer!r}")
    _check_positive_int("max_columns", max_columns)
    if path is not None and pathlib.Path(path).suffix.lower() != ".png":
        raise ValueError(f"the output path must end in .png, got {str(path)!r}")
    layer = int(layer) % num_layers
    found = attention_matrices(model, tokenizer, source, target)
    weights = found["weights"][layer]  # [h, T, S]
    heads, t_len, s_len = weights.shape
    columns = min(heads, max_columns)
    rows = math.ceil(heads / columns)
    panel_w = max(2.5, 0.28 * s_len + 1.0)
    panel_h = max(2.5, 0.28 * t_len + 1.0)
    figure = _new_figure(columns * panel_w + 1.0, rows * panel_h + 0.8)
    grid = figure.add_gridspec(rows, columns)
    head_axes = []
    image = None
    # One colour scale for all panels, 0 to the largest weight (an untrained model's
    # near-uniform weights would be invisible on a fixed 0..1 scale).
    vmax = max(float(weights.max()), 1e-6)
    label_font = _label_font(found["source_pieces"] + found["target_pieces"])
    # A fallback list: the CJK font draws what it has, DejaVu Sans the rest (e.g. SentencePiece's "▁").
    families = {"fontfamily": [label_font, "DejaVu Sans"]} if label_font else {}
    for h in range(heads):
        ax = figure.add_subplot(grid[h // columns, h % columns])
        image = ax.imshow(weights[h], cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
        ax.set_title(f"head {h + 1}", fontsize=10)
        ax.set_xticks(range(s_len))
        ax.set_xticklabels(found["source_pieces"], rotation=90, fontsize=8, **families)
        ax.set_yticks(range(t_len))
        ax.set_yticklabels(found["target_pieces"], fontsize=8, **families)
        if h // columns == rows - 1 or h + columns >= heads:
            ax.set_xlabel("source", fontsize=9)
        if h % columns == 0:
            ax.set_ylabel("target", fontsize=9)
        head_axes.append(ax)
    figure.colorbar(image, ax=head_axes, shrink=0.6, label="attention weight")
    figure.suptitle(
        f"Encoder-decoder attention, decoder layer {layer + 1} of {num_layers}, {heads} heads", fontsize=11
    )
    written = _save(figure, path)
    return AttentionPlot(
        figure=figure,
        head_axes=head_axes,
        weights=weights,
        source_pieces=found["source_pieces"],
        target_pieces=found["target_pieces"],
        target=found["target"],
        layer=layer,
        path=written,
        num_layers=num_layers,
        label_font=label_font,
    )


# --------------------------------------------------------------------------- positional encoding


def positional_encoding_matrix(d_model: int, length: int) -> np.ndarray:
    """The sinusoidal positional encodings of positions ``0..length-1`` (Section 3.5).

    Args:
        d_model: positive even int, the encoding width.
        length: positive int, the number of positions.

    Returns:
        float32 ``np.ndarray`` ``[length, d_model]``: ``PE(pos, 2i) = sin(pos /
        10000^(2i / d_model))``, ``PE(pos, 2i + 1) = cos(pos / 10000^(2i /
        d_model))`` (what the model adds to its embeddings).

    Raises:
        ValueError: if ``d_model`` is not a positive even int or ``length`` not
            a positive int.
    """
    _check_positive_int("d_model", d_model)
    _check_positive_int("length", length)
    if d_model % 2:
        raise ValueError(f"d_model must be even (sin and cos pairs), got {d_model}")
    from keras_transformer.layers.positional_embedding import sinusoidal_encoding

    return np.asarray(sinusoidal_encoding(np.arange(length), int(d_model)), np.float32)


def plot_positional_encoding(d_model: int, length: int, path: _PathLike | None = None) -> PositionalEncodingPlot:
    """A heat map of the sinusoidal positional encoding matrix (Section 3.5).

    Rows are positions ``0..length-1``, columns the ``d_model`` dimensions;
    the wavelengths grow geometrically from ``2*pi`` (dimensions 0-1) to
    ``10000 * 2*pi`` along the columns.

    Args:
        d_model: positive even int.
        length: positive int, the number of positions.
        path: where to write the PNG (parent folders are created), or ``None``.

    Returns:
        :class:`PositionalEncodingPlot` with the figure, the float32 matrix
        ``[length, d_model]`` and the PNG path.

    Raises:
        ValueError: for a bad ``d_model`` or ``length`` (see
            :func:`positional_encoding_matrix`) or a ``path`` not ending in ``.png``.

    Example:

    >>> plot_positional_encoding(256, 100, path="pe.png").matrix.shape   # doctest: +SKIP
    (100, 256)
    """
    matrix = positional_encoding_matrix(d_model, length)
    if path is not None and pathlib.Path(path).suffix.lower() != ".png":
        raise ValueError(f"the output path must end in .png, got {str(path)!r}")
    figure = _new_figure(min(12.0, 3.0 + d_model / 40.0), min(9.0, 2.5 + length / 25.0))
    ax = figure.add_subplot(1, 1, 1)
    image = ax.imshow(matrix, cmap="RdBu", vmin=-1.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xlabel("dimension (even: sin, odd: cos)")
    ax.set_ylabel("position")
    ax.set_title(f"Sinusoidal positional encoding, d_model={d_model}, {length} positions (Section 3.5)", fontsize=10)
    figure.colorbar(image, ax=ax)
    return PositionalEncodingPlot(figure=figure, matrix=matrix, path=_save(figure, path))
