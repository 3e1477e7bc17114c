"""Data: shared SentencePiece vocabulary, parallel text sources, tf.data pipeline.

Text flows one way (Section 5.1 of "Attention Is All You Need"): parallel text
(:mod:`~keras_transformer.data.sources`) -> shared subword ids
(:mod:`~keras_transformer.data.tokenizer`, Section 3.4) -> length-bucketed token
batches (:mod:`~keras_transformer.data.pipeline`).
"""

from keras_transformer.data.pipeline import (
    LengthReport,
    PreparedPairs,
    bucket_widths,
    count_real_tokens,
    dataset_statistics,
    make_dataset,
    make_pair_dataset,
    prepare_pairs,
)
from keras_transformer.data.sources import (
    ParallelText,
    ReadReport,
    default_data_dir,
    load_multi30k,
    load_tfds_translation,
    read_parallel_files,
    read_tsv_pairs,
)
from keras_transformer.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    SubwordTokenizer,
    read_tokenizer_options,
    train_sentencepiece,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "LengthReport",
    "ParallelText",
    "PreparedPairs",
    "ReadReport",
    "SubwordTokenizer",
    "bucket_widths",
    "count_real_tokens",
    "dataset_statistics",
    "default_data_dir",
    "load_multi30k",
    "load_tfds_translation",
    "make_dataset",
    "make_pair_dataset",
    "prepare_pairs",
    "read_parallel_files",
    "read_tsv_pairs",
    "read_tokenizer_options",
    "train_sentencepiece",
]
