"""Transformer building blocks (Vaswani et al., 2017, Section 3)."""

from keras_transformer.layers.attention import (
    MASK_VALUE,
    MultiHeadAttention,
    attention_weights,
    scaled_dot_product_attention,
)
from keras_transformer.layers.decoder_layer import DecoderLayer
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.encoder_layer import EncoderLayer
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.positional_embedding import PositionalEmbedding, sinusoidal_encoding

__all__ = [
    "MASK_VALUE",
    "attention_weights",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
    "PositionalEmbedding",
    "MultiHeadAttention",
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Dropout",
]
