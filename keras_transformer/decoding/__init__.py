"""Decoding: greedy and beam search (Section 6.1), sampling (back-translation), the string-to-string
Translator, corpus translation, n-best lists and forced-decoding scores, and translating with a
CTranslate2 export (:mod:`keras_transformer.decoding.ctranslate2`).

``search`` depends on TensorFlow only; ``Translator`` is imported lazily so that
importing the searches never needs the model or tokenizer modules.
"""

from keras_transformer.decoding.search import (
    beam_search,
    greedy_search,
    length_penalty_factor,
    sample_search,
    tile_for_beam,
)

__all__ = [
    "beam_search", "greedy_search", "sample_search", "length_penalty_factor", "tile_for_beam", "Translator",
    "translate_lines", "n_best_lines", "score_lines",
]


def __getattr__(name):
    if name == "Translator":
        from keras_transformer.decoding.translator import Translator

        return Translator
    if name in ("translate_lines", "n_best_lines"):
        from keras_transformer.decoding import corpus

        return getattr(corpus, name)
    if name == "score_lines":
        from keras_transformer.decoding.scoring import score_lines

        return score_lines
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
