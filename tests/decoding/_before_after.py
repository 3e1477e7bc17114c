"""Translations of a fixed-seed tiny model, recorded before the unknown-input rule and compared after it.

``translations(multi30k_dir, workdir)`` trains the 300-piece SentencePiece
model of ``_shared.py`` with the former default normalization
(``"identity"``), builds the fixed-seed ``tiny`` Transformer of ``_shared.py``
and translates the first Multi30k test2016 lines plus a few inputs in scripts
the vocabulary never saw, with beam search and greedy search, in graph mode
and with XLA (one sentence at a time, the XLA path), and as a trained model
folder opened by ``open_translator`` (what ``evaluate``/``translate`` do). It only uses APIs that
existed before the change, so the same function ran on the code before it:

    git archive 203c9d1 | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before KERAS_TRANSFORMER_DATA=../shared/data \\
        python tests/decoding/_before_after.py tests/decoding/data/translations_before.json

``tests/decoding/test_unknown_input.py`` runs it on the current code and
compares.
"""

import hashlib
import itertools
import json
import os
import pathlib
import sys

SEED = 1234
NUM_LINES = 24
#: Inputs of scripts the vocabulary never saw (the "before" shows their repetition loops).
UNSEEN = ["你好世界，今天天气很好。", "😀👍🐶", "🐶🐱🐭🐹🐰🦊🐻🐼"]
KWARGS = dict(max_length=20, extra_decode_length=5, beam_size=2, length_penalty=0.6)


def _read_lines(path, n):
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in itertools.islice(f, n)]


def translations(multi30k_dir, workdir):
    """The record: vocabulary sha256, sources, and per path/search the translations and output ids."""
    import keras
    import tensorflow as tf

    from keras_transformer.config import get_preset
    from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece
    from keras_transformer.decoding import Translator
    from keras_transformer.model import Transformer

    multi30k_dir = pathlib.Path(multi30k_dir)
    lines = _read_lines(multi30k_dir / "train.en", 1000) + _read_lines(multi30k_dir / "train.de", 1000)
    import inspect

    # The vocabulary of before: no placeholder piece either (an argument that came later, hence the check).
    later = {"placeholders": False} if "placeholders" in inspect.signature(train_sentencepiece).parameters else {}
    path = train_sentencepiece(lines, pathlib.Path(workdir), vocab_size=300, normalization_rule_name="identity",
                               **later)
    vocab_size = SubwordTokenizer(path).vocab_size
    keras.utils.set_random_seed(SEED)
    model = Transformer(**get_preset("tiny", vocab_size=vocab_size, max_length=32).model_kwargs())
    model((tf.constant([[5, 6, 3]]), tf.constant([[2, 7]])))
    tokenizer = SubwordTokenizer(path)
    sources = _read_lines(multi30k_dir / "test2016.en", NUM_LINES) + UNSEEN
    plain = Translator(model, tokenizer, **KWARGS)
    xla = Translator(model, tokenizer, jit_compile=True, **KWARGS)
    batch = tf.constant(sources)

    def texts(tensor):
        return [t.decode("utf-8") for t in tensor.numpy()]

    beam = plain.translate_ids(batch)
    record = {
        "vocab_sha256": tokenizer.vocab_sha256,
        "sources": sources,
        "beam": {"translations": texts(plain.translate(batch)["translations"]),
                 "output_ids": beam["output_ids"].numpy()[:, 0].tolist()},
        "greedy": {"translations": texts(plain.translate_greedy(batch)["translations"]),
                   "output_ids": plain.translate_greedy(batch)["output_ids"].numpy().tolist()},
        "xla_greedy": {"translations": [texts(xla.translate_greedy(tf.constant([s]))["translations"])[0]
                                        for s in sources]},
    }
    # The same model as a trained model folder (what `train` leaves), opened as `evaluate`/`translate` do.
    folder = pathlib.Path(workdir) / "model_dir"
    folder.mkdir()
    tokenizer.save(folder)
    config = get_preset("tiny", vocab_size=vocab_size, max_length=32)
    (folder / "config.json").write_text(json.dumps(
        {"preset": "tiny", "config": config.to_dict(), "vocab_sha256": tokenizer.vocab_sha256}))
    model.save(folder / "model.keras")
    from keras_transformer.decoding.load import open_translator

    opened = open_translator(folder, beam_size=2)
    record["model_dir"] = {"translations": texts(opened.translate(batch)["translations"])}
    return record


if __name__ == "__main__":
    import tempfile

    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    data = pathlib.Path(os.environ.get("KERAS_TRANSFORMER_DATA", "../shared/data")) / "multi30k"
    with tempfile.TemporaryDirectory() as tmp:
        result = translations(data, tmp)
    out = pathlib.Path(sys.argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}: vocabulary {result['vocab_sha256'][:12]}, {len(result['sources'])} sources")
    print(hashlib.sha256(out.read_bytes()).hexdigest())
