"""Ensembles: several trained Transformers decoded as one, their log-probabilities averaged at each step.

An ensemble of independently trained models translates better than each of
them (on Multi30k the largest measured gain: an RNN system went from 37.8
to 41.0 BLEU on test2016). :class:`Ensemble` follows the model contract of
:mod:`keras_transformer.decoding.model_calls`, so the
:class:`~keras_transformer.decoding.Translator`, every search (greedy, beam,
sampling), n-best lists, forced-decoding scores and the SavedModel export
work on it unchanged. At each step every member runs its own incremental
decoder step over its own key/value cache, and the ensemble's next-token
scores are the mean of the members' log-probabilities::

    log p_ens(y | y_<t, x) = 1/M * sum_m log p_m(y | y_<t, x)

which the searches renormalize with their log-softmax (a normalized
geometric mean of the members' distributions). Members must share one
vocabulary (the same ``spm.model``): :func:`load_ensemble` refuses others.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from keras_transformer.settings import RunError

__all__ = ["Ensemble", "load_ensemble"]


class Ensemble(tf.Module):
    """Several Transformers with one vocabulary, decoded as one model (see the module docstring).

    Args:
        members: the trained :class:`keras_transformer.Transformer` models
            (at least one), each with the same ``vocab_size``.
        name: the module name.

    Attributes:
        members: the models, in order.
        vocab_size: the shared vocabulary size.
        max_length: the smallest of the members' ``max_length``.

    Raises:
        ValueError: for no members, or members of different vocabulary sizes.

    Example:

    >>> ensemble = Ensemble([model_a, model_b])                      # doctest: +SKIP
    >>> translator = Translator(ensemble, tokenizer, max_length=128)  # doctest: +SKIP
    >>> translator.translate(tf.constant(["A dog runs."]))            # doctest: +SKIP
    """

    #: The Translator caches no output matrix of its own: each member keeps its own (below).
    tie_embeddings = False

    def __init__(self, members: Sequence[Any], name: str | None = "ensemble"):
        super().__init__(name=name)
        members = list(members)
        if not members:
            raise ValueError("Ensemble needs at least one model")
        sizes = sorted({int(m.vocab_size) for m in members})
        if len(sizes) > 1:
            raise ValueError(f"Ensemble members must share one vocabulary; their vocab_size are {sizes}")
        self.members = members
        self.vocab_size = sizes[0]
        self.max_length = min(int(m.max_length) for m in members)
        # Each tied member's [d_model, vocab] pre-softmax projection, copied once (as
        # Translator(cache_output_matrix=True) does for one model): a plain product per step.
        self.output_matrices = [
            tf.Variable(m.output_matrix(), trainable=False, name=f"output_matrix_{i}")
            if getattr(m, "tie_embeddings", False) else None
            for i, m in enumerate(members)
        ]

    @property
    def compute_dtype(self) -> str:
        """The members' compute dtype (``"mixed"`` if they differ)."""
        dtypes = {m.compute_dtype for m in self.members}
        return dtypes.pop() if len(dtypes) == 1 else "mixed"

    @property
    def variables(self) -> list:
        """Every member's variables, then the cached output matrices."""
        return [v for m in self.members for v in m.variables] + [v for v in self.output_matrices if v is not None]

    def with_dtype_policy(self, policy: Any = "float32") -> "Ensemble":
        """An ensemble of the members' copies under ``policy`` (see ``Transformer.with_dtype_policy``)."""
        copies = [m.with_dtype_policy(policy) for m in self.members]
        if all(c is m for c, m in zip(copies, self.members)):
            return self
        return Ensemble(copies, name=self.name)

    def get_config(self) -> dict[str, Any]:
        """``{"members": [each member's get_config()]}`` (recorded by the export)."""
        return {"members": [m.get_config() for m in self.members]}

    # -- the model contract of keras_transformer.decoding.model_calls ------------------------

    def encode(self, source_ids: tf.Tensor, training: bool = False) -> tuple:
        """Every member's encoder outputs: a tuple of float ``[B, S, d_model_m]`` (Section 3.1)."""
        return tuple(m.encode(source_ids, training=training) for m in self.members)

    def init_cache(self, encoder_outputs: tuple, source_ids: tf.Tensor, max_length: Any = None) -> dict:
        """``{"member_<i>": member i's cache}`` (each leaf batch-leading, as the searches need)."""
        return {f"member_{i}": m.init_cache(outputs, source_ids, max_length)
                for i, (m, outputs) in enumerate(zip(self.members, encoder_outputs))}

    def _mean(self, log_probs: list) -> tf.Tensor:
        return log_probs[0] if len(log_probs) == 1 else tf.add_n(log_probs) / float(len(log_probs))

    def decode_step(self, step_ids: tf.Tensor, step: Any, cache: dict, output_matrix: Any = None):
        """One step of every member; the mean of their log-probabilities.

        Args:
            step_ids: int ``[B]``, the token at position ``step``.
            step: scalar int32, 0-based position.
            cache: :meth:`init_cache`'s, or the previous step's.
            output_matrix: unused (each member has its own, see the class).

        Returns:
            ``(scores float32 [B, vocab], new cache)``: ``scores`` is the mean
            of the members' log-softmaxes (a single member's logits as they are).
        """
        del output_matrix
        scores, new_cache = [], {}
        for i, member in enumerate(self.members):
            matrix = self.output_matrices[i]
            key = f"member_{i}"
            if matrix is None:
                logits, new_cache[key] = member.decode_step(step_ids, step, cache[key])
            else:
                logits, new_cache[key] = member.decode_step(step_ids, step, cache[key],
                                                            output_matrix=tf.convert_to_tensor(matrix))
            logits = tf.cast(logits, tf.float32)
            scores.append(logits if len(self.members) == 1 else tf.nn.log_softmax(logits))
        return self._mean(scores), new_cache

    def decode(self, target_in_ids: tf.Tensor, encoder_outputs: tuple, source_ids: tf.Tensor,
               training: bool = False) -> tf.Tensor:
        """Teacher-forced scores of every position (forced decoding): float32 ``[B, T, vocab]``,
        the mean of the members' log-softmaxes (one member: its logits)."""
        scores = []
        for member, outputs in zip(self.members, encoder_outputs):
            logits = tf.cast(member.decode(target_in_ids, outputs, source_ids, training=training), tf.float32)
            scores.append(logits if len(self.members) == 1 else tf.nn.log_softmax(logits))
        return self._mean(scores)


def load_ensemble(paths: Sequence[str | os.PathLike]):
    """``(model, tokenizer, config)`` of several trained model folders that share one vocabulary.

    Args:
        paths: model folders (:class:`~keras_transformer.run_folder.RunFolder`);
            one folder gives its own model, not an :class:`Ensemble`.

    Returns:
        ``(Ensemble or the single model, the first folder's tokenizer, the
        first folder's config with the members' smallest max_length)``.

    Raises:
        RunError: for a folder that is not a model folder, or folders whose
            vocabularies differ (naming both and their sha256).
    """
    from keras_transformer.run_folder import RunFolder

    loaded = [RunFolder(path).load() for path in paths]
    if not loaded:
        raise RunError("an ensemble needs at least one model folder")
    first = loaded[0]
    for other in loaded[1:]:
        if other.tokenizer.vocab_sha256 != first.tokenizer.vocab_sha256:
            raise RunError(
                f"{other.folder.path} has another vocabulary than {first.folder.path} (spm.model sha256 "
                f"{other.tokenizer.vocab_sha256[:12]}... vs {first.tokenizer.vocab_sha256[:12]}...): the models of an "
                "ensemble must share one vocabulary (train them with the same spm.model)"
            )
    if len(loaded) == 1:
        return first.model, first.tokenizer, first.config
    model = Ensemble([item.model for item in loaded])
    config = first.config.replace(max_length=min(item.config.max_length for item in loaded))
    return model, first.tokenizer, config
