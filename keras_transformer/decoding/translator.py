"""Translator: strings -> subword ids -> encoder -> search -> strings, all in-graph.

A ``tf.Module`` whose ``tf.function``s take a ``[None]`` ``tf.string`` batch
(``input_signature=[tf.TensorSpec([None], tf.string)]``; sampling also takes an
int64 scalar ``seed``), so that the same object
translates in Python and is exported as a SavedModel for TF Serving
(:func:`keras_transformer.export.export_saved_model`). Tokenization uses
``tensorflow_text`` ops; the encoder and the search (greedy or beam, Section 6.1;
sampling for back-translation)
can be compiled with XLA (``jit_compile=True``) for small batches: they run in
an inner ``tf.function(jit_compile=True)`` while the string ops stay outside it
(they have no XLA kernels).

Decisions:

* **Text** (source ids, over-long sources, the output limit, empty and
  whitespace-only input, normalization, unknown input copied through, invalid
  UTF-8): the rules of :mod:`keras_transformer.decoding.text`, which this
  module applies in-graph.
* **Decoding speed.** Without XLA (the default) the self-attention cache
  grows by one position per step (a step costs ``O(step)``, not
  ``O(max_length)``) and a sentence leaves the batch as soon as its search is
  done (``drop_finished``), so the last steps of a batch only compute its
  longest sentences. Beam search stops a sentence once ``beam_size`` finished
  hypotheses are registered (``early_stopping``, the rule of fairseq and
  CTranslate2; the exhaustive tensor2tensor bound searched 1.6x the
  steps on Multi30k for the same BLEU). Under XLA, whose shapes are static,
  the cache is a buffer of ``min(max_length, S + extra_decode_length)``
  positions (``S`` = source width), the source width is bucketed
  (``source_bucket_width``) to bound the compiles, and only searches of up to
  ``xla_max_rows`` decoding rows take that path (XLA wins where op dispatch
  dominates, the shrinking graph-mode batch where work does). Measured in
  ``scripts/bench/decode_vs_ctranslate2.py``.
* **No retracing.** The public functions have a ``[None]`` string input
  signature and the inner numeric functions are traced once with
  ``[None, None]`` source ids, so new batch sizes and sentence lengths reuse
  the same graph (XLA still compiles once per distinct shape when
  ``jit_compile=True``).
* **Sampling** (``translate_sampled(sentences, seed)``, for back-translation):
  :func:`~keras_transformer.decoding.search.sample_search` with the top-k,
  top-p and temperature fixed at construction (like ``beam_size``). A seed
  reproduces the translations in graph mode and under XLA; a sentence's sample
  depends on the seed, its row in the batch and its own source only. Pad and
  BOS are never sampled (neither is a valid output token; fairseq never
  generates pad either), so with ``sampling_topk=1`` it returns
  ``translate_greedy``'s ids wherever greedy search does not pick one of
  them, which a trained model does not rank first.
* ``scores`` are the beam-search scores ``log P(Y|X) / lp(Y)`` (Wu et al. 2016
  length penalty; ``log P`` when ``length_penalty == 0``), float32.
* **n-best lists.** :meth:`Translator.translate_n_best` returns every beam's
  text and score, best first; the hypotheses are distinct token sequences
  (two of them may still detokenize to the same text). A slot without a
  hypothesis has score ``-inf`` and text ``""``; an empty input has one
  hypothesis, ``""`` with score 0, and ``-inf`` in its other slots.
* **Scoring (forced decoding).** :meth:`Translator.score` gives
  ``log P(Y|X)`` of *given* targets by teacher forcing (one batched
  ``model.decode``, Section 3.1), normalised exactly as beam search ranks
  hypotheses: ``score = log P / lp(|Y|)``, ``|Y|`` = the target's pieces + EOS.
  The target is its SentencePiece pieces + EOS (target_in = BOS + pieces,
  target_out = pieces + EOS, the training contract): an empty or
  whitespace-only target is just EOS. Every pair goes through the model as
  tokenized, an empty source included (source = EOS alone), unlike
  :meth:`translate`, which answers ``""`` with score 0 for an empty source
  without consulting the model: a scorer used to filter parallel data must
  not rank an empty source first. A source or target of more than
  ``max_length - 1`` pieces is scored from its first ``max_length - 1``
  pieces (+ EOS, where beam search would force it) and flagged in
  ``truncated``. The score of a text is the score of its tokenization, so it
  equals beam search's score of a hypothesis whose ids are the
  tokenization of its own text (SentencePiece's segmentation, which a model
  usually but not always produces).
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.data import placeholders as placeholder_spans
from keras_transformer.decoding import model_calls, text
from keras_transformer.decoding.search import (
    beam_search, check_sampling, greedy_search, length_penalty_factor, sample_search,
)
from keras_transformer.decoding.search.logits import (
    check_repetition_settings, guard_repetition, init_repetition_history,
)
from keras_transformer.settings import DEFAULT_BEAM_SIZE

__all__ = ["Translator"]

_STRINGS = [tf.TensorSpec([None], tf.string, name="sentences")]
_STRINGS_AND_SEED = _STRINGS + [tf.TensorSpec([], tf.int64, name="seed")]
_PAIRS = [tf.TensorSpec([None], tf.string, name="sentences"), tf.TensorSpec([None], tf.string, name="targets")]


class Translator(tf.Module):
    """Translates a batch of sentences with a trained Transformer (Section 6.1).

    Args:
        model: a ``keras_transformer.Transformer`` (or any object with
            ``encode(source_ids, training)``, ``init_cache(encoder_outputs,
            source_ids, max_length)`` (``max_length=None``: a growing cache,
            used without XLA) and ``decode_step(step_ids, step, cache)``
            following the package contract).
        tokenizer: a ``keras_transformer.data.tokenizer.SubwordTokenizer`` (the
            shared vocabulary the model was trained with).
        max_length: longest source (pieces + EOS) and longest output (tokens +
            EOS), Python int >= 2; at most the model's ``max_length``.
        extra_decode_length: maximum output length = source length + this
            (50 in Section 6.1), Python int >= 0.
        beam_size: beams per sentence (4 in Section 6.1), Python int >= 1.
        length_penalty: alpha of Wu et al. (2016) (0.6 in Section 6.1), >= 0.
        jit_compile: compile encoder + search with XLA for searches of at
            most ``xla_max_rows`` decoding rows (sentences x beams); larger
            ones run the graph-mode search (growing cache, shrinking batch),
            which skips the work of finished sentences that static XLA
            shapes must carry (measured: ``scripts/bench/decode_vs_ctranslate2.py``).
        xla_max_rows: the most decoding rows (batch size, times ``beam_size``
            for beam search) that ``jit_compile`` sends to XLA (Python int
            >= 1), or None for every search (static shapes throughout, e.g.
            for accelerators). Default 4: a single sentence's greedy or
            beam-4 search (or greedy search of up to 4 sentences), where
            per-op dispatch and small matrix products dominate and XLA's
            fused loop wins; larger searches gain more from the graph mode's
            shrinking batch (``scripts/bench/decode_vs_ctranslate2.py``).
        cache_output_matrix: keep a copy of the pre-softmax projection in the
            ``[d_model, vocab_size]`` layout (the transposed tied embedding
            matrix), made here, instead of transposing the embedding matrix
            at every call (1.1-1.2x a single sentence's greedy and beam
            search on a CPU: the ``[rows, d_model] x [d_model, vocab]``
            product streams the matrix faster than the ``transpose_b`` one,
            and the per-call transpose is gone). It costs
            ``4 * d_model * vocab_size`` bytes (8 MB for the ``small``
            preset) and, unlike every other weight, **does not follow later
            changes of the model's weights**: use it for a trained model
            (exports set it; see :meth:`with_settings`), not for translating
            during training. Ignored for untied models, whose projection
            kernel already has that layout.
        sampling_topk: ``translate_sampled`` keeps the k most probable tokens
            at each step (int >= 0; 0: no top-k restriction, 1: greedy).
        sampling_topp: ``translate_sampled``'s nucleus: the smallest set of most
            probable tokens whose probability reaches p, within the step's
            ``max(sampling_topk, 64)`` best tokens (float in ``(0, 1]``; 1: no
            restriction).
        sampling_temperature: ``translate_sampled`` divides the logits by it
            (float > 0; default 1: the model's distribution).
        no_repeat_ngram_size: every search (greedy, beam, sampling, n-best)
            never writes an n-gram of this size twice (0: off; n >= 2), as
            CTranslate2's option of that name and fairseq's
            ``--no-repeat-ngram-size``
            (:func:`~keras_transformer.decoding.search.logits.guard_repetition`).
        repetition_penalty: every search divides the positive logits of the
            tokens it already wrote by this (and multiplies the negative
            ones), float >= 1 (1: off; CTRL, Keskar et al. 2019).
        placeholders: carry numbers, web and e-mail addresses of the source
            through unchanged (each becomes the placeholder piece for the
            model, and the ``i``-th placeholder of the output the ``i``-th
            span again; :mod:`keras_transformer.data.placeholders`), in every
            search, the n-best list and ``score``. On by default; it applies
            only when the vocabulary has the placeholder piece (vocabularies
            trained since it exists), so older models translate as before.
        name: module name.

    Raises:
        ValueError: naming the argument, for a non-positive or non-int size, a
            negative length penalty, a ``max_length`` larger than the model's,
            a tokenizer vocabulary larger than the model's, or sampling or
            repetition settings out of range.

    Example:

    >>> translator = Translator(model, tokenizer, max_length=128)    # doctest: +SKIP
    >>> out = translator.translate(tf.constant(["A dog runs."]))     # doctest: +SKIP
    >>> out["translations"], out["scores"], out["truncated"]         # doctest: +SKIP

    Keep the translator in a name, as above: TensorFlow binds a ``tf.function``
    method to its object weakly, so ``Translator(...).translate(x)`` on a
    temporary can fail with ``'NoneType' object has no attribute ...`` once
    the garbage collector frees the temporary mid-call.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_length: int,
        extra_decode_length: int = TransformerConfig.extra_decode_length,
        beam_size: int = DEFAULT_BEAM_SIZE,
        length_penalty: float = TransformerConfig.length_penalty,
        jit_compile: bool = False,
        source_bucket_width: int = 16,
        early_stopping: bool = True,
        xla_max_rows: int | None = 4,
        compute_dtype: str | None = "float32",
        cache_output_matrix: bool = False,
        sampling_topk: int = 0,
        sampling_topp: float = 1.0,
        sampling_temperature: float = 1.0,
        no_repeat_ngram_size: int = 0,
        repetition_penalty: float = 1.0,
        placeholders: bool = True,
        name: str | None = None,
    ):
        super().__init__(name=name)
        for arg, value, minimum in (
            ("max_length", max_length, 2),
            ("extra_decode_length", extra_decode_length, 0),
            ("beam_size", beam_size, 1),
            ("source_bucket_width", source_bucket_width, 1),
            ("xla_max_rows", 1 if xla_max_rows is None else xla_max_rows, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"Translator {arg} must be an int >= {minimum}, got {value!r}")
        if float(length_penalty) < 0:
            raise ValueError(f"Translator length_penalty must be >= 0, got {length_penalty!r}")
        try:
            sampling = check_sampling(sampling_topk, sampling_topp, sampling_temperature)
        except ValueError as error:  # name the Translator's arguments
            message = str(error)
            for setting in ("top_k", "top_p", "temperature"):
                message = message.replace(setting, "sampling_" + setting.replace("_", ""))
            raise ValueError(f"Translator {message}") from None
        try:
            guard = check_repetition_settings(no_repeat_ngram_size, repetition_penalty)
        except ValueError as error:
            raise ValueError(f"Translator {error}") from None
        model_max_length = getattr(model, "max_length", None)
        if isinstance(model_max_length, int) and max_length > model_max_length:
            raise ValueError(
                f"Translator max_length ({max_length}) exceeds the model's max_length ({model_max_length})"
            )
        model_vocab = getattr(model, "vocab_size", None)
        if isinstance(model_vocab, int) and tokenizer.vocab_size > model_vocab:
            raise ValueError(
                f"tokenizer vocab_size ({tokenizer.vocab_size}) exceeds the model's vocab_size ({model_vocab})"
            )
        if compute_dtype is not None and getattr(model, "compute_dtype", compute_dtype) != compute_dtype:
            model = model.with_dtype_policy(compute_dtype)
        self._settings = {
            "max_length": max_length, "extra_decode_length": extra_decode_length, "beam_size": beam_size,
            "length_penalty": length_penalty, "jit_compile": jit_compile, "source_bucket_width": source_bucket_width,
            "early_stopping": early_stopping, "xla_max_rows": xla_max_rows, "compute_dtype": compute_dtype,
            "cache_output_matrix": cache_output_matrix, "sampling_topk": sampling_topk,
            "sampling_topp": sampling_topp, "sampling_temperature": sampling_temperature,
            "no_repeat_ngram_size": no_repeat_ngram_size, "repetition_penalty": repetition_penalty,
            "placeholders": placeholders,
        }
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.extra_decode_length = extra_decode_length
        self.beam_size = beam_size
        self.length_penalty = float(length_penalty)
        self.jit_compile = bool(jit_compile)
        self.source_bucket_width = source_bucket_width
        self.early_stopping = bool(early_stopping)
        self.xla_max_rows = xla_max_rows
        self.sampling_topk, self.sampling_topp, self.sampling_temperature = sampling
        self.no_repeat_ngram_size, self.repetition_penalty = guard
        #: Whether spans are carried through: asked for, and the vocabulary has the placeholder piece.
        self.placeholders = bool(placeholders) and placeholder_spans.has_placeholder(tokenizer)
        # The [d_model, vocab] projection, copied once (tied embeddings only; see the docstring).
        self.output_matrix = None
        if cache_output_matrix and getattr(model, "tie_embeddings", False) and callable(
                getattr(model, "output_matrix", None)):
            self.output_matrix = tf.Variable(model.output_matrix(), trainable=False, name="output_matrix")
        self.bos_id = int(tokenizer.bos_id)
        self.pad_id = int(tokenizer.pad_id)
        self.eos_id = int(tokenizer.eos_id)
        # Per-id tables of the vocabulary (numpy; in-graph constants when traced).
        self._unknown_pieces, self._word_pieces = text.piece_tables(tokenizer)
        # Inner numeric functions: ids in, ids out; graph mode, and XLA when asked. No autograph
        # anywhere here: the searches are written with tf.while_loop/tf.cond, and converting the
        # Keras layers' Python took 40% of an export's time (tiny model: 28 s -> 17 s without).
        core = functools.partial(tf.function, reduce_retracing=True, autograph=False)
        self._beam_core = core(functools.partial(self._beam_search_ids, xla=False))
        self._greedy_core = core(functools.partial(self._greedy_search_ids, xla=False))
        self._sample_core = core(functools.partial(self._sample_search_ids, xla=False))
        self._beam_core_xla = self._greedy_core_xla = self._sample_core_xla = None
        if self.jit_compile:
            self._sample_core_xla = core(functools.partial(self._sample_search_ids, xla=True), jit_compile=True)
            self._beam_core_xla = core(functools.partial(self._beam_search_ids, xla=True), jit_compile=True)
            self._greedy_core_xla = core(functools.partial(self._greedy_search_ids, xla=True), jit_compile=True)

    def get_config(self) -> dict[str, Any]:
        """The decoding settings (JSON-serializable), recorded by the export."""
        return {
            "max_length": self.max_length,
            "extra_decode_length": self.extra_decode_length,
            "beam_size": self.beam_size,
            "length_penalty": self.length_penalty,
            "jit_compile": self.jit_compile,
            "source_bucket_width": self.source_bucket_width,
            "early_stopping": self.early_stopping,
            "xla_max_rows": self.xla_max_rows,
            "cache_output_matrix": self.output_matrix is not None,
            "sampling_topk": self.sampling_topk,
            "sampling_topp": self.sampling_topp,
            "sampling_temperature": self.sampling_temperature,
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
            "repetition_penalty": self.repetition_penalty,
            "placeholders": self.placeholders,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            # Recorded so an export tells whether it has the rule (exports made before it lack the key).
            "unknown_input": "copied when no known word; the output limit counts known pieces",
        }

    def with_settings(self, **changes: Any) -> "Translator":
        """A new Translator on the same model and tokenizer with some constructor arguments changed.

        Example: ``translator.with_settings(cache_output_matrix=True)``, which
        :func:`keras_transformer.export.export_saved_model` uses. (A
        ``tf.function`` keeps what it traced, so a setting is changed by a
        new Translator, not on this one.)

        Raises:
            ValueError: for an unknown argument name, or as the constructor does.
        """
        unknown = sorted(set(changes) - set(self._settings))
        if unknown:
            raise ValueError(f"Translator.with_settings: unknown argument(s) {unknown}; known: {sorted(self._settings)}")
        return Translator(self.model, self.tokenizer, **dict(self._settings, **changes))

    # -- numeric core (inside XLA when jit_compile) ------------------------------------
    def _cached_output_matrix(self):
        """The ``cache_output_matrix`` copy as a tensor, or None."""
        return None if self.output_matrix is None else tf.convert_to_tensor(self.output_matrix)

    def _output_matrix(self):
        """The cached ``[d_model, vocab]`` copy, else ``model.output_matrix()`` (a ``Transformer``), else None."""
        if self.output_matrix is not None:
            return self._cached_output_matrix()
        output_matrix = getattr(self.model, "output_matrix", None)
        return output_matrix() if callable(output_matrix) else None

    def _start(self, source_ids, max_decode_lengths, xla):
        """:func:`keras_transformer.decoding.model_calls.start` with this translator's settings.

        With a repetition guard the cache also holds what each row has written
        (:func:`~keras_transformer.decoding.search.logits.init_repetition_history`).
        """
        initial_ids, cache, max_decode_lengths = model_calls.start(
            self.model, source_ids, max_decode_lengths, xla, self.max_length, self.extra_decode_length, self.bos_id
        )
        if self.no_repeat_ngram_size or self.repetition_penalty != 1.0:
            cache = init_repetition_history(cache, tf.shape(initial_ids)[0], self.max_length)
        return initial_ids, cache, max_decode_lengths

    def _guarded(self, symbols_to_logits_fn):
        """``symbols_to_logits_fn`` with this translator's repetition guard (the same function when it is off)."""
        return guard_repetition(symbols_to_logits_fn, self.no_repeat_ngram_size, self.repetition_penalty)

    def _bucket(self, source_ids):
        """Pads ``source_ids`` on the right to a multiple of ``source_bucket_width`` (for XLA).

        :func:`keras_transformer.decoding.model_calls.bucket_source` with this
        translator's settings: the compiles per batch size are bounded by
        ``ceil(max_length / source_bucket_width)``.
        """
        return model_calls.bucket_source(source_ids, self.source_bucket_width, self.max_length)

    def _beam_search_ids(self, source_ids, max_decode_lengths, xla=False, output_matrix=None):
        with model_calls.weights_read_once(self.model):
            return self._beam_search_loop(source_ids, max_decode_lengths, xla, output_matrix)

    def _greedy_search_ids(self, source_ids, max_decode_lengths, xla=False, output_matrix=None):
        with model_calls.weights_read_once(self.model):
            return self._greedy_search_loop(source_ids, max_decode_lengths, xla, output_matrix)

    def _sample_search_ids(self, source_ids, max_decode_lengths, seed, xla=False):
        with model_calls.weights_read_once(self.model):
            initial_ids, cache, max_decode_lengths = self._start(source_ids, max_decode_lengths, xla)
            model_logits = self._guarded(model_calls.symbols_to_logits_fn(self.model, self._cached_output_matrix()))

            def symbols_to_logits(step_ids, step, cache):
                logits, cache = model_logits(step_ids, step, cache)
                # Pad and BOS are never output tokens: -inf before sampling.
                ids = tf.range(tf.shape(logits)[-1])
                banned = tf.logical_or(tf.equal(ids, self.pad_id), tf.equal(ids, self.bos_id))
                return tf.where(banned, tf.constant(-float("inf"), logits.dtype), logits), cache

            return sample_search(
                symbols_to_logits,
                initial_ids,
                cache,
                max_length=self.max_length,
                eos_id=self.eos_id,
                seed=seed,
                max_decode_lengths=max_decode_lengths,
                top_k=self.sampling_topk,
                top_p=self.sampling_topp,
                temperature=self.sampling_temperature,
                drop_finished=not xla,
            )

    def _beam_search_loop(self, source_ids, max_decode_lengths, xla, output_matrix):
        initial_ids, cache, max_decode_lengths = self._start(source_ids, max_decode_lengths, xla)
        return beam_search(
            self._guarded(model_calls.symbols_to_logits_fn(
                self.model, self._output_matrix() if output_matrix is None else output_matrix
            )),
            initial_ids,
            cache,
            beam_size=self.beam_size,
            length_penalty=self.length_penalty,
            max_length=self.max_length,
            eos_id=self.eos_id,
            max_decode_lengths=max_decode_lengths,
            drop_finished=not xla,
            early_stopping=self.early_stopping,
        )

    def _greedy_search_loop(self, source_ids, max_decode_lengths, xla, output_matrix):
        initial_ids, cache, max_decode_lengths = self._start(source_ids, max_decode_lengths, xla)
        # Without a cached [d_model, vocab] copy, greedy search keeps the
        # model's transpose_b logits product: a copy made at every call
        # (8 MB for the small preset) costs more than single rows gain.
        if output_matrix is None:
            output_matrix = self._cached_output_matrix()
        return greedy_search(
            self._guarded(model_calls.symbols_to_logits_fn(self.model, output_matrix)),
            initial_ids,
            cache,
            max_length=self.max_length,
            eos_id=self.eos_id,
            max_decode_lengths=max_decode_lengths,
            drop_finished=not xla,
        )

    def _search(self, greedy, source_ids, max_decode_lengths, seed=None):
        """Greedy, sampled (``seed`` given) or beam ids of a batch: XLA for up to ``xla_max_rows`` decoding rows, else graph mode."""
        if seed is not None:
            graph, xla, extra, rows_per_sentence = self._sample_core, self._sample_core_xla, (seed,), 1
        elif greedy:
            graph, xla, extra, rows_per_sentence = self._greedy_core, self._greedy_core_xla, (), 1
        else:
            graph, xla, extra, rows_per_sentence = self._beam_core, self._beam_core_xla, (), self.beam_size
        if not self.jit_compile:
            return graph(source_ids, max_decode_lengths, *extra)

        def run_xla():
            return xla(self._bucket(source_ids), max_decode_lengths, *extra)

        if self.xla_max_rows is None:
            return run_xla()
        rows = tf.shape(source_ids)[0] * rows_per_sentence
        return tf.cond(rows <= self.xla_max_rows, run_xla, lambda: graph(source_ids, max_decode_lengths, *extra))

    # -- text (plain TF + tensorflow-text ops; decoding/text.py) ------------------------
    def source_ids(self, sentences: tf.Tensor) -> dict[str, tf.Tensor]:
        """Tokenizes a batch ``[B]`` ``tf.string`` into model inputs, with this translator's settings.

        Returns :func:`keras_transformer.decoding.text.source_ids`' dict:
        ``source_ids`` int32 [B, S], ``max_decode_lengths`` int32 [B] and the
        bool [B] flags ``truncated``, ``empty`` and ``copied``. With
        :attr:`placeholders`, the spans are masked first.
        """
        if self.placeholders:
            sentences, _ = placeholder_spans.mask(text.valid_utf8(sentences))
        return text.source_ids(
            sentences, self.tokenizer, self.max_length, self.extra_decode_length, self.eos_id,
            self._unknown_pieces, self._word_pieces,
        )

    def target_ids(self, targets: tf.Tensor) -> dict[str, tf.Tensor]:
        """Tokenizes a batch ``[B]`` ``tf.string`` of targets for teacher forcing (the training contract).

        Returns :func:`keras_transformer.decoding.text.target_ids`' dict:
        ``target_in_ids`` and ``target_out_ids`` int32 [B, T], ``num_tokens``
        int32 [B] (pieces + EOS) and ``truncated`` bool [B].
        """
        return text.target_ids(targets, self.tokenizer, self.max_length, self.bos_id, self.eos_id)

    def _search_batch(self, sentences: tf.Tensor, greedy: bool, seed=None) -> dict[str, tf.Tensor]:
        """Tokenization + search of a batch; empty and copied sentences get all-0 ids (and scores 0).

        ``seed`` (with ``greedy``): sampling search instead of greedy search.

        Returns:
            :meth:`source_ids`' dict plus ``output_ids`` (int32 [B, L] greedy
            or sampled, [B, beam_size, L] beam) and, for beam search,
            ``scores`` float32 [B, beam_size].
        """
        inputs = self.source_ids(sentences)
        skipped = inputs["empty"] | inputs["copied"]
        if greedy:
            ids = self._search(True, inputs["source_ids"], inputs["max_decode_lengths"], seed=seed)
            return dict(inputs, output_ids=tf.where(skipped[:, None], tf.zeros_like(ids), ids))
        ids, scores = self._search(False, inputs["source_ids"], inputs["max_decode_lengths"])
        ids = tf.where(skipped[:, None, None], tf.zeros_like(ids), ids)
        scores = tf.where(skipped[:, None], tf.zeros_like(scores), scores)
        return dict(inputs, output_ids=ids, scores=scores)

    def _texts(self, sentences: tf.Tensor, ids: tf.Tensor, copied: tf.Tensor) -> tf.Tensor:
        """Detokenized ``ids`` [B, L] as valid UTF-8, spans restored; copied sentences are their folded input."""
        return self._restore(sentences, text.output_texts(self.tokenizer, sentences, ids, copied), copied)

    def _restore(self, sentences: tf.Tensor, texts: tf.Tensor, copied: tf.Tensor) -> tf.Tensor:
        """``texts`` ``[B]`` or ``[B, beam]`` with each sentence's spans back in its placeholders (copied rows kept)."""
        if not self.placeholders:
            return texts
        _, spans = placeholder_spans.mask(text.valid_utf8(sentences))
        if texts.shape.rank == 2:  # n-best: every hypothesis of a sentence gets its spans
            width = tf.shape(texts)[1]
            rows = tf.repeat(tf.range(tf.shape(texts)[0]), width)
            restored = placeholder_spans.restore(tf.reshape(texts, [-1]), tf.gather(spans, rows))
            restored = tf.reshape(restored, tf.shape(texts))
            restored.set_shape(texts.shape)
            return tf.where(copied[:, None], texts, restored)
        return tf.where(copied, texts, placeholder_spans.restore(texts, spans))

    def _one_per_sentence(self, sentences: tf.Tensor, seed=None) -> dict[str, tf.Tensor]:
        """:meth:`translate_greedy`'s dict, of greedy search or (``seed`` given) of sampling search."""
        out = self._search_batch(sentences, greedy=True, seed=seed)
        return {
            "translations": self._texts(sentences, out["output_ids"], out["copied"]),
            "output_ids": out["output_ids"],
            "truncated": out["truncated"],
        }

    # -- public tf.functions (exported signatures) --------------------------------------
    @tf.function(input_signature=_STRINGS, autograph=False)
    def translate(self, sentences):
        """Beam search translation (Section 6.1).

        Args:
            sentences: ``[B]`` ``tf.string``.

        Returns:
            dict: ``translations`` [B] tf.string (best hypothesis; ``""``
            for empty input, the input itself for copied input),
            ``scores`` [B] float32 (its ``log P / lp``; 0 for empty and
            copied input), ``truncated`` [B] bool (source cut to
            ``max_length - 1`` pieces).
        """
        out = self._search_batch(sentences, greedy=False)
        return {
            "translations": self._texts(sentences, out["output_ids"][:, 0, :], out["copied"]),
            "scores": out["scores"][:, 0],
            "truncated": out["truncated"],
        }

    @tf.function(input_signature=_STRINGS, autograph=False)
    def translate_greedy(self, sentences):
        """Greedy translation (beam size 1 without a finished set).

        Args:
            sentences: ``[B]`` ``tf.string``.

        Returns:
            dict: ``translations`` [B] tf.string, ``output_ids`` int32
            [B, max_length] (EOS kept, 0 after; all 0 for empty and copied
            input), ``truncated`` [B] bool.
        """
        return self._one_per_sentence(sentences)

    @tf.function(input_signature=_STRINGS_AND_SEED, autograph=False)
    def translate_sampled(self, sentences, seed):
        """Sampled translation, e.g. for back-translation (settings fixed at construction).

        Samples with :func:`~keras_transformer.decoding.search.sample_search`
        (``sampling_topk``, ``sampling_topp``, ``sampling_temperature``; pad
        and BOS never sampled). The same ``seed`` gives the same
        translations (graph mode and XLA alike, up to float rounding), and a
        sentence's translation depends on the seed, its row in the batch and
        its own source only, not on the other sentences of the batch.

        Args:
            sentences: ``[B]`` ``tf.string``.
            seed: int64 scalar (the stateless seed ``[seed, 0]``).

        Returns:
            dict: ``translations`` [B] tf.string (``""`` for empty input,
            the input itself for copied input, as :meth:`translate`),
            ``output_ids`` int32 [B, max_length] (EOS kept, 0 after; all 0
            for empty and copied input), ``truncated`` [B] bool.
        """
        return self._one_per_sentence(sentences, seed=seed)

    @tf.function(input_signature=_STRINGS, autograph=False)
    def translate_ids(self, sentences):
        """Beam search returning token ids of every beam (n-best lists).

        Args:
            sentences: ``[B]`` ``tf.string``.

        Returns:
            dict: ``source_ids`` int32 [B, S]; ``output_ids`` int32
            [B, beam_size, max_length] best first (no BOS, EOS kept, 0 after;
            all 0 for empty and copied input); ``scores`` float32
            [B, beam_size] (``-inf`` for a beam slot without any hypothesis,
            0 for empty and copied input); ``truncated`` bool [B].
        """
        out = self._search_batch(sentences, greedy=False)
        return {
            "source_ids": out["source_ids"],
            "output_ids": out["output_ids"],
            "scores": out["scores"],
            "truncated": out["truncated"],
        }

    @tf.function(input_signature=_STRINGS, autograph=False)
    def translate_n_best(self, sentences):
        """Beam search returning the text and score of every beam: n-best lists (Section 6.1).

        Args:
            sentences: ``[B]`` ``tf.string``.

        Returns:
            dict: ``translations`` [B, beam_size] tf.string, best first
            (column 0 is :meth:`translate`'s translation); ``scores`` float32
            [B, beam_size], ``log P / lp`` in decreasing order, ``-inf`` for a
            slot without a hypothesis (its text is ``""``); an empty or
            whitespace-only input has the single hypothesis ``""`` with score
            0 (other slots ``-inf``), a copied input (unknown pieces, no
            known word; :mod:`keras_transformer.decoding.text`) the single
            hypothesis of its whitespace-folded text with score 0;
            ``truncated`` [B] bool (source cut to ``max_length - 1`` pieces).

        The hypotheses of a sentence are distinct token sequences; two of them
        can still detokenize to the same text (two segmentations of one
        string).
        """
        out = self._search_batch(sentences, greedy=False)
        ids, scores = out["output_ids"], out["scores"]
        first_only = tf.concat([[0.0], tf.fill([self.beam_size - 1], -float("inf"))], axis=0)
        skipped = out["empty"] | out["copied"]
        scores = tf.where(skipped[:, None], first_only[None, :], scores)
        return {
            "translations": self._restore(
                sentences, text.n_best_texts(self.tokenizer, sentences, ids, out["copied"], self.beam_size),
                out["copied"]),
            "scores": scores,
            "truncated": out["truncated"],
        }

    @tf.function(input_signature=_PAIRS, autograph=False)
    def score(self, sentences, targets):
        """Log-probabilities of given translations: forced decoding (teacher forcing, Section 3.1).

        For filtering parallel data and reranking: the score is on the scale
        of beam search's (``log P / lp``, Wu et al. 2016, Eq. 14, with this
        translator's ``length_penalty``), so a beam hypothesis scores what
        :meth:`translate_ids` reported for it (up to float rounding).

        Args:
            sentences: ``[B]`` ``tf.string`` sources.
            targets: ``[B]`` ``tf.string``, ``targets[i]`` a translation of
                ``sentences[i]``.

        Returns:
            dict: ``log_prob`` [B] float32 (natural log, the sum of
            ``token_log_probs``: every target piece and EOS); ``score`` [B]
            float32 (``log_prob / ((5 + num_tokens) / 6) ** length_penalty``);
            ``num_tokens`` [B] int32 (target pieces + EOS); ``token_log_probs``
            [B, T] float32 (per target token, 0 after EOS); ``target_ids``
            [B, T] int32 (pieces + EOS, 0-padded); ``target_pieces`` [B, T]
            tf.string (the pieces, EOS's included, ``""`` on padding);
            ``truncated`` [B] bool (source or target longer than
            ``max_length - 1`` pieces, scored from its first ``max_length -
            1``). Empty sources and targets: see the module docstring.

        Raises:
            tf.errors.InvalidArgumentError: when ``sentences`` and ``targets``
                have different lengths.
        """
        tf.debugging.assert_equal(
            tf.size(sentences), tf.size(targets),
            message="score: sentences and targets must have the same number of entries",
        )
        if self.placeholders:  # as in training: a pair is masked when both sides hold the same spans
            sentences, targets = placeholder_spans.mask_pair(text.valid_utf8(sentences), text.valid_utf8(targets))
        source = text.source_ids(sentences, self.tokenizer, self.max_length, self.extra_decode_length, self.eos_id,
                                 self._unknown_pieces, self._word_pieces)
        target = self.target_ids(targets)
        target_out = target["target_out_ids"]
        token_log_probs = model_calls.teacher_forced_log_probs(
            self.model, source["source_ids"], target["target_in_ids"], target_out
        )
        log_prob = tf.reduce_sum(token_log_probs, axis=1)
        num_tokens = target["num_tokens"]
        pieces = self.tokenizer.id_to_piece(target_out)
        return {
            "log_prob": log_prob,
            "score": log_prob / length_penalty_factor(num_tokens, self.length_penalty),
            "num_tokens": num_tokens,
            "token_log_probs": token_log_probs,
            "target_ids": target_out,
            "target_pieces": tf.where(tf.not_equal(target_out, 0), pieces, tf.zeros_like(pieces)),
            "truncated": tf.logical_or(source["truncated"], target["truncated"]),
        }

    # -- Python convenience ------------------------------------------------------------
    def __call__(self, sentences: Any, greedy: bool = False, seed: int | None = None) -> list[str]:
        """Translates Python strings (list or one str) and returns Python strings.

        Beam search by default; ``greedy=True`` greedy search; an int ``seed``
        samples (:meth:`translate_sampled`).

        Raises:
            ValueError: if ``sentences`` is not a str or a list/tuple of str,
                or ``seed`` is not an int.
        """
        single = isinstance(sentences, str)
        batch = [sentences] if single else sentences
        if not isinstance(batch, (list, tuple)) or not all(isinstance(s, str) for s in batch):
            raise ValueError("Translator expects a str or a list of str")
        strings = tf.constant(list(batch), tf.string)
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise ValueError(f"seed must be an int, got {seed!r}")
            out = self.translate_sampled(strings, tf.constant(seed, tf.int64))["translations"].numpy()
        else:
            fn = self.translate_greedy if greedy else self.translate
            out = fn(strings)["translations"].numpy()
        texts = [t.decode("utf-8") for t in out]
        return texts[0] if single else texts
