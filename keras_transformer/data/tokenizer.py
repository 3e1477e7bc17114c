"""Shared subword vocabulary: SentencePiece training and in-graph tokenization.

"Attention Is All You Need" (Vaswani et al., 2017), Section 5.1 encodes
sentences with byte-pair encoding / word pieces and uses **one vocabulary shared
by source and target** (about 37,000 tokens for EN-DE), which Section 3.4 needs
to tie the two embedding matrices and the pre-softmax projection.

This module trains that vocabulary with the ``sentencepiece`` library on the
training text of *both* languages (:func:`train_sentencepiece`) and wraps the
model in :class:`SubwordTokenizer`, a ``tf.Module`` that tokenizes and
detokenizes inside a TensorFlow graph with
``tensorflow_text.SentencepieceTokenizer`` (so an exported SavedModel takes raw
strings and returns raw strings).

Ids (binding contract of the package): pad = 0, unk = 1, bos = 2, eos = 3.

Decisions:

* **Normalization** (``normalization_rule_name="nmt_nfkc"``, SentencePiece's
  default): Unicode NFKC, every Unicode space (tab, newline, U+00A0, U+2009,
  U+3000, ...; all of ``\s`` and ``\p{Z}``) becomes a space, other control
  characters are removed, then runs of spaces collapse and leading/trailing
  ones go (``remove_extra_whitespaces``). The rule is compiled into the model
  proto (``normalizer_spec.precompiled_charsmap``), so the one rule runs
  wherever the vocabulary does: the SentencePiece trainer on the training
  text, :func:`~keras_transformer.data.pipeline.prepare_pairs` and the
  Translator through ``tensorflow_text`` (in-graph, hence in every
  SavedModel), the ``sentencepiece`` library (CTranslate2 export). A
  sentence written with tabs, no-break or ideographic spaces, repeated or
  surrounding spaces gets exactly the ids of its plain form.
  ``detokenize(tokenize(x)) == x`` holds for text that is already normal
  (NFKC, single spaces, no surrounding ones: every Multi30k test2016 line and
  all val lines but ``val.de`` line 1, which has a U+00A0); other text comes
  back normalized (U+00A0 as a space, ``…`` as ``...``), and a model
  trained on normalized targets writes normalized text.
  Gaps of SentencePiece's rule, kept as they are: U+000B and U+001C-U+001F
  are removed (not turned into spaces), U+0085 is not normalized.
  Vocabularies trained before this default used ``"identity"`` (no character
  mapping: a tab or U+00A0 was its own piece, or ``unk``); the rule lives in
  their proto, so they keep tokenizing exactly as before
  (:attr:`SubwordTokenizer.normalization` tells which rule a vocabulary has).
* ``byte_fallback`` is on when the vocabulary has room for the 256 byte pieces
  (``vocab_size >= 1024`` by default): a character never seen in training is
  spelled as UTF-8 bytes instead of becoming ``<unk>``, so it round-trips too.
* Training is deterministic: the optional sample of ``input_sentence_size``
  sentences is drawn here with a seeded ``random.Random`` and SentencePiece runs
  single-threaded unless ``num_threads`` says otherwise.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Union

import numpy as np
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.data.placeholders import PLACEHOLDER

__all__ = [
    "PAD_ID",
    "UNK_ID",
    "BOS_ID",
    "EOS_ID",
    "SubwordTokenizer",
    "train_sentencepiece",
    "read_tokenizer_options",
    "piece_masks",
]

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

#: Name of the model written by :func:`train_sentencepiece` when given a directory.
DEFAULT_MODEL_NAME = "spm"

PathOrLines = Union[str, os.PathLike, Iterable[str]]


def _is_path(x: Any) -> bool:
    return isinstance(x, (str, os.PathLike))


def _iter_file_lines(path: str) -> Iterator[str]:
    """Yields the non-empty lines of a UTF-8 text file (``.gz`` allowed)."""
    import gzip

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"tokenizer training file not found: {path}")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
            if line:
                yield line


def _iter_training_text(inputs: Iterable[Any]) -> Iterator[str]:
    """Flattens a list of file paths and iterables of sentences into sentences."""
    for item in inputs:
        if _is_path(item):
            yield from _iter_file_lines(item)
            continue
        for sentence in item:  # an iterable of sentences (e.g. one language)
            if isinstance(sentence, bytes):
                sentence = sentence.decode("utf-8")
            sentence = sentence.strip()
            if sentence:
                yield sentence


def _normalize_inputs(files_or_lines: Any) -> list[Any]:
    """Turns the user's argument into a list of "sources" for _iter_training_text.

    Accepted: one path, a list of paths, one iterable of sentences, or a list of
    iterables of sentences (e.g. ``[source_lines, target_lines]``). A list of
    plain strings is a list of paths if one of them is an existing file (then
    all must exist), an error if they all look like missing paths (no space,
    a path separator or a ``.gz``/``.txt``/``.tsv`` ending), otherwise a list
    of sentences.
    """
    if _is_path(files_or_lines):
        path = os.fspath(files_or_lines)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"tokenizer training file not found: {path}")
        return [path]
    if isinstance(files_or_lines, (list, tuple)):
        items = list(files_or_lines)
        if items and all(isinstance(x, str) for x in items):
            if any(os.path.isfile(p) for p in items):
                for p in items:
                    if not os.path.isfile(p):
                        raise FileNotFoundError(f"tokenizer training file not found: {p}")
                return items
            if len(items) <= 16 and all(
                " " not in x and (os.sep in x or x.endswith((".gz", ".txt", ".tsv"))) for x in items
            ):
                # A mistyped path must not silently become the training text.
                raise FileNotFoundError(f"tokenizer training file(s) not found: {', '.join(items)}")
            return [items]  # sentences
        return items
    return [files_or_lines]


def _sample_sentences(sentences: Iterable[str], size: int, seed: int) -> list[str]:
    """Uniform reservoir sample of ``size`` sentences (all if fewer), in input order."""
    rng = random.Random(seed)
    reservoir: list[tuple[int, str]] = []
    for i, s in enumerate(sentences):
        if i < size:
            reservoir.append((i, s))
        else:
            j = rng.randint(0, i)
            if j < size:
                reservoir[j] = (i, s)
    reservoir.sort()
    return [s for _, s in reservoir]


def train_sentencepiece(
    files_or_lines: PathOrLines | Iterable[PathOrLines],
    model_prefix_or_dir: str | os.PathLike,
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    input_sentence_size: int = 10_000_000,
    shuffle: bool = True,
    seed: int = 0,
    normalization_rule_name: str = "nmt_nfkc",
    byte_fallback: bool | None = None,
    num_threads: int = 1,
    max_sentence_length: int = 8192,
    extra_options: dict[str, Any] | None = None,
    placeholders: bool = True,
) -> str:
    """Trains a shared SentencePiece vocabulary on both languages (Section 3.4, 5.1).

    Args:
        files_or_lines: the training text of BOTH languages: a path, a list of
            paths (plain or ``.gz`` UTF-8, one sentence per line), an iterable of
            sentences, or a list of iterables (e.g. ``[source_lines,
            target_lines]``). Empty lines are ignored.
        model_prefix_or_dir: an existing directory (the model is written as
            ``<dir>/spm.model``) or a path prefix (``<prefix>.model``). The
            training options, vocabulary size and sha256 are written next to
            it as ``<prefix>.json``.
        vocab_size: number of pieces including pad/unk/bos/eos.
        model_type: ``"unigram"`` (default, Kudo 2018) or ``"bpe"`` (the
            paper's byte-pair encoding, Sennrich et al. 2016).
        character_coverage: fraction of characters covered by the alphabet.
        input_sentence_size: at most this many sentences are used; larger
            corpora are sampled uniformly (seeded).
        shuffle: with sampling, draw a uniform random sample; when False, take
            the first ``input_sentence_size`` sentences.
        seed: seed of the sample (training is deterministic for a seed).
        normalization_rule_name: SentencePiece's normalization rule, stored
            in the model: ``"nmt_nfkc"`` (default; NFKC and Unicode spaces
            folded, see the module docstring), ``"identity"`` (no character
            mapping: ``detokenize(tokenize(x)) == x`` for any text without
            repeated or surrounding spaces; the default before), or another
            SentencePiece rule (``"nfkc"``, ``"nmt_nfkc_cf"``, ...).
        byte_fallback: spell unseen characters as UTF-8 bytes. ``None`` = on
            when ``vocab_size >= 1024`` (the 256 byte pieces are part of the
            vocabulary).
        num_threads: SentencePiece trainer threads (1 is bit-for-bit
            reproducible).
        max_sentence_length: longer sentences (in bytes) are skipped by the
            trainer.
        extra_options: more SentencePiece trainer options (override the above).
        placeholders: add the placeholder piece ``⦅ph⦆`` (a user-defined
            symbol, always one piece) that carries numbers, web and e-mail
            addresses through translation
            (:mod:`keras_transformer.data.placeholders`); False: no such piece,
            spans are translated as any text.

    Returns:
        The path of the written ``.model`` file (``str``).

    Raises:
        ValueError: for an unknown ``model_type``, a non-positive
            ``vocab_size``, no training text, or when SentencePiece cannot
            reach ``vocab_size`` on this text (the message says so).
        FileNotFoundError: naming a training file that does not exist.
    """
    if model_type not in ("unigram", "bpe"):
        raise ValueError(f"model_type must be 'unigram' or 'bpe', got {model_type!r}")
    if not isinstance(vocab_size, int) or vocab_size <= 4:
        raise ValueError(f"vocab_size must be an integer > 4 (pad/unk/bos/eos are reserved), got {vocab_size!r}")
    if not 0.0 < character_coverage <= 1.0:
        raise ValueError(f"character_coverage must be in (0, 1], got {character_coverage!r}")
    if input_sentence_size <= 0:
        raise ValueError(f"input_sentence_size must be positive, got {input_sentence_size!r}")
    if byte_fallback is None:
        byte_fallback = vocab_size >= 1024

    sentences = _iter_training_text(_normalize_inputs(files_or_lines))
    if shuffle:
        sample = _sample_sentences(sentences, input_sentence_size, seed)
    else:
        sample = []
        for s in sentences:
            if len(sample) >= input_sentence_size:
                break
            sample.append(s)
    if not sample:
        raise ValueError("train_sentencepiece: no (non-empty) training sentences were given")

    model_prefix_or_dir = os.fspath(model_prefix_or_dir)
    if os.path.isdir(model_prefix_or_dir):
        prefix = os.path.join(model_prefix_or_dir, DEFAULT_MODEL_NAME)
    else:
        prefix = model_prefix_or_dir
        if prefix.endswith(".model"):
            prefix = prefix[: -len(".model")]
        parent = os.path.dirname(prefix)
        if parent:
            os.makedirs(parent, exist_ok=True)

    options: dict[str, Any] = dict(
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        normalization_rule_name=normalization_rule_name,
        byte_fallback=byte_fallback,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        num_threads=num_threads,
        max_sentence_length=max_sentence_length,
        # The sample above already bounds the input; SentencePiece must not re-sample.
        input_sentence_size=0,
        shuffle_input_sentence=False,
        minloglevel=2,
    )
    if placeholders:
        options["user_defined_symbols"] = [PLACEHOLDER]
    options.update(extra_options or {})
    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(sample), model_writer=buffer, **options)
    except RuntimeError as e:
        raise ValueError(
            f"SentencePiece training failed ({e}). With {len(sample)} sentences a vocab_size of "
            f"{vocab_size} may be too large (or too small for the alphabet"
            f"{' plus 256 byte pieces; try byte_fallback=False' if byte_fallback else ''})."
        ) from e
    model_bytes = buffer.getvalue()
    model_path = prefix + ".model"
    with open(model_path, "wb") as f:
        f.write(model_bytes)
    record = {
        "format": "keras_transformer.sentencepiece/1",
        "model_file": os.path.basename(model_path),
        "sha256": hashlib.sha256(model_bytes).hexdigest(),
        "vocab_size": vocab_size,
        "pad_id": PAD_ID,
        "unk_id": UNK_ID,
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "training_sentences": len(sample),
        "seed": seed,
        "shuffle": shuffle,
        "sentencepiece_version": spm.__version__,
        "trainer_options": {k: v for k, v in options.items() if k != "minloglevel"},
    }
    with open(prefix + ".json", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, sort_keys=True)
    return model_path


def read_tokenizer_options(model_path: str | os.PathLike) -> dict[str, Any] | None:
    """The JSON record written next to ``<prefix>.model`` by :func:`train_sentencepiece`.

    Args:
        model_path: path of the ``.model`` file.

    Returns:
        The dict (training options, ``sha256``, ``vocab_size``, ids), or
        ``None`` when there is no ``<prefix>.json``.
    """
    model_path = os.fspath(model_path)
    json_path = (model_path[: -len(".model")] if model_path.endswith(".model") else model_path) + ".json"
    if not os.path.exists(json_path):
        return None
    with open(json_path, encoding="utf-8") as f:
        return json.load(f)


def piece_masks(processor: spm.SentencePieceProcessor) -> tuple[np.ndarray, np.ndarray]:
    """Which ids of a SentencePiece model are unknown, and which are known words.

    Args:
        processor: a loaded ``sentencepiece.SentencePieceProcessor``.

    Returns:
        ``(unknown, word)``, two ``[vocab_size]`` bool numpy arrays: ``unknown``
        is True for ``unk`` and the byte-fallback pieces ``<0x00>``..``<0xFF>``
        (characters the vocabulary has no piece for); ``word`` for the other
        non-control pieces that hold a letter or a digit (Unicode categories
        ``L*``, ``N*``). Used by the Translators' unknown-input rule
        (:mod:`keras_transformer.decoding.text`).
    """
    size = int(processor.get_piece_size())
    unknown = np.array([bool(processor.is_unknown(i) or processor.is_byte(i)) for i in range(size)], dtype=bool)
    word = np.array(
        [
            not (unknown[i] or processor.is_control(i))
            and any(unicodedata.category(c)[0] in "LN" for c in processor.id_to_piece(i))
            for i in range(size)
        ],
        dtype=bool,
    )
    return unknown, word


def _normalization_rule(model_bytes: bytes) -> str:
    """The ``normalizer_spec.name`` of a serialized SentencePiece model (e.g. ``"nmt_nfkc"``, ``"identity"``)."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_bytes)
    return proto.normalizer_spec.name


class SubwordTokenizer(tf.Module):
    """In-graph SentencePiece tokenizer with the shared vocabulary (Section 3.4).

    Wraps ``tensorflow_text.SentencepieceTokenizer`` so tokenization runs inside
    ``tf.data`` and inside an exported SavedModel. The serialized model is kept
    in :attr:`model_bytes` (to ship as an export asset) and identified by
    :attr:`vocab_sha256`, so a trained model can check it is used with the
    vocabulary it was trained with.

    Args:
        model_path_or_bytes: path of a ``.model`` file written by
            :func:`train_sentencepiece`, or the serialized model ``bytes``.
        name: module name.

    Raises:
        FileNotFoundError: naming a model path that does not exist.
        ValueError: when the model does not use the package's ids
            (pad=0, unk=1, bos=2, eos=3) or the bytes are not a model.

    Example:

    >>> tok = SubwordTokenizer("vocab/spm.model")            # doctest: +SKIP
    >>> ids = tok.tokenize(tf.constant(["A dog runs."]))      # doctest: +SKIP
    >>> tok.detokenize(ids)                                    # doctest: +SKIP
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'A dog runs.'], dtype=object)>
    """

    def __init__(self, model_path_or_bytes: str | os.PathLike | bytes, name: str | None = None):
        super().__init__(name=name)
        self.model_path: str | None = None
        if isinstance(model_path_or_bytes, bytes):
            model_bytes = model_path_or_bytes
        else:
            path = os.fspath(model_path_or_bytes)
            if not os.path.exists(path):
                raise FileNotFoundError(f"SentencePiece model not found: {path}")
            with open(path, "rb") as f:
                model_bytes = f.read()
            self.model_path = path
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model_bytes)
        except Exception as e:  # sentencepiece raises RuntimeError/OSError variants
            raise ValueError(f"not a SentencePiece model ({self.model_path or 'bytes'}): {e}") from e
        ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"SentencePiece model {self.model_path or '(bytes)'} has pad/unk/bos/eos ids {ids}; "
                f"keras_transformer needs {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)} (train it with train_sentencepiece)"
            )
        self._processor = processor
        self._model_bytes = model_bytes
        self._vocab_size = int(processor.get_piece_size())
        self._sha256 = hashlib.sha256(model_bytes).hexdigest()
        self._tokenizer = tf_text.SentencepieceTokenizer(model=model_bytes, out_type=tf.int32)
        self._normalization = _normalization_rule(model_bytes)
        self._unknown, self._word = piece_masks(processor)
        placeholder = processor.piece_to_id(PLACEHOLDER)
        self._placeholder_id = 0 if placeholder == processor.unk_id() else int(placeholder)

    # -- identity of the vocabulary -------------------------------------------------
    @property
    def model_bytes(self) -> bytes:
        """The serialized SentencePiece model (``bytes``), e.g. for an export asset."""
        return self._model_bytes

    @property
    def vocab_sha256(self) -> str:
        """sha256 hex digest of :attr:`model_bytes`: the vocabulary's version."""
        return self._sha256

    @property
    def vocab_size(self) -> int:
        """Number of ids (python ``int``), pad/unk/bos/eos included."""
        return self._vocab_size

    @property
    def normalization(self) -> str:
        """The SentencePiece normalization rule stored in the model (``str``).

        ``"nmt_nfkc"`` for vocabularies trained by :func:`train_sentencepiece`
        since it folds Unicode spaces (module docstring), ``"identity"`` for
        older ones, ``"user_defined"`` for a custom rule TSV.
        """
        return self._normalization

    @property
    def placeholder_id(self) -> int:
        """The id of the placeholder piece ``⦅ph⦆`` of carried-through spans, 0 when the vocabulary lacks it.

        See :mod:`keras_transformer.data.placeholders` (vocabularies trained
        by :func:`train_sentencepiece` with ``placeholders=True`` have it).
        """
        return self._placeholder_id

    @property
    def unknown_piece_mask(self) -> np.ndarray:
        """``[vocab_size]`` bool numpy array: True for ``unk`` and the byte-fallback pieces ``<0x00>``..``<0xFF>``.

        These ids stand for characters the vocabulary has no piece for (with
        ``character_coverage=1.0`` the byte pieces never occur in the
        training text), e.g. Chinese or emoji in an English-German vocabulary.
        """
        return self._unknown.copy()

    @property
    def word_piece_mask(self) -> np.ndarray:
        """``[vocab_size]`` bool numpy array: True for known pieces holding a letter or a digit.

        Known = neither unknown (:attr:`unknown_piece_mask`) nor a control
        symbol (pad/bos/eos); letters and digits are the Unicode categories
        ``L*`` and ``N*``. Pieces of only spaces (``"▁"``) or punctuation
        (``"."``, ``","``) are not words.
        """
        return self._word.copy()

    @property
    def pad_id(self) -> int:
        """Padding id (0)."""
        return PAD_ID

    @property
    def unk_id(self) -> int:
        """Unknown-piece id (1)."""
        return UNK_ID

    @property
    def bos_id(self) -> int:
        """Beginning-of-sentence id (2), first token of the decoder input."""
        return BOS_ID

    @property
    def eos_id(self) -> int:
        """End-of-sentence id (3), last token of source and decoder target."""
        return EOS_ID

    def save(self, directory: str | os.PathLike, name: str = DEFAULT_MODEL_NAME) -> str:
        """Writes ``<directory>/<name>.model`` (and its ``.json`` record if known).

        Args:
            directory: output directory (created if missing).
            name: file stem.

        Returns:
            The path of the written ``.model`` file.
        """
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name + ".model")
        with open(path, "wb") as f:
            f.write(self._model_bytes)
        record = read_tokenizer_options(self.model_path) if self.model_path else None
        record = dict(record or {}, sha256=self._sha256, vocab_size=self._vocab_size, model_file=name + ".model")
        with open(os.path.join(directory, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2, sort_keys=True)
        return path

    def check_vocabulary(self, expected_sha256: str) -> None:
        """Raises if this is not the vocabulary a model was trained with.

        Args:
            expected_sha256: the :attr:`vocab_sha256` recorded at training time.

        Raises:
            ValueError: naming both hashes when they differ.
        """
        if expected_sha256 != self._sha256:
            raise ValueError(
                f"vocabulary mismatch: the model was trained with SentencePiece model sha256 "
                f"{expected_sha256}, but this tokenizer's model has sha256 {self._sha256}"
            )

    # -- in-graph ops ------------------------------------------------------------------
    def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Strings -> subword ids, without BOS/EOS.

        Args:
            strings: ``[B]`` ``tf.string`` (a python list of ``str`` is accepted).

        Returns:
            ``tf.RaggedTensor`` ``[B, None]`` ``int32``.
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        return self._eager_retry(lambda: self._tokenizer.tokenize(strings))

    def detokenize(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor:
        """Ids -> strings, dropping pad/BOS/EOS and everything after the first EOS.

        Args:
            ids: ``[B, L]`` integer ids, dense (0-padded) or ragged, e.g. the
                output of a search (Section 6.1).

        Returns:
            ``[B]`` ``tf.string``.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        before_eos = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=-1), 0)
        keep = before_eos & tf.not_equal(ids, PAD_ID) & tf.not_equal(ids, BOS_ID)
        keep &= (ids >= 0) & (ids < self._vocab_size)
        kept = tf.ragged.boolean_mask(ids, keep)
        return self._eager_retry(lambda: self._tokenizer.detokenize(kept))

    def _eager_retry(self, op):
        """Runs ``op``; eagerly, rebuilds the SentencePiece resource once if it is gone.

        tensorflow_text's SentencePiece resource is owned by a kernel in the
        eager kernel cache, which ``tf.random.set_seed`` (and
        ``keras.utils.set_random_seed``) clears. Eager calls recover here;
        seed before tracing ``tf.function``s that capture the tokenizer.
        """
        try:
            return op()
        except tf.errors.NotFoundError:
            if not tf.executing_eagerly():
                raise
            self._tokenizer = tf_text.SentencepieceTokenizer(model=self._model_bytes, out_type=tf.int32)
            return op()

    def id_to_piece(self, ids: tf.Tensor) -> tf.Tensor:
        """Ids -> their pieces (e.g. ``"▁dog"``), same shape, ``tf.string``."""
        return self._eager_retry(lambda: self._tokenizer.id_to_string(tf.cast(ids, tf.int32)))

    # -- python convenience (not for graphs) ---------------------------------------------
    def encode(self, sentences: list[str]) -> list[list[int]]:
        """Python lists: sentences -> ids without BOS/EOS (same ids as :meth:`tokenize`)."""
        return self._processor.encode(list(sentences))

    def sample(self, sentences: Sequence[str], alpha: float, seed: int) -> list[list[int]]:
        """Python lists: one segmentation of each sentence drawn from the unigram model (subword regularization).

        Kudo (2018), "Subword Regularization", Section 3: a segmentation is
        drawn with probability ``P(x)^alpha / Z`` over all segmentations of
        the sentence (SentencePiece's forward-filtering backward-sampling,
        ``nbest_size=-1``). Smaller ``alpha`` spreads the draws (0 is
        uniform); large ``alpha`` approaches :meth:`encode`'s best
        segmentation. Every draw detokenizes to the same text as
        :meth:`encode`'s. Not in the Transformer paper; training data only
        (inference always uses the best segmentation).

        Within one process the draws are a function of ``(sentences, alpha,
        seed)``: one thread, SentencePiece's generator seeded with ``seed``.
        Across processes they are not: with sentencepiece 0.2.x the same
        model, sentences and seed give other draws in another process
        (measured; the cause is inside sentencepiece). A BPE model
        has no segmentation probabilities: SentencePiece then applies
        BPE-dropout with probability ``alpha``.

        Args:
            sentences: ``str`` sentences.
            alpha: the smoothing exponent, a float > 0.
            seed: int >= 0.

        Returns:
            ``list[list[int]]``: ids without BOS/EOS, one list per sentence.

        Raises:
            ValueError: for ``alpha <= 0`` or a negative ``seed``.
        """
        if not alpha > 0:
            raise ValueError(f"SubwordTokenizer.sample: alpha must be > 0, got {alpha!r}")
        if seed < 0:
            raise ValueError(f"SubwordTokenizer.sample: seed must be >= 0, got {seed!r}")
        # The generator is process-global in sentencepiece; one thread keeps the draws in a fixed order.
        spm.set_random_generator_seed(int(seed))
        return self._processor.encode(list(sentences), out_type=int, enable_sampling=True, alpha=float(alpha),
                                      nbest_size=-1, num_threads=1)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Python lists: ids -> sentences, with :meth:`detokenize`'s rules."""
        out = []
        for row in ids:
            row = list(row)
            if EOS_ID in row:
                row = row[: row.index(EOS_ID)]
            row = [i for i in row if i not in (PAD_ID, BOS_ID) and 0 <= i < self._vocab_size]
            out.append(self._processor.decode(row))
        return out
