"""Attention-head and positional-encoding plots (keras_transformer.visualization, `keras-transformer plot`)."""

import math
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import sentencepiece as spm  # noqa: E402

from keras_transformer import visualization  # noqa: E402
from keras_transformer.cli import main  # noqa: E402
from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece  # noqa: E402
from keras_transformer.model import Transformer  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NUM_HEADS = 4
NUM_LAYERS = 2
SOURCE = "A man is riding a bike."
TARGET = "Ein Mann fährt Fahrrad."


@pytest.fixture(scope="module")
def spm_path(multi30k_dir, tmp_path_factory):
    """A 300-piece shared vocabulary trained on the first 2,000 Multi30k training pairs."""
    with open(multi30k_dir / "train.en", encoding="utf-8") as f:
        en = [next(f).rstrip("\n") for _ in range(2000)]
    with open(multi30k_dir / "train.de", encoding="utf-8") as f:
        de = [next(f).rstrip("\n") for _ in range(2000)]
    return train_sentencepiece([en, de], str(tmp_path_factory.mktemp("viz_spm") / "spm"), vocab_size=300)


@pytest.fixture(scope="module")
def tokenizer(spm_path):
    return SubwordTokenizer(spm_path)


@pytest.fixture(scope="module")
def model(tokenizer):
    keras.utils.set_random_seed(7)
    m = Transformer(
        vocab_size=tokenizer.vocab_size,
        num_layers=NUM_LAYERS,
        d_model=32,
        num_heads=NUM_HEADS,
        dff=64,
        dropout_rate=0.0,
        max_length=24,
    )
    m.build()
    return m


def _is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG_SIGNATURE


def _softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


# --------------------------------------------------------------------------- Transformer.attention_weights


def test_attention_weights_of_first_layer_equal_a_hand_computation(model):
    # Two pairs, the second padded on both sides.
    source = np.array([[10, 11, 12, 13, 3], [20, 21, 3, 0, 0]], np.int32)
    target_in = np.array([[2, 30, 31, 32], [2, 40, 0, 0]], np.int32)
    weights = model.attention_weights(source, target_in)
    assert sorted(weights) == [f"layer_{i}" for i in range(NUM_LAYERS)]
    for w in weights.values():
        assert w.dtype == "float32" and tuple(w.shape) == (2, NUM_HEADS, 4, 5)

    # Layer 0 by hand (post-LN): x1 = LN(y + SelfAttention(y)); Q = x1 Wq + bq; K = enc Wk + bk;
    # weights = softmax(Q_h K_h^T / sqrt(depth)) over the real source positions (Eq. 1).
    layer = model.decoder.decoder_layers[0]
    y = model.embedding(target_in)
    self_att = layer.self_attention(y, attention_mask=target_in != 0, use_causal_mask=True)
    x1 = np.asarray(layer.self_attention_norm(y + self_att))
    enc = np.asarray(model.encode(source))
    wq, bq = (np.asarray(v) for v in layer.cross_attention.query_dense.weights)
    wk, bk = (np.asarray(v) for v in layer.cross_attention.key_dense.weights)
    depth = 32 // NUM_HEADS
    q = (x1 @ wq + bq).reshape(2, 4, NUM_HEADS, depth)
    k = (enc @ wk + bk).reshape(2, 5, NUM_HEADS, depth)
    scores = np.einsum("bthd,bshd->bhts", q, k) / math.sqrt(depth)
    real = (source != 0)[:, None, None, :]
    expected = np.where(real, _softmax(np.where(real, scores, -1e30)), 0.0)
    np.testing.assert_allclose(np.asarray(weights["layer_0"]), expected, atol=1e-5)
    # Padded source positions get exactly 0; rows sum to 1 over the real ones.
    assert np.all(np.asarray(weights["layer_1"])[1, :, :, 3:] == 0.0)
    np.testing.assert_allclose(np.asarray(weights["layer_1"]).sum(-1), 1.0, atol=1e-5)


# --------------------------------------------------------------------------- plot_attention_heads


def test_plot_attention_heads_writes_a_png_with_one_panel_per_head(model, tokenizer, spm_path, tmp_path):
    path = tmp_path / "att.png"
    result = visualization.plot_attention_heads(model, tokenizer, SOURCE, TARGET, layer=-1, path=path)
    assert result.path == str(path) and _is_png(path)
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 200 and image.height > 200
    # num_heads heat maps + one shared colour bar.
    assert len(result.head_axes) == NUM_HEADS
    assert len(result.figure.axes) == NUM_HEADS + 1
    assert [ax.get_title() for ax in result.head_axes] == [f"head {h + 1}" for h in range(NUM_HEADS)]

    # Labels: the pieces of the sentences (plus EOS), from the SentencePiece model itself.
    processor = spm.SentencePieceProcessor(model_file=spm_path)
    source_pieces = processor.encode(SOURCE, out_type=str) + ["</s>"]
    target_pieces = processor.encode(TARGET, out_type=str) + ["</s>"]
    assert result.source_pieces == source_pieces and result.target_pieces == target_pieces
    assert [t.get_text() for t in result.head_axes[0].get_xticklabels()] == source_pieces
    assert [t.get_text() for t in result.head_axes[0].get_yticklabels()] == target_pieces

    # The plotted matrix is the last decoder layer's cross-attention of this pair; rows sum to 1.
    assert result.layer == NUM_LAYERS - 1 and result.target == TARGET
    assert result.weights.shape == (NUM_HEADS, len(target_pieces), len(source_pieces))
    source_ids = np.array([processor.encode(SOURCE) + [3]], np.int32)
    target_in = np.array([[2] + processor.encode(TARGET)], np.int32)
    expected = np.asarray(model.attention_weights(source_ids, target_in)[f"layer_{NUM_LAYERS - 1}"])[0]
    np.testing.assert_allclose(result.weights, expected, atol=1e-6)
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(result.weights >= 0)


def test_plot_attention_heads_translates_when_no_target(model, tokenizer, tmp_path):
    result = visualization.plot_attention_heads(model, tokenizer, SOURCE, None, layer=0, path=tmp_path / "a.png")
    assert _is_png(tmp_path / "a.png") and result.layer == 0
    assert isinstance(result.target, str)
    # Rows = the greedy output pieces + EOS (the model's own translation), at most max_length.
    assert result.target_pieces[-1] == "</s>" and len(result.target_pieces) <= model.max_length
    assert result.weights.shape[0] == NUM_HEADS and result.weights.shape[1] == len(result.target_pieces)
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-5)


def test_plot_attention_heads_rejects_bad_input(model, tokenizer, tmp_path):
    with pytest.raises(ValueError, match="source sentence is empty"):
        visualization.plot_attention_heads(model, tokenizer, "   ", TARGET)
    with pytest.raises(ValueError, match="layer"):
        visualization.plot_attention_heads(model, tokenizer, SOURCE, TARGET, layer=NUM_LAYERS)
    with pytest.raises(ValueError, match=r"\.png"):
        visualization.plot_attention_heads(model, tokenizer, SOURCE, TARGET, path=tmp_path / "a.jpg")
    with pytest.raises(ValueError, match="pieces; the model takes at most 23"):
        visualization.plot_attention_heads(model, tokenizer, "a man " * 30, TARGET)
    with pytest.raises(FileNotFoundError, match="missing.keras"):
        visualization.plot_attention_heads(str(tmp_path / "missing.keras"), tokenizer, SOURCE, TARGET)


# --------------------------------------------------------------------------- positional encoding


def test_positional_encoding_plot_holds_the_sinusoids(tmp_path):
    d_model, length = 64, 50
    result = visualization.plot_positional_encoding(d_model, length, path=tmp_path / "pe.png")
    assert _is_png(tmp_path / "pe.png") and len(result.figure.axes) == 2  # the matrix + colour bar
    m = result.matrix
    assert m.shape == (length, d_model) and m.dtype == np.float32
    for pos, i in [(0, 0), (1, 0), (7, 3), (49, 10), (23, 31)]:
        angle = pos / 10000 ** (2 * i / d_model)
        assert m[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-5)
        assert m[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-5)
    with pytest.raises(ValueError, match="even"):
        visualization.plot_positional_encoding(63, 10)
    with pytest.raises(ValueError, match="length"):
        visualization.plot_positional_encoding(64, 0)


# --------------------------------------------------------------------------- CLI


def _write_record(run_dir, model):
    """The run record a model folder needs beside model.keras and spm.model."""
    from keras_transformer.config import TransformerConfig
    from keras_transformer.data.tokenizer import SubwordTokenizer
    from keras_transformer.run_folder import RunFolder, RunRecord

    names = {f for f in TransformerConfig.__dataclass_fields__}
    config = TransformerConfig(**{k: v for k, v in model.get_config().items() if k in names})
    sha = SubwordTokenizer(str(run_dir / "spm.model")).vocab_sha256
    RunFolder(run_dir).write_record(RunRecord(None, config, sha))


def test_cli_plot_commands(model, spm_path, tmp_path, capsys):
    assert main(["plot", "positional-encoding", "--d-model", "32", "--length", "20", "--output", str(tmp_path / "pe.png")]) == 0
    assert _is_png(tmp_path / "pe.png")

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    model.save(run_dir / "model.keras")
    with open(spm_path, "rb") as src, open(run_dir / "spm.model", "wb") as dst:
        dst.write(src.read())
    assert main(["plot", "attention", "--model-dir", str(run_dir), "--source", SOURCE]) == 2
    assert f"missing {run_dir / 'config.json'}" in capsys.readouterr().err  # not a model folder yet
    _write_record(run_dir, model)
    out = tmp_path / "att.png"
    argv = ["plot", "attention", "--model-dir", str(run_dir), "--source", SOURCE, "--target", TARGET]
    assert main(argv + ["--layer", "0", "--output", str(out)]) == 0
    assert _is_png(out)
    printed = capsys.readouterr().out
    assert f"wrote {out}: encoder-decoder attention of decoder layer 1 of {model.num_layers}," in printed

    assert main(["plot", "attention", "--model-dir", str(tmp_path / "nope"), "--source", SOURCE]) == 2
    assert "model folder not found" in capsys.readouterr().err
    assert main(argv + ["--layer", "9", "--output", str(out)]) == 2
    assert "layer must be an int" in capsys.readouterr().err
