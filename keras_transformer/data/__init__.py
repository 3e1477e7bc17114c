"""Data: parallel text, the shared SentencePiece vocabulary, tf.data pipelines.

Text flows one way (Section 5.1 of "Attention Is All You Need"):

1. **Parallel text**: aligned sentence pairs with a report of what was read
   and skipped (:mod:`~keras_transformer.data.parallel_text`: line-aligned
   files and TSV files), from a corpus: Multi30k
   (:mod:`~keras_transformer.data.multi30k`), Tatoeba
   (:mod:`~keras_transformer.data.tatoeba`), a TFDS translation dataset such
   as WMT 2014 (:mod:`~keras_transformer.data.tfds`), or a named corpus with
   its splits and languages (:mod:`~keras_transformer.data.corpus`); the data
   folder and download cache they look in:
   :mod:`~keras_transformer.data.folders`.
2. **Shared subword ids** (:mod:`~keras_transformer.data.tokenizer`,
   Section 3.4).
3. **Length-bucketed token batches**, either in memory
   (:mod:`~keras_transformer.data.pipeline`, corpora of Multi30k's size) or,
   at WMT's size, prepared once into id shards on disk
   (:mod:`~keras_transformer.data.prepare`, from a
   :mod:`~keras_transformer.data.corpus_source`) and streamed
   (:mod:`~keras_transformer.data.prepared` reads the folder,
   :mod:`~keras_transformer.data.streaming` batches it); both give an
   :class:`~keras_transformer.data.epochs.EpochBatches`, from which training
   resumes exactly.

Names are imported on first use (PEP 562), so that the tokenizing worker
processes of :func:`~keras_transformer.data.prepare.prepare_corpus` start
without TensorFlow.
"""

from keras_transformer._lazy import lazy_exports

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
    "CorpusSource": "corpus_source",
    "PreparedCorpus": "prepared",
    "PreparedDataError": "prepared",
    "open_prepared": "prepared",
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


__getattr__, __dir__ = lazy_exports(__name__, {name: f".{module}" for name, module in _EXPORTS.items()}, globals())
