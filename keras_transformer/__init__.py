"""keras_transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in Keras 3.

Where each part of the paper lives:

* Section 3.1-3.5, the model: :mod:`keras_transformer.layers`
  (``PositionalEmbedding``, ``MultiHeadAttention``, ``FeedForward``,
  ``EncoderLayer``, ``DecoderLayer``) and :mod:`keras_transformer.model`
  (``Encoder``, ``Decoder``, ``Transformer``).
* Table 3, the hyper-parameters: :mod:`keras_transformer.config`.
* Section 5.1, data and batching: :mod:`keras_transformer.data`.
* Section 5.3-5.4, optimizer, schedule and loss: :mod:`keras_transformer.training`.
* Section 6.1, beam search and export: :mod:`keras_transformer.decoding`,
  :mod:`keras_transformer.export`.
"""

import os as _os

_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_transformer.config import PRESETS, TransformerConfig, get_preset  # noqa: E402
from keras_transformer.data import SubwordTokenizer, make_dataset, prepare_pairs, train_sentencepiece  # noqa: E402
from keras_transformer.decoding import Translator, beam_search, greedy_search  # noqa: E402
from keras_transformer.evaluation import score_corpus  # noqa: E402
from keras_transformer.export import export_saved_model  # noqa: E402
from keras_transformer.layers import (  # noqa: E402
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    MultiHeadAttention,
    PositionalEmbedding,
)
from keras_transformer.model import Decoder, Encoder, Transformer  # noqa: E402
from keras_transformer.training import MaskedLabelSmoothedCrossEntropy, WarmupSchedule, paper_optimizer  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "MaskedLabelSmoothedCrossEntropy",
    "MultiHeadAttention",
    "PRESETS",
    "PositionalEmbedding",
    "SubwordTokenizer",
    "Transformer",
    "TransformerConfig",
    "Translator",
    "WarmupSchedule",
    "beam_search",
    "export_saved_model",
    "get_preset",
    "greedy_search",
    "make_dataset",
    "paper_optimizer",
    "prepare_pairs",
    "score_corpus",
    "train_sentencepiece",
]
