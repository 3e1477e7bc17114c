"""Hyper-parameters of the Transformer and the paper's presets (Table 3).

One frozen dataclass, :class:`TransformerConfig`, holds every number the model,
its training and its decoding need, so that the paper's defaults live in one
place. Presets:

=======  ===  =======  ====  ==  ===  ===  ======  ====  ==========
name     N    d_model  dff   h   d_k  d_v  P_drop  e_ls  paper steps
=======  ===  =======  ====  ==  ===  ===  ======  ====  ==========
base     6    512      2048  8   64   64   0.1     0.1   100,000
big      6    1024     4096  16  64   64   0.3     0.1   300,000
small    3    256      1024  4   64   64   0.1     0.1   (CPU work)
tiny     2    32       64    2   16   16   0.0     0.1   (tests)
=======  ===  =======  ====  ==  ===  ===  ======  ====  ==========

``base`` and ``big`` are "Attention Is All You Need" (Vaswani et al., 2017),
Table 3 and Section 5-6: Adam(0.9, 0.98, 1e-9), warmup 4,000 steps (Eq. 3),
about 25,000 source + 25,000 target tokens per batch (Section 5.1), trained
for 100,000 (base) or 300,000 (big) steps (Section 5.2; how long to train is
the command line's ``--epochs``/``--max-train-minutes``, not a field here),
beam 4 (the decoding functions' ``beam_size``), length penalty alpha 0.6,
maximum output length = input length + 50 (Section 6.1), average of the last
5 (base) or 20 (big) checkpoints.

:meth:`TransformerConfig.from_dict` reads a config saved by
:meth:`TransformerConfig.to_dict` (a run folder's ``config.json``), also one of
an earlier version with the retired fields ``beam_size`` and ``train_steps``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["TransformerConfig", "PRESETS", "get_preset", "MODEL_FIELDS", "RETIRED_FIELDS"]

#: Fields that are arguments of :class:`keras_transformer.Transformer`.
MODEL_FIELDS = (
    "vocab_size",
    "num_layers",
    "d_model",
    "num_heads",
    "dff",
    "dropout_rate",
    "attention_dropout_rate",
    "max_length",
    "tie_embeddings",
    "norm_first",
    "learned_positions",
)

#: Fields of earlier versions that nothing read, ignored by :meth:`TransformerConfig.from_dict`
#: (``beam_size`` and ``train_steps``, removed after 0.1.0: decoding and training take them as arguments).
RETIRED_FIELDS = ("beam_size", "train_steps")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """All hyper-parameters of one Transformer, its training and decoding.

    Model (Section 3, Table 3):
        vocab_size: size of the shared source/target vocabulary (ids
            ``[0, vocab_size)``, 0 = padding).
        num_layers: N, layers in the encoder and in the decoder.
        d_model: width of every sub-layer output and of the embeddings.
        num_heads: h, attention heads; ``d_k = d_v = d_model / num_heads``.
        dff: inner width of the position-wise feed-forward network (Eq. 2).
        dropout_rate: P_drop (Section 5.4).
        attention_dropout_rate: dropout on the attention weights (not in the
            paper; default 0).
        max_length: the longest sequence in tokens (including BOS/EOS) that
            the data pipeline keeps and that decoding produces.
        tie_embeddings: share the encoder embedding, decoder embedding and
            pre-softmax projection (Section 3.4).
        norm_first: pre-LayerNorm instead of the paper's post-LayerNorm.
        learned_positions: learned position embeddings (Table 3, row E)
            instead of sinusoids (Section 3.5).

    Training (Section 5):
        label_smoothing: epsilon_ls (Section 5.4).
        learning_rate_scale: multiplies Eq. 3 (1.0 is the paper).
        warmup_steps: of the learning-rate schedule (Eq. 3).
        batch_tokens: tokens per batch (source or target side, padding
            included), Section 5.1.
        checkpoint_average: how many last checkpoints to average (Section 6.1).

    Decoding (Section 6.1):
        length_penalty: alpha of Wu et al. (2016).
        extra_decode_length: maximum output length = input length + this.

    Raises:
        ValueError: naming the field, when a size is not positive, d_model is
            not divisible by num_heads, or a rate is outside [0, 1).
    """

    vocab_size: int = 8000
    num_layers: int = 6
    d_model: int = 512
    num_heads: int = 8
    dff: int = 2048
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.0
    max_length: int = 256
    tie_embeddings: bool = True
    norm_first: bool = False
    learned_positions: bool = False
    label_smoothing: float = 0.1
    learning_rate_scale: float = 1.0
    warmup_steps: int = 4000
    batch_tokens: int = 25_000
    checkpoint_average: int = 5
    length_penalty: float = 0.6
    extra_decode_length: int = 50

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "num_layers",
            "d_model",
            "num_heads",
            "dff",
            "max_length",
            "warmup_steps",
            "batch_tokens",
            "checkpoint_average",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"TransformerConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"TransformerConfig.d_model ({self.d_model}) must be divisible by "
                f"TransformerConfig.num_heads ({self.num_heads})"
            )
        for name in ("dropout_rate", "attention_dropout_rate", "label_smoothing"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"TransformerConfig.{name} must be in [0, 1), got {value!r}")
        if not self.learning_rate_scale > 0:
            raise ValueError(
                f"TransformerConfig.learning_rate_scale must be positive, got {self.learning_rate_scale!r}"
            )
        if self.length_penalty < 0:
            raise ValueError(f"TransformerConfig.length_penalty must be >= 0, got {self.length_penalty!r}")
        if self.extra_decode_length < 0:
            raise ValueError(
                f"TransformerConfig.extra_decode_length must be >= 0, got {self.extra_decode_length!r}"
            )

    @property
    def depth(self) -> int:
        """d_k = d_v = d_model / num_heads (Section 3.2.2)."""
        return self.d_model // self.num_heads

    def model_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :class:`keras_transformer.Transformer`."""
        return {name: getattr(self, name) for name in MODEL_FIELDS}

    def replace(self, **changes: Any) -> "TransformerConfig":
        """A copy with ``changes`` applied (validated again).

        Raises:
            ValueError: for an unknown field name or an invalid value.
        """
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown TransformerConfig field(s): {sorted(unknown)}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict of every field (:meth:`from_dict` inverts it)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> "TransformerConfig":
        """The config of a :meth:`to_dict` dict, of this version or an earlier one.

        Keys of :data:`RETIRED_FIELDS` (``beam_size``, ``train_steps``: in the
        ``config.json`` of runs of version 0.1.0) are ignored; fields missing
        from ``mapping`` (e.g. ``attention_dropout_rate``, added later) take
        their defaults.

        Args:
            mapping: field name -> value, e.g. ``json.load`` of a run
                folder's ``config.json`` ``["config"]``.

        Returns:
            The validated config.

        Raises:
            ValueError: naming any other unknown key, or for an invalid value.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(mapping) - known - set(RETIRED_FIELDS))
        if unknown:
            raise ValueError(f"unknown TransformerConfig field(s): {unknown}")
        return cls(**{name: value for name, value in mapping.items() if name in known})


PRESETS: dict[str, TransformerConfig] = {
    # Table 3, "base": 65M parameters in the paper (37k shared BPE vocabulary).
    "base": TransformerConfig(vocab_size=37_000),
    # Table 3, "big": 213M parameters.
    "big": TransformerConfig(vocab_size=37_000, d_model=1024, dff=4096, num_heads=16, dropout_rate=0.3,
                             checkpoint_average=20),
    # A model for CPU work on small corpora such as Multi30k. Pre-LN and half the Eq. 3
    # rate (peak 1.6e-3 at step 400): with ~2k-token batches and a few hundred steps, the
    # paper's post-LN at the full rate (3.1e-3) trained unstably in our runs.
    "small": TransformerConfig(vocab_size=8000, num_layers=3, d_model=256, num_heads=4, dff=1024, max_length=128,
                               norm_first=True, learning_rate_scale=0.5, warmup_steps=400, batch_tokens=2048,
                               checkpoint_average=5),
    # Transformer-Tiny (Wu et al., 2021, "Good for Misconceived Reasons"), the strongest published
    # text-only Transformer trained on Multi30k alone: 4+4 layers, d_model 128, dff 256, 4 heads,
    # dropout 0.3 (2.3M parameters with the 8k vocabulary). Pre-LN, ~2k-token batches and a peak
    # rate of 4.4e-3 at step 400 (Eq. 3 at the full rate; the paper's recipe peaks at 5e-3):
    # measured on the Multi30k validation set (README "Quickstart"). About 2x faster per step
    # than `small` on a 2-core CPU; in a 6-minute budget it fits 4 epochs to small's 2.5.
    "compact": TransformerConfig(vocab_size=8000, num_layers=4, d_model=128, num_heads=4, dff=256, dropout_rate=0.3,
                                 max_length=128, norm_first=True, warmup_steps=400, batch_tokens=2048,
                                 checkpoint_average=10),
    # A model for tests: builds and trains in a second.
    "tiny": TransformerConfig(vocab_size=64, num_layers=2, d_model=32, num_heads=2, dff=64, dropout_rate=0.0,
                              max_length=32, warmup_steps=10, batch_tokens=256, checkpoint_average=2),
}


def get_preset(name: str, **overrides: Any) -> TransformerConfig:
    """The preset ``name`` with ``overrides`` applied.

    Raises:
        ValueError: for an unknown preset (the message lists the known ones)
            or an invalid override.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {sorted(PRESETS)}")
    return PRESETS[name].replace(**overrides) if overrides else PRESETS[name]
