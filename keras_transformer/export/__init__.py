"""Exports of a trained model for serving.

* :mod:`keras_transformer.export.saved_model`: a TF Serving SavedModel whose
  signatures map strings to strings (tokenization, encoder, search and
  detokenization in the graph).
* :mod:`keras_transformer.export.ctranslate2`: a CTranslate2 model directory
  (the fastest CPU path; ``pip install 'keras_transformer[ctranslate2]'``),
  translated by :class:`keras_transformer.decoding.ctranslate2.CTranslate2Translator`
  (also importable from here).

The export sub-package may import :mod:`keras_transformer.decoding` (the
CTranslate2 directory's layout, :mod:`keras_transformer.decoding.ctranslate2_format`,
and the runtime re-exported here); decoding never imports export.
"""

# No ctranslate2 import here: the modules import it inside their functions (an optional extra).
from keras_transformer.decoding import ctranslate2 as _runtime
from keras_transformer.decoding.ctranslate2 import CTranslate2Translator
from keras_transformer.export import ctranslate2 as _ctranslate2
from keras_transformer.export import saved_model as _saved_model
from keras_transformer.export.ctranslate2 import (
    CT2_RECORD_FILENAME,
    CT2_VOCAB_FILENAME,
    QUANTIZATIONS,
    export_ctranslate2,
)
from keras_transformer.export.saved_model import (
    CONFIG_FILENAME,
    SAMPLE_SIGNATURE,
    SIGNATURES,
    VOCAB_ASSET_NAME,
    WARMUP_FILENAME,
    export_saved_model,
    find_python_ops,
    saved_model_op_names,
)

__all__ = [*_saved_model.__all__, *_ctranslate2.__all__, *_runtime.__all__]
