"""Data: shared SentencePiece vocabulary, parallel text sources, tf.data pipelines.

Text flows one way (Section 5.1 of "Attention Is All You Need"): parallel text
(:mod:`~keras_transformer.data.parallel_text`) -> shared subword ids
(:mod:`~keras_transformer.data.tokenizer`, Section 3.4) -> length-bucketed token
batches, either in memory (:mod:`~keras_transformer.data.pipeline`, corpora of
Multi30k's size) or prepared once into id shards on disk and streamed
(:mod:`~keras_transformer.data.prepare`, :mod:`~keras_transformer.data.streaming`,
WMT's size).

Names are imported on first use (PEP 562), so that the tokenizing worker
processes of :func:`~keras_transformer.data.prepare.prepare_corpus` start
without TensorFlow.
"""

import importlib as _importlib

# Public name -> module.
_EXPORTS = {
    "LengthReport": "pipeline",
    "PreparedPairs": "pipeline",
    "bucket_widths": "pipeline",
    "count_real_tokens": "pipeline",
    "dataset_statistics": "pipeline",
    "make_dataset": "pipeline",
    "make_epoch_batches": "pipeline",
    "make_pair_dataset": "pipeline",
    "prepare_pairs": "pipeline",
    "EpochBatches": "epochs",
    "CorpusSource": "prepare",
    "PreparedCorpus": "prepare",
    "PreparedDataError": "prepare",
    "open_prepared": "prepare",
    "prepare_corpus": "prepare",
    "make_streaming_batches": "streaming",
    "ParallelText": "parallel_text",
    "ReadReport": "parallel_text",
    "iter_parallel_files": "parallel_text",
    "iter_tsv_pairs": "parallel_text",
    "read_parallel_files": "parallel_text",
    "read_tsv_pairs": "parallel_text",
    "default_data_dir": "folders",
    "load_multi30k": "multi30k",
    "multi30k_files": "multi30k",
    "disjoint_split": "tatoeba",
    "load_tatoeba": "tatoeba",
    "iter_tfds_pairs": "tfds",
    "load_tfds_translation": "tfds",
    "Corpus": "corpus",
    "DATASETS": "corpus",
    "load_corpus": "corpus",
    "BOS_ID": "tokenizer",
    "EOS_ID": "tokenizer",
    "PAD_ID": "tokenizer",
    "UNK_ID": "tokenizer",
    "SubwordTokenizer": "tokenizer",
    "read_tokenizer_options": "tokenizer",
    "train_sentencepiece": "tokenizer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(_importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
