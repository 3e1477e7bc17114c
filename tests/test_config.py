"""Presets and validation of TransformerConfig (Table 3)."""

import pytest

from keras_transformer.config import PRESETS, TransformerConfig, get_preset


def test_table3_base_and_big():
    base, big = get_preset("base"), get_preset("big")
    assert (base.num_layers, base.d_model, base.dff, base.num_heads, base.depth) == (6, 512, 2048, 8, 64)
    assert (base.dropout_rate, base.label_smoothing, base.train_steps) == (0.1, 0.1, 100_000)
    assert (big.num_layers, big.d_model, big.dff, big.num_heads, big.depth) == (6, 1024, 4096, 16, 64)
    assert (big.dropout_rate, big.label_smoothing, big.train_steps) == (0.3, 0.1, 300_000)
    assert (base.beam_size, base.length_penalty, base.extra_decode_length) == (4, 0.6, 50)
    assert (base.checkpoint_average, big.checkpoint_average) == (5, 20)


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"d_model": 30, "num_heads": 4}, "num_heads"),
        ({"num_layers": 0}, "num_layers"),
        ({"dff": -1}, "dff"),
        ({"dropout_rate": 1.0}, "dropout_rate"),
        ({"dropout_rate": -0.1}, "dropout_rate"),
        ({"label_smoothing": 1.5}, "label_smoothing"),
        ({"vocab_size": 2.5}, "vocab_size"),
    ],
)
def test_invalid_values_name_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        TransformerConfig(**changes)


def test_unknown_preset_and_field():
    with pytest.raises(ValueError, match="known presets"):
        get_preset("huge")
    with pytest.raises(ValueError, match="d_modle"):
        get_preset("tiny", d_modle=8)


def test_model_kwargs_and_overrides():
    config = get_preset("tiny", d_model=64)
    assert config.model_kwargs()["d_model"] == 64
    assert PRESETS["tiny"].d_model == 32  # presets are not mutated
    assert set(config.model_kwargs()) >= {"vocab_size", "num_layers", "num_heads", "dff", "dropout_rate"}
