"""Position-wise feed-forward network (Section 3.3, Eq. 2)."""

from __future__ import annotations

import keras

__all__ = ["FeedForward"]


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network, Section 3.3, Eq. 2.

    ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``: ``Dense(dff, relu)`` followed
    by ``Dense(d_model)``, applied to every position independently.

    Args:
        d_model: int, input and output width.
        dff: int, inner width.
        activation: activation of the inner layer (``"relu"`` in the paper).
        kernel_initializer: initializer of both kernels.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: float tensor ``[batch, length, d_model]``.

    Returns:
        Tensor ``[batch, length, d_model]`` of the compute dtype; the Keras
        mask of ``inputs`` is propagated.

    Raises:
        ValueError: if ``d_model`` or ``dff`` is not a positive integer.

    Example:

    >>> ffn = FeedForward(d_model=16, dff=64)
    >>> ffn(np.zeros((2, 3, 16), "float32")).shape
    TensorShape([2, 3, 16])
    """

    def __init__(self, d_model: int, dff: int, activation="relu", kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        for name, value in (("d_model", d_model), ("dff", dff)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"FeedForward: {name} must be a positive integer, got {value!r}")
        self.d_model = d_model
        self.dff = dff
        self.activation = keras.activations.get(activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        self.inner_dense = keras.layers.Dense(
            dff,
            activation=self.activation,
            kernel_initializer=keras.initializers.get(kernel_initializer),
            dtype=self.dtype_policy,
            name="inner",
        )
        self.output_dense = keras.layers.Dense(
            d_model,
            kernel_initializer=keras.initializers.get(kernel_initializer),
            dtype=self.dtype_policy,
            name="output",
        )

    def build(self, input_shape):
        self.inner_dense.build((None, None, self.d_model))
        self.output_dense.build((None, None, self.dff))
        self.built = True

    def call(self, inputs):
        return self.output_dense(self.inner_dense(inputs))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "dff": self.dff,
                "activation": keras.activations.serialize(self.activation),
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
