"""The Transformer encoder-decoder (Vaswani et al., 2017, Section 3).

:class:`Encoder` and :class:`Decoder` are stacks of N layers over already
embedded inputs (one base class, ``_Stack``, holds what they share);
:class:`Transformer` adds the embeddings (Sections 3.4-3.5),
the pre-softmax projection (tied to the embeddings by default) and
incremental decoding with a static-shape key/value cache.

Cache layout (:meth:`Transformer.init_cache`), heads first so that a decoding
step attends with plain batched matrix products::

    {
        "source_mask": bool [B, S],                            # source ids != 0
        "source_bias": float32 [B, 1, 1, S],                   # 0 or -1e9: the mask as a score bias
        "layer_0": {
            # a growing cache (init_cache without max_length; graph mode):
            "prefix_key":   [B, num_heads, t, depth],          # the t positions decoded so far
            "prefix_value": [B, num_heads, t, depth],
            # or a fixed buffer (init_cache(max_length=L); XLA, static shapes):
            "self_key":     [B, num_heads, L, depth],          # zeros, written at `step`
            "self_value":   [B, num_heads, L, depth],
            # always:
            "cross_key":    [B, num_heads, S, depth],          # projected once
            "cross_value":  [B, num_heads, S, depth],
        },
        "layer_1": {...}, ...
    }

A growing cache costs ``O(t)`` per step (attention and beam reordering touch
only the decoded prefix) but changes shape every step, so it needs a
``tf.while_loop`` with shape invariants, which XLA does not compile; the fixed
buffer has static shapes for XLA. Every leaf has the batch as its leading
dimension (beam search can tile or gather it with ``tf.nest.map_structure``);
float leaves have the model's compute dtype.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.layers.attention import mask_to_bias
from keras_transformer.layers.decoder_layer import DecoderLayer
from keras_transformer.layers.encoder_layer import EncoderLayer
from keras_transformer.layers.positional_embedding import PositionalEmbedding
from keras_transformer.layers.residual import layer_norm_rows
from keras_transformer.config import TransformerConfig

__all__ = ["Encoder", "Decoder", "Transformer"]


def _check_positive_int(owner, name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")


def _check_cache_length(owner, max_length):
    """A python int > 0, or a scalar integer tensor (value not checked: it may be symbolic)."""
    if tf.is_tensor(max_length):
        if max_length.shape.rank not in (None, 0) or not max_length.dtype.is_integer:
            raise ValueError(
                f"{owner}: max_length must be a positive int or a scalar integer tensor, got {max_length!r}"
            )
        return
    _check_positive_int(owner, "max_length", max_length)


def _check_common(owner, num_layers, d_model, num_heads, dff, dropout_rate, attention_dropout_rate=0.0):
    for name, value in (("num_layers", num_layers), ("d_model", d_model), ("num_heads", num_heads), ("dff", dff)):
        _check_positive_int(owner, name, value)
    if d_model % num_heads:
        raise ValueError(f"{owner}: d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    for name, value in (("dropout_rate", dropout_rate), ("attention_dropout_rate", attention_dropout_rate)):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{owner}: {name} must be in [0, 1), got {value!r}")


class _Stack(keras.layers.Layer):
    """N layers of one class over embedded inputs, and pre-LN's final LayerNorm (Section 3.1).

    The part :class:`Encoder` and :class:`Decoder` share: the argument check,
    the N layers (``_layer_class``, named ``<prefix>_<i>``) in the list
    attribute ``_layers_attribute`` (``encoder_layers`` / ``decoder_layers``:
    attribute names are the paths of the weights in saved files), the
    ``final_norm`` (None with post-LN), ``build``, ``compute_output_shape``
    and ``get_config``. Arguments: see the subclasses.

    Raises:
        ValueError: for invalid sizes or rates (the message names the subclass).
    """

    _layer_class: type = None
    _layers_attribute: str = None
    #: The ``__init__`` arguments, in ``get_config``'s order.
    _config_fields = (
        "num_layers",
        "d_model",
        "num_heads",
        "dff",
        "dropout_rate",
        "norm_first",
        "layer_norm_epsilon",
        "attention_dropout_rate",
    )

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        dff: int,
        dropout_rate: float = 0.1,
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        attention_dropout_rate: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = type(self).__name__
        _check_common(owner, num_layers, d_model, num_heads, dff, dropout_rate, attention_dropout_rate)
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.depth = d_model // num_heads
        self.dropout_rate = dropout_rate
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.attention_dropout_rate = attention_dropout_rate
        self.supports_masking = True
        prefix = self._layers_attribute[: -len("s")]
        layers = [
            self._layer_class(
                d_model,
                num_heads,
                dff,
                dropout_rate=dropout_rate,
                norm_first=norm_first,
                attention_dropout_rate=attention_dropout_rate,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=self.dtype_policy,
                name=f"{prefix}_{i}",
            )
            for i in range(num_layers)
        ]
        setattr(self, self._layers_attribute, layers)
        self.final_norm = (
            keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="final_norm")
            if norm_first
            else None
        )

    def _stack(self):
        """The N layers, first to last."""
        return getattr(self, self._layers_attribute)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def build(self, input_shape):
        shape = (None, None, self.d_model)
        for layer in self._stack():
            layer.build(shape)
        if self.final_norm is not None:
            self.final_norm.build(shape)
        self.built = True

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self._config_fields})
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(_Stack):
    """Stack of N :class:`EncoderLayer` (Section 3.1), over embedded inputs.

    With ``norm_first`` (pre-LN) a final LayerNorm normalizes the output.
    Self-attention only mixes positions, so without positional encodings the
    stack is permutation-equivariant.

    Args:
        num_layers: int, N, the number of encoder layers.
        d_model: int, model width (of the embedded source and every layer).
        num_heads: int, heads of each layer's self-attention.
        dff: int, feed-forward inner width (Eq. 2).
        dropout_rate: float, residual dropout P_drop of the two sub-layers
            of each layer (Section 5.4).
        norm_first: bool, pre-LN layers plus a final LayerNorm of the
            encoder output.
        layer_norm_epsilon: float, epsilon of every LayerNorm.
        attention_dropout_rate: float, dropout on the self-attention weights
            (not in the paper; default 0).
        **kwargs: base layer arguments (``name``, ``dtype``).

    Call arguments:
        inputs: float tensor ``[batch, S, d_model]`` (embedded source).
        mask: optional bool ``[batch, S]``, source padding mask (True = real
            token); filled from the Keras mask of ``inputs`` when omitted.
        training: bool.

    Returns:
        Tensor ``[batch, S, d_model]`` of the compute dtype (mask propagated).

    Raises:
        ValueError: for invalid sizes or rates.

    Example:

    >>> encoder = Encoder(num_layers=2, d_model=16, num_heads=2, dff=32)
    >>> encoder(np.zeros((2, 5, 16), "float32")).shape
    TensorShape([2, 5, 16])
    """

    _layer_class = EncoderLayer
    _layers_attribute = "encoder_layers"

    def call(self, inputs, mask=None, training=None):
        x = inputs
        for layer in self.encoder_layers:
            x = layer(x, mask=mask, training=training)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(_Stack):
    """Stack of N :class:`DecoderLayer` (Section 3.1), over embedded inputs.

    With ``norm_first`` (pre-LN) a final LayerNorm normalizes the output.

    Args:
        num_layers: int, N, decoder layers.
        d_model: int, model width (of the embedded target, the encoder output
            and every layer).
        num_heads: int, heads of each layer's masked self-attention and
            cross-attention.
        dff: int, inner width of each layer's feed-forward network.
        dropout_rate: float, P_drop, dropout on the output of each of the
            three sub-layers before its residual add.
        norm_first: bool, pre-LN: LayerNorm at each sub-layer's input, and a
            final one on the decoder output.
        layer_norm_epsilon: float, LayerNorm epsilon.
        attention_dropout_rate: float, dropout on the self- and
            cross-attention weights (none in the paper; default 0).
        **kwargs: base layer arguments.

    Call arguments:
        inputs: float tensor ``[batch, T, d_model]`` (embedded, shifted
            target); ``T = 1`` with a cache, or ``[batch, d_model]`` (one
            position per row, as :meth:`Transformer.decode_step` passes it).
        encoder_outputs: float tensor ``[batch, S, d_model]`` (None with a
            cache).
        padding_mask: optional bool ``[batch, T]`` target padding mask.
        encoder_padding_mask: optional bool ``[batch, S]`` source padding mask.
        cache: optional dict ``{"layer_i": {...}}`` from :meth:`init_cache`
            (a growing cache, or a fixed buffer written at ``cache_index``).
        cache_index: scalar int, position of the input token; required with
            a fixed-buffer cache, unused with a growing one.
        training: bool.

    Returns:
        ``outputs`` shaped like ``inputs``, of the compute dtype; with
        ``cache`` the tuple ``(outputs, new_cache)``.

    Raises:
        ValueError: for invalid sizes or rates, or a fixed-buffer cache
            without ``cache_index``.

    Example:

    >>> decoder = Decoder(num_layers=2, d_model=16, num_heads=2, dff=32)
    >>> decoder(np.zeros((2, 4, 16), "float32"), np.zeros((2, 6, 16), "float32")).shape
    TensorShape([2, 4, 16])
    """

    _layer_class = DecoderLayer
    _layers_attribute = "decoder_layers"

    def init_cache(self, encoder_outputs, max_length=None):
        """Per-layer key/value caches for incremental decoding (Section 3.2.3).

        Args:
            encoder_outputs: float tensor ``[batch, S, d_model]``.
            max_length: None for a growing cache (no position yet), or the
                number of decoding positions of a fixed buffer: a python int
                or a scalar int32 tensor (see :meth:`Transformer.init_cache`).

        Returns:
            dict ``{"layer_i": {...}}`` of the compute dtype, heads first:
            ``"prefix_key"``/``"prefix_value"`` ``[batch, num_heads, 0,
            depth]`` (growing) or ``"self_key"``/``"self_value"`` zeros
            ``[batch, num_heads, max_length, depth]`` (fixed), and
            ``"cross_key"``/``"cross_value"`` ``[batch, num_heads, S, depth]``.

        Raises:
            ValueError: if ``max_length`` is neither None, a positive python
                int nor a scalar integer tensor.
        """
        if max_length is not None:
            _check_cache_length("Decoder.init_cache", max_length)
        if not self.built:
            self.build(encoder_outputs.shape)
        encoder_outputs = ops.cast(encoder_outputs, self.compute_dtype)
        batch = ops.shape(encoder_outputs)[0]
        cache = {}
        for i, layer in enumerate(self.decoder_layers):
            cross = layer.cross_attention.compute_key_value(encoder_outputs)
            length = 0 if max_length is None else max_length
            zeros = ops.zeros((batch, self.num_heads, length, self.depth), dtype=self.compute_dtype)
            names = ("prefix_key", "prefix_value") if max_length is None else ("self_key", "self_value")
            cache[f"layer_{i}"] = {
                names[0]: zeros,
                names[1]: zeros,
                "cross_key": cross["key"],
                "cross_value": cross["value"],
            }
        return cache

    def call(self, inputs, encoder_outputs=None, padding_mask=None, encoder_padding_mask=None, cache=None,
             cache_index=None, training=None, encoder_attention_bias=None):
        x = inputs
        new_cache = {} if cache is not None else None
        for i, layer in enumerate(self.decoder_layers):
            if cache is None:
                x = layer(
                    x,
                    encoder_outputs,
                    padding_mask=padding_mask,
                    encoder_padding_mask=encoder_padding_mask,
                    training=training,
                )
                continue
            layer_cache = cache[f"layer_{i}"]
            growing = "prefix_key" in layer_cache
            names = ("prefix_key", "prefix_value") if growing else ("self_key", "self_value")
            if not growing and cache_index is None:
                raise ValueError("Decoder: a fixed-buffer cache needs cache_index (the position of the input token)")
            x, self_cache = layer(
                x,
                encoder_padding_mask=encoder_padding_mask,
                encoder_attention_bias=encoder_attention_bias,
                self_attention_cache={"key": layer_cache[names[0]], "value": layer_cache[names[1]]},
                cache_index=None if growing else cache_index,
                cross_attention_cache={"key": layer_cache["cross_key"], "value": layer_cache["cross_value"]},
                training=training,
            )
            new_cache[f"layer_{i}"] = {
                names[0]: self_cache["key"],
                names[1]: self_cache["value"],
                "cross_key": layer_cache["cross_key"],
                "cross_value": layer_cache["cross_value"],
            }
        if self.final_norm is not None:
            x = layer_norm_rows(self.final_norm, x) if len(x.shape) == 2 else self.final_norm(x)
        return x if cache is None else (x, new_cache)

@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The Transformer for machine translation, Section 3 (Figure 1).

    ``source_ids -> PositionalEmbedding -> Encoder``;
    ``target_in_ids -> PositionalEmbedding -> Decoder(encoder_outputs) ->
    pre-softmax projection -> logits``. With ``tie_embeddings`` (default,
    Section 3.4) the source embedding, the target embedding and the
    pre-softmax projection share one ``[vocab_size, d_model]`` matrix (no
    output bias, as in the paper); otherwise there are two embeddings and a
    ``Dense(vocab_size, use_bias=False)`` projection. Logits are float32 even
    under a mixed-precision policy. The padding masks ``ids != 0`` are built
    from the ids and propagate as Keras masks inside the model; the logits
    carry no Keras mask: masking padded targets is the loss's job (e.g.
    ``SparseCategoricalCrossentropy(ignore_class=0)`` or the project's
    label-smoothed loss), since a Keras mask on ``y_pred`` would be applied
    again by ``keras.losses.Loss`` as sample weights, breaking losses that
    already normalize by the token count.

    Trains with ``model.fit`` on ``((source_ids, target_in_ids),
    target_out_ids)``. Parameters (tied, vocab 37,000): base 63,082,496, big
    214,245,376.

    Args:
        vocab_size: int, shared vocabulary size (0 = padding).
        num_layers: int, N of the encoder and of the decoder.
        d_model: int, model width.
        num_heads: int, attention heads (divides ``d_model``).
        dff: int, feed-forward inner width.
        dropout_rate: float, P_drop (Section 5.4).
        max_length: int, longest sequence; size of the learned position
            table (sinusoids work for any length).
        tie_embeddings: bool, three-way weight tying (Section 3.4).
        norm_first: bool, pre-LN layers with final LayerNorms.
        learned_positions: bool, learned positions (Table 3, row E).
        attention_dropout_rate: float, dropout on the attention weights of
            every encoder and decoder layer (not in the paper; default 0).
        **kwargs: ``keras.Model`` arguments (``name``, ``dtype``).

    Call arguments:
        inputs: tuple ``(source_ids [batch, S] int32, target_in_ids [batch,
            T] int32)``, 0-padded on the right.
        training: bool.

    Returns:
        float32 logits ``[batch, T, vocab_size]``.

    Raises:
        ValueError: for invalid hyper-parameters.

    Example:

    >>> model = Transformer(vocab_size=64, num_layers=2, d_model=32, num_heads=2,
    ...                     dff=64, dropout_rate=0.0, max_length=32)
    >>> model((np.array([[5, 6, 3]]), np.array([[2, 7]]))).shape
    TensorShape([1, 2, 64])
    """

    def __init__(
        self,
        vocab_size: int,
        num_layers: int = 6,
        d_model: int = 512,
        num_heads: int = 8,
        dff: int = 2048,
        dropout_rate: float = 0.1,
        max_length: int = TransformerConfig.max_length,
        tie_embeddings: bool = True,
        norm_first: bool = False,
        learned_positions: bool = False,
        attention_dropout_rate: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _check_positive_int("Transformer", "vocab_size", vocab_size)
        _check_positive_int("Transformer", "max_length", max_length)
        _check_common("Transformer", num_layers, d_model, num_heads, dff, dropout_rate, attention_dropout_rate)
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.dropout_rate = dropout_rate
        self.max_length = max_length
        self.tie_embeddings = tie_embeddings
        self.norm_first = norm_first
        self.learned_positions = learned_positions
        self.attention_dropout_rate = attention_dropout_rate
        policy = self.dtype_policy

        def embedding(name):
            return PositionalEmbedding(
                vocab_size,
                d_model,
                max_length=max_length,
                learned_positions=learned_positions,
                dropout_rate=dropout_rate,
                dtype=policy,
                name=name,
            )

        if tie_embeddings:
            self.embedding = embedding("embedding")
        else:
            self.source_embedding = embedding("source_embedding")
            self.target_embedding = embedding("target_embedding")
            self.output_projection = keras.layers.Dense(
                vocab_size, use_bias=False, dtype=policy, name="output_projection"
            )
        common = dict(
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            dropout_rate=dropout_rate,
            norm_first=norm_first,
            attention_dropout_rate=attention_dropout_rate,
            dtype=policy,
        )
        self.encoder = Encoder(name="encoder", **common)
        self.decoder = Decoder(name="decoder", **common)

    # -- pieces ---------------------------------------------------------------

    def _source_embedding(self):
        return self.embedding if self.tie_embeddings else self.source_embedding

    def _target_embedding(self):
        return self.embedding if self.tie_embeddings else self.target_embedding

    def _logits(self, x):
        if self.tie_embeddings:
            logits = self.embedding.logits(x)
        else:
            logits = self.output_projection(x)
        # A fresh tensor: no Keras mask on the logits (see the class docstring).
        return tf.identity(ops.cast(logits, "float32"))

    def build(self, input_shape=None):
        if self.tie_embeddings:
            self.embedding.build((None, None))
        else:
            self.source_embedding.build((None, None))
            self.target_embedding.build((None, None))
            self.output_projection.build((None, None, self.d_model))
        self.encoder.build((None, None, self.d_model))
        self.decoder.build((None, None, self.d_model))
        self.built = True

    # -- public API -----------------------------------------------------------

    def call(self, inputs, training=None):
        source_ids, target_in_ids = inputs
        encoder_outputs = self.encode(source_ids, training=training)
        return self.decode(target_in_ids, encoder_outputs, source_ids, training=training)

    def encode(self, source_ids, training=False):
        """Encode source ids (Section 3.1).

        Args:
            source_ids: int tensor ``[batch, S]``, 0-padded.
            training: bool.

        Returns:
            encoder outputs ``[batch, S, d_model]`` of the compute dtype.

        Raises:
            ValueError: with learned positions, for a source longer than
                ``max_length``.
        """
        if not self.built:
            self.build()
        source_ids = ops.cast(source_ids, "int32")
        source_mask = ops.not_equal(source_ids, 0)
        x = self._source_embedding()(source_ids, training=training)
        return self.encoder(x, mask=source_mask, training=training)

    def decode(self, target_in_ids, encoder_outputs, source_ids, training=False):
        """Decode all target positions at once (teacher forcing, Section 3.1).

        Args:
            target_in_ids: int tensor ``[batch, T]`` (BOS + pieces, 0-padded).
            encoder_outputs: float tensor ``[batch, S, d_model]``.
            source_ids: int tensor ``[batch, S]`` (for the source padding mask).
            training: bool.

        Returns:
            float32 logits ``[batch, T, vocab_size]``.

        Raises:
            ValueError: for a target of more than ``max_length`` positions
                (learned positions only).
        """
        if not self.built:
            self.build()
        target_in_ids = ops.cast(target_in_ids, "int32")
        source_mask = ops.not_equal(ops.cast(source_ids, "int32"), 0)
        target_mask = ops.not_equal(target_in_ids, 0)
        y = self._target_embedding()(target_in_ids, training=training)
        y = self.decoder(
            y,
            encoder_outputs,
            padding_mask=target_mask,
            encoder_padding_mask=source_mask,
            training=training,
        )
        return self._logits(y)

    def attention_weights(self, source_ids, target_in_ids):
        """Encoder-decoder (cross) attention weights of every decoder layer (Section 3.2.3).

        Runs the model as :meth:`call` does at inference (``training=False``,
        teacher forcing over ``target_in_ids``) and returns, for each decoder
        layer, the weights of its multi-head attention over the encoder output.
        Does not change the model or its outputs.

        Args:
            source_ids: int tensor ``[batch, S]`` (pieces + EOS, 0-padded).
            target_in_ids: int tensor ``[batch, T]`` (BOS + pieces, 0-padded).

        Returns:
            dict ``{"layer_0": w_0, ..., "layer_{N-1}": w_{N-1}}`` of float32
            tensors ``[batch, num_heads, T, S]``: ``w[b, h, t, s]`` is the weight
            head ``h`` gives source position ``s`` when computing target
            position ``t``. Rows sum to 1 over the real source positions;
            padded source positions get exactly 0.

        Raises:
            ValueError: for a source or target of more than ``max_length``
                positions (learned positions only).
        """
        if not self.built:
            self.build()
        source_ids = ops.cast(source_ids, "int32")
        target_in_ids = ops.cast(target_in_ids, "int32")
        encoder_outputs = self.encode(source_ids, training=False)
        source_mask = ops.not_equal(source_ids, 0)
        target_mask = ops.not_equal(target_in_ids, 0)
        y = self._target_embedding()(target_in_ids, training=False)
        weights = {}
        for i, layer in enumerate(self.decoder.decoder_layers):
            y, layer_weights = layer(
                y,
                encoder_outputs,
                padding_mask=target_mask,
                encoder_padding_mask=source_mask,
                return_attention_scores=True,
                training=False,
            )
            weights[f"layer_{i}"] = ops.cast(layer_weights, "float32")
        return weights

    def init_cache(self, encoder_outputs, source_ids, max_length=None):
        """The incremental-decoding cache (layout in the module docstring).

        Args:
            encoder_outputs: float tensor ``[batch, S, d_model]`` from :meth:`encode`.
            source_ids: int tensor ``[batch, S]``.
            max_length: None (default) for a growing cache, which holds only
                the positions decoded so far (graph mode; each step costs
                ``O(step)``). Or the number of steps a fixed buffer holds
                (static shapes, for XLA): a python int, or a scalar int32
                tensor (the Translator uses ``min(max_length, S +
                extra_decode_length)``, a compile-time constant under XLA
                since it only depends on the static width ``S``); every later
                ``step`` must be below it.

        Returns:
            nested dict of tensors, every leaf with leading dim ``batch``:
            ``source_mask`` bool ``[batch, S]``, ``source_bias`` float32
            ``[batch, 1, 1, S]`` (the same mask as an additive score bias,
            which each step's cross-attention uses) and per layer
            ``prefix_key``/``prefix_value`` ``[batch, num_heads, 0, depth]``
            (growing) or ``self_key``/``self_value`` zeros ``[batch,
            num_heads, max_length, depth]`` (fixed), and
            ``cross_key``/``cross_value`` ``[batch, num_heads, S, depth]``.

        Raises:
            ValueError: if ``max_length`` is not None, a positive python int
                or a scalar integer tensor, or exceeds the learned position
                table.
        """
        if not self.built:
            self.build()
        if max_length is not None:
            _check_cache_length("Transformer.init_cache", max_length)
        if self.learned_positions and isinstance(max_length, int) and max_length > self.max_length:
            raise ValueError(
                f"Transformer.init_cache: max_length={max_length} exceeds the learned position table "
                f"(max_length={self.max_length})"
            )
        cache = self.decoder.init_cache(encoder_outputs, max_length)
        cache["source_mask"] = ops.not_equal(ops.cast(source_ids, "int32"), 0)
        # The same mask in the additive form each step's cross-attention uses (computed once).
        cache["source_bias"] = mask_to_bias(cache["source_mask"][:, None, None, :])
        return cache

    def output_matrix(self):
        """The pre-softmax projection as a ``[d_model, vocab_size]`` matrix (Section 3.4).

        The transposed (tied) embedding matrix, or the untied projection's
        kernel, in the compute dtype. A decoding loop computes it once and
        passes it to every :meth:`decode_step`: a ``[rows, d_model] x
        [d_model, vocab]`` product is 1.4-1.6x faster on a CPU than the
        ``transpose_b`` product of the embedding matrix for 4 to 32 rows
        (``scripts/bench/decode_vs_ctranslate2.py``).

        Returns:
            tensor ``[d_model, vocab_size]``.
        """
        if not self.built:
            self.build()
        if self.tie_embeddings:
            return tf.transpose(ops.cast(self.embedding.embeddings, self.compute_dtype))
        return ops.cast(self.output_projection.kernel, self.compute_dtype)

    def decode_step(self, step_ids, step, cache, output_matrix=None):
        """One incremental decoding step (Section 3.2.3).

        Args:
            step_ids: int tensor ``[batch]``, the token at position ``step``
                (BOS at step 0).
            step: scalar int32 (python int or tensor), 0-based position.
            cache: the dict from :meth:`init_cache` / the previous step.
            output_matrix: optional :meth:`output_matrix`, computed once
                before the loop; the logits are then ``hidden @
                output_matrix`` (the same values).

        Returns:
            ``(logits, new_cache)``: float32 logits ``[batch, vocab_size]`` of
            the next token (equal to :meth:`decode` at position ``step``), and
            the cache with this step's keys/values appended (growing cache)
            or written at ``step`` (fixed buffer).

        Raises:
            ValueError: if ``cache`` lacks ``source_mask`` or a layer entry.
                With a fixed buffer ``step`` must be below its length; with a
                growing cache ``step`` must equal the number of positions it
                holds (neither is checked: a tensor inside
                ``tf.while_loop``/XLA).
        """
        if "source_mask" not in cache or any(f"layer_{i}" not in cache for i in range(self.num_layers)):
            raise ValueError(
                f"Transformer.decode_step: cache must hold 'source_mask' and 'layer_0'..'layer_{self.num_layers - 1}' "
                f"(from init_cache), got keys {sorted(cache)}"
            )
        step_ids = ops.cast(step_ids, "int32")
        step = ops.cast(step, "int32")
        # One position per row: [batch, d_model] through the decoder, so every
        # projection is a plain 2-D MatMul (a [batch, 1, d_model] input costs
        # a tensordot's reshapes and shape arithmetic per projection).
        y = self._target_embedding()(ops.expand_dims(step_ids, 1), start_index=step)[:, 0, :]
        masks = ("source_mask", "source_bias")
        layer_cache = {k: v for k, v in cache.items() if k not in masks}
        bias = cache.get("source_bias")
        y, new_cache = self.decoder(
            y,
            encoder_padding_mask=cache["source_mask"] if bias is None else None,
            encoder_attention_bias=bias,
            cache=layer_cache,
            cache_index=step,
        )
        new_cache.update({k: cache[k] for k in masks if k in cache})
        if output_matrix is None:
            return self._logits(y), new_cache
        logits = tf.matmul(y, ops.cast(output_matrix, y.dtype))
        return ops.cast(logits, "float32"), new_cache

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "num_layers": self.num_layers,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dff": self.dff,
                "dropout_rate": self.dropout_rate,
                "max_length": self.max_length,
                "tie_embeddings": self.tie_embeddings,
                "norm_first": self.norm_first,
                "learned_positions": self.learned_positions,
                "attention_dropout_rate": self.attention_dropout_rate,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def with_dtype_policy(self, policy="float32") -> "Transformer":
        """A copy of this model (same weights) computing under another dtype policy.

        Mixed precision keeps float32 variables and casts them to the compute
        dtype at every call: a model trained with ``mixed_bfloat16`` and
        decoded as is casts every weight matrix at every decoding step (87
        casts per step for the ``small`` preset, 60% of a CPU sentence's
        time). The Translator decodes a float32 copy instead.

        Args:
            policy: a Keras dtype policy or its name, e.g. ``"float32"``.

        Returns:
            this model if it already has ``policy``, else a new
            :class:`Transformer` with the same configuration and weights.
        """
        policy = keras.dtype_policies.get(policy)
        if policy.name == self.dtype_policy.name:
            return self
        if not self.built:
            self.build()
        config = self.get_config()
        config["dtype"] = keras.dtype_policies.serialize(policy)
        copy = type(self).from_config(config)
        copy.build()
        copy.set_weights(self.get_weights())
        return copy
