"""keras_transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in Keras 3.

The product is the :class:`Runner` (``keras_transformer.runner``): every workflow (prepare, train,
average, evaluate, translate, score, export, run) over one run folder (:class:`RunFolder`) and its
settings (:class:`RunSettings`, every default in :mod:`keras_transformer.settings`); the command line
and the Colab notebook call it.

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
* Loading a saved ``.keras`` file in a new process: :func:`load_model`
  (:mod:`keras_transformer.saving`).
"""

import os as _os

_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_transformer._lazy import lazy_exports as _lazy_exports  # noqa: E402

__version__ = "0.1.0"

# Public name -> module. Imported on first use (PEP 562), so that `import keras_transformer`
# and the command line start without loading TensorFlow before they need it.
_EXPORTS = {
    "Runner": "keras_transformer.runner",
    "RunSettings": "keras_transformer.settings",
    "DataSettings": "keras_transformer.settings",
    "VocabularySettings": "keras_transformer.settings",
    "TrainingSettings": "keras_transformer.settings",
    "ValidationSettings": "keras_transformer.settings",
    "EvaluationSettings": "keras_transformer.settings",
    "DecodingSettings": "keras_transformer.settings",
    "ExportSettings": "keras_transformer.settings",
    "RunError": "keras_transformer.settings",
    "RunFolder": "keras_transformer.run_folder",
    "TransformerConfig": "keras_transformer.config",
    "PRESETS": "keras_transformer.config",
    "get_preset": "keras_transformer.config",
    "SubwordTokenizer": "keras_transformer.data",
    "make_dataset": "keras_transformer.data",
    "prepare_pairs": "keras_transformer.data",
    "train_sentencepiece": "keras_transformer.data",
    "Translator": "keras_transformer.decoding",
    "beam_search": "keras_transformer.decoding",
    "greedy_search": "keras_transformer.decoding",
    "sample_search": "keras_transformer.decoding",
    "score_corpus": "keras_transformer.evaluation",
    "export_saved_model": "keras_transformer.export",
    "PositionalEmbedding": "keras_transformer.layers",
    "MultiHeadAttention": "keras_transformer.layers",
    "FeedForward": "keras_transformer.layers",
    "EncoderLayer": "keras_transformer.layers",
    "DecoderLayer": "keras_transformer.layers",
    "Encoder": "keras_transformer.model",
    "Decoder": "keras_transformer.model",
    "Transformer": "keras_transformer.model",
    "load_model": "keras_transformer.saving",
    "MaskedLabelSmoothedCrossEntropy": "keras_transformer.training",
    "WarmupSchedule": "keras_transformer.training",
    "paper_optimizer": "keras_transformer.training",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, globals())
