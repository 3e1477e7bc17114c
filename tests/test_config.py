"""Presets and validation of TransformerConfig (Table 3)."""

import pytest

from keras_transformer.config import MODEL_FIELDS, PRESETS, RETIRED_FIELDS, TransformerConfig, get_preset


def test_table3_base_and_big():
    base, big = get_preset("base"), get_preset("big")
    assert (base.num_layers, base.d_model, base.dff, base.num_heads, base.depth) == (6, 512, 2048, 8, 64)
    assert (base.dropout_rate, base.label_smoothing) == (0.1, 0.1)
    assert (big.num_layers, big.d_model, big.dff, big.num_heads, big.depth) == (6, 1024, 4096, 16, 64)
    assert (big.dropout_rate, big.label_smoothing) == (0.3, 0.1)
    assert (base.length_penalty, base.extra_decode_length) == (0.6, 50)
    assert (base.checkpoint_average, big.checkpoint_average) == (5, 20)
    assert base.attention_dropout_rate == big.attention_dropout_rate == 0.0  # not in the paper


# TransformerConfig.to_dict() of every preset in version 0.1.0 (a run folder's config.json holds one).
V0_1_0_PRESETS = {
    "base": {"vocab_size": 37000, "num_layers": 6, "d_model": 512, "num_heads": 8, "dff": 2048, "dropout_rate": 0.1,
             "max_length": 256, "tie_embeddings": True, "norm_first": False, "learned_positions": False,
             "label_smoothing": 0.1, "learning_rate_scale": 1.0, "warmup_steps": 4000, "train_steps": 100000,
             "batch_tokens": 25000, "checkpoint_average": 5, "beam_size": 4, "length_penalty": 0.6,
             "extra_decode_length": 50},
    "big": {"vocab_size": 37000, "num_layers": 6, "d_model": 1024, "num_heads": 16, "dff": 4096, "dropout_rate": 0.3,
            "max_length": 256, "tie_embeddings": True, "norm_first": False, "learned_positions": False,
            "label_smoothing": 0.1, "learning_rate_scale": 1.0, "warmup_steps": 4000, "train_steps": 300000,
            "batch_tokens": 25000, "checkpoint_average": 20, "beam_size": 4, "length_penalty": 0.6,
            "extra_decode_length": 50},
    "small": {"vocab_size": 8000, "num_layers": 3, "d_model": 256, "num_heads": 4, "dff": 1024, "dropout_rate": 0.1,
              "max_length": 128, "tie_embeddings": True, "norm_first": True, "learned_positions": False,
              "label_smoothing": 0.1, "learning_rate_scale": 0.5, "warmup_steps": 400, "train_steps": 4000,
              "batch_tokens": 2048, "checkpoint_average": 5, "beam_size": 4, "length_penalty": 0.6,
              "extra_decode_length": 50},
    "tiny": {"vocab_size": 64, "num_layers": 2, "d_model": 32, "num_heads": 2, "dff": 64, "dropout_rate": 0.0,
             "max_length": 32, "tie_embeddings": True, "norm_first": False, "learned_positions": False,
             "label_smoothing": 0.1, "learning_rate_scale": 1.0, "warmup_steps": 10, "train_steps": 20,
             "batch_tokens": 256, "checkpoint_average": 2, "beam_size": 2, "length_penalty": 0.6,
             "extra_decode_length": 50},
}


@pytest.mark.parametrize("name", sorted(V0_1_0_PRESETS))
def test_presets_keep_their_numbers_and_old_dicts_load(name):
    old = V0_1_0_PRESETS[name]
    kept = {k: v for k, v in old.items() if k not in RETIRED_FIELDS}
    assert PRESETS[name].to_dict() == {**kept, "attention_dropout_rate": 0.0}
    assert TransformerConfig.from_dict(old) == PRESETS[name]
    assert TransformerConfig.from_dict(PRESETS[name].to_dict()) == PRESETS[name]


def test_retired_fields_are_gone_and_from_dict_rejects_other_unknown_keys():
    assert set(RETIRED_FIELDS) == {"beam_size", "train_steps"}
    assert not set(RETIRED_FIELDS) & set(get_preset("tiny").to_dict())
    with pytest.raises(TypeError):
        TransformerConfig(beam_size=4)
    with pytest.raises(ValueError, match=r"unknown TransformerConfig field\(s\): \['beam_width', 'd_modle'\]"):
        TransformerConfig.from_dict({**V0_1_0_PRESETS["tiny"], "d_modle": 8, "beam_width": 4})
    with pytest.raises(ValueError, match="dropout_rate"):
        TransformerConfig.from_dict({**V0_1_0_PRESETS["tiny"], "dropout_rate": 1.5})


def test_attention_dropout_rate_is_a_validated_model_field():
    config = get_preset("tiny", attention_dropout_rate=0.2)
    assert "attention_dropout_rate" in MODEL_FIELDS
    assert config.model_kwargs()["attention_dropout_rate"] == 0.2
    assert TransformerConfig.from_dict(config.to_dict()) == config
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match="TransformerConfig.attention_dropout_rate must be in"):
            get_preset("tiny", attention_dropout_rate=bad)


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
