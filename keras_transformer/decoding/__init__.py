"""Decoding: greedy and beam search (Section 6.1), sampling (back-translation), the string-to-string
Translator, corpus translation, n-best lists, minimum Bayes risk selection among them
(:mod:`keras_transformer.decoding.mbr`) and forced-decoding scores, and translating with a
CTranslate2 export (:mod:`keras_transformer.decoding.ctranslate2`).

``search`` depends on TensorFlow only; ``Translator`` is imported lazily so that
importing the searches never needs the model or tokenizer modules.
"""

from keras_transformer._lazy import lazy_exports
from keras_transformer.decoding.search import (
    beam_search,
    greedy_search,
    length_penalty_factor,
    sample_search,
    tile_for_beam,
)

__all__ = [
    "beam_search", "greedy_search", "sample_search", "length_penalty_factor", "tile_for_beam", "Translator",
    "translate_lines", "n_best_lines", "mbr_translations", "score_lines",
]


__getattr__, __dir__ = lazy_exports(__name__, {
    "Translator": ".translator", "translate_lines": ".corpus", "n_best_lines": ".corpus", "mbr_translations": ".mbr",
    "score_lines": ".scoring",
}, globals())
