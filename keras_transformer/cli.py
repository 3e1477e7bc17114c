"""The ``keras-transformer`` command line.

Commands:

``run``
    The main job in one go, on Multi30k English→German: train the shared
    SentencePiece vocabulary, train a model (token batches, Eq. 3 schedule,
    label smoothing), score BLEU on test2016 with sacreBLEU, export the
    SavedModel for TF Serving, and translate a few test sentences.
``translate``
    Translate a file (or stdin) with an exported SavedModel, in batches, with
    a progress bar; writes one translation per input line.

Every command prints what it does and stops with a one-line error (exit
status 2) on bad input, naming the file or flag at fault.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
from collections.abc import Sequence

__all__ = ["main"]


class CliError(Exception):
    """An error in the user's input, printed without a traceback."""


def _env_data_dir() -> str | None:
    return os.environ.get("KERAS_TRANSFORMER_DATA") or None


def _batched(items: Sequence[str], size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def translate_lines(translate_fn, lines: Sequence[str], batch_size: int = 64, desc: str = "translating") -> list[str]:
    """Translates ``lines`` in batches with a progress bar.

    Args:
        translate_fn: maps a 1-D ``tf.string`` tensor to a dict holding
            ``"translations"`` (1-D ``tf.string``), e.g. a Translator's
            ``translate`` or a SavedModel's ``serving_default``.
        lines: sentences (``str``).
        batch_size: sentences per call.
        desc: progress-bar label.

    Returns:
        One ``str`` translation per line, in order.
    """
    import tensorflow as tf
    from tqdm import tqdm

    out: list[str] = []
    with tqdm(total=len(lines), desc=desc, unit="sent", file=sys.stderr, disable=None) as bar:
        for batch in _batched(list(lines), batch_size):
            result = translate_fn(tf.constant(batch, tf.string))
            out.extend(t.decode("utf-8") for t in result["translations"].numpy())
            bar.update(len(batch))
    return out


def _run(args: argparse.Namespace) -> int:
    import keras

    from keras_transformer.config import get_preset
    from keras_transformer.data.pipeline import make_dataset, prepare_pairs
    from keras_transformer.data.sources import load_multi30k
    from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece
    from keras_transformer.decoding.translator import Translator
    from keras_transformer.evaluation import score_corpus
    from keras_transformer.export import export_saved_model
    from keras_transformer.training.trainer import build_model, compile_model, fit, get_strategy

    keras.utils.set_random_seed(args.seed)
    out = pathlib.Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    data_dir = args.data_dir or _env_data_dir()

    print(f"[1/6] reading Multi30k en-de from {data_dir or '(download cache)'}", flush=True)
    splits = {
        split: load_multi30k(split, data_dir=data_dir, download=not args.no_download, cache_dir=args.cache_dir)
        for split in ("train", "val", "test2016")
    }
    for split, limit in (("train", args.limit_train), ("val", args.limit_test), ("test2016", args.limit_test)):
        if limit:
            pairs = splits[split]
            pairs.sources, pairs.targets = pairs.sources[:limit], pairs.targets[:limit]
    for split, pairs in splits.items():
        print(f"      {split}: {len(pairs)} pairs", flush=True)

    spm_path = out / "spm.model"
    if spm_path.exists():
        print(f"[2/6] reusing the shared vocabulary {spm_path}", flush=True)
    else:
        print(f"[2/6] training a shared SentencePiece vocabulary of {args.vocab_size} pieces", flush=True)
        train_sentencepiece(
            [splits["train"].sources, splits["train"].targets], str(out / "spm"), vocab_size=args.vocab_size
        )
    tokenizer = SubwordTokenizer(str(spm_path))

    overrides = {"vocab_size": tokenizer.vocab_size}
    if args.batch_tokens:
        overrides["batch_tokens"] = args.batch_tokens
    config = get_preset(args.preset, **overrides)
    (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")

    train = prepare_pairs(splits["train"].sources, splits["train"].targets, tokenizer, config.max_length)
    val = prepare_pairs(splits["val"].sources, splits["val"].targets, tokenizer, config.max_length)
    print(f"      train: {train.report.summary()}", flush=True)
    train_ds = make_dataset(train, batch_tokens=config.batch_tokens, shuffle=True, seed=args.seed)
    val_ds = make_dataset(val, batch_tokens=config.batch_tokens, shuffle=False)

    print(
        f"[3/6] training preset {args.preset!r} (N={config.num_layers}, d_model={config.d_model}, "
        f"h={config.num_heads}, dff={config.dff}) for {args.epochs} epochs"
        + (f", at most {args.max_train_minutes:g} min" if args.max_train_minutes else ""),
        flush=True,
    )
    strategy = get_strategy(args.strategy)
    with strategy.scope():
        model = build_model(config)
        compile_model(model, config, jit_compile=args.jit_compile, learning_rate_scale=args.learning_rate_scale)
    start = time.monotonic()
    fit(
        model,
        train_ds,
        model_dir=out,
        epochs=args.epochs,
        validation_data=val_ds,
        max_train_seconds=args.max_train_minutes * 60 if args.max_train_minutes else None,
        verbose=2,
    )
    train_minutes = (time.monotonic() - start) / 60
    model.save(out / "model.keras")
    print(f"      trained in {train_minutes:.1f} min; saved {out / 'model.keras'}", flush=True)

    translator = Translator(
        model,
        tokenizer,
        max_length=config.max_length,
        extra_decode_length=config.extra_decode_length,
        beam_size=args.beam_size,
        length_penalty=config.length_penalty,
    )
    translate_fn = translator.translate if args.beam_size > 1 else translator.translate_greedy
    search = f"beam search (beam {args.beam_size}, alpha {config.length_penalty})" if args.beam_size > 1 else "greedy search"
    print(f"[4/6] translating Multi30k test2016 ({len(splits['test2016'])} sentences) with {search}", flush=True)
    hypotheses = translate_lines(translate_fn, splits["test2016"].sources, batch_size=args.eval_batch_size)
    scores = score_corpus(hypotheses, splits["test2016"].targets)
    (out / "test2016.hyp.de").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    print(f"      Multi30k test2016 en-de:\n      " + str(scores).replace("\n", "\n      "), flush=True)

    print(f"[5/6] exporting the SavedModel", flush=True)
    export_path = export_saved_model(translator, out / "export", version=1, overwrite=True)
    print(f"      {export_path}  (signature serving_default: 1-D tf.string -> translations)", flush=True)

    print(f"[6/6] a few test sentences:", flush=True)
    for source, hypothesis, reference in list(
        zip(splits["test2016"].sources, hypotheses, splits["test2016"].targets)
    )[: args.num_examples]:
        print(f"  EN:  {source}\n  DE:  {hypothesis}\n  REF: {reference}\n", flush=True)
    summary = {
        "bleu": round(scores.bleu, 2),
        "chrf": round(scores.chrf, 2),
        "bleu_signature": scores.bleu_signature,
        "train_minutes": round(train_minutes, 2),
        "preset": args.preset,
        "beam_size": args.beam_size,
        "saved_model": export_path,
    }
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


def _translate(args: argparse.Namespace) -> int:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the SavedModel)

    if not pathlib.Path(args.saved_model, "saved_model.pb").is_file():
        raise CliError(f"no SavedModel at {args.saved_model} (expected {args.saved_model}/saved_model.pb)")
    if args.input == "-":
        lines = sys.stdin.read().splitlines()
    else:
        path = pathlib.Path(args.input)
        if not path.is_file():
            raise CliError(f"input file not found: {path}")
        lines = path.read_text(encoding="utf-8").splitlines()
    loaded = tf.saved_model.load(args.saved_model)
    signature = loaded.signatures[args.signature]
    translations = translate_lines(lambda batch: signature(batch), lines, batch_size=args.batch_size)
    text = "".join(t + "\n" for t in translations)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        pathlib.Path(args.output).write_text(text, encoding="utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``keras-transformer`` (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="keras-transformer", description="The Transformer (Vaswani et al., 2017) for machine translation."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train, evaluate, export and translate on Multi30k en-de in one go")
    run.add_argument("--data-dir", help="folder holding multi30k/ (default: $KERAS_TRANSFORMER_DATA)")
    run.add_argument("--cache-dir", help="where a downloaded Multi30k goes (default: ~/.cache/keras_transformer)")
    run.add_argument("--no-download", action="store_true", help="never download; fail if the files are missing")
    run.add_argument("--output-dir", default="runs/multi30k", help="vocabulary, checkpoints, model and export")
    run.add_argument("--preset", default="small", help="model preset: tiny, small, base, big (default: small)")
    run.add_argument("--vocab-size", type=int, default=8000, help="shared SentencePiece vocabulary size")
    run.add_argument("--batch-tokens", type=int, default=None, help="tokens per batch (default: the preset's)")
    run.add_argument("--epochs", type=int, default=3, help="passes over the training data")
    run.add_argument(
        "--max-train-minutes", type=float, default=6.0, help="stop training after this many minutes (0: no limit)"
    )
    run.add_argument("--learning-rate-scale", type=float, default=1.0, help="multiplies the Eq. 3 learning rate")
    run.add_argument("--beam-size", type=int, default=4, help="beam size for test2016 (1: greedy)")
    run.add_argument("--eval-batch-size", type=int, default=128, help="sentences per translation batch")
    run.add_argument("--jit-compile", action="store_true", help="compile the train step with XLA")
    run.add_argument("--strategy", default="auto", help="auto, mirrored, multi_worker or default")
    run.add_argument("--num-examples", type=int, default=5, help="test sentences to print")
    run.add_argument("--limit-train", type=int, default=0, help="use only the first N training pairs (0: all)")
    run.add_argument(
        "--limit-test", type=int, default=0, help="use only the first N validation and test pairs (0: all)"
    )
    run.add_argument("--seed", type=int, default=0)
    run.set_defaults(func=_run)

    tr = sub.add_parser("translate", help="translate a file or stdin with an exported SavedModel")
    tr.add_argument("--saved-model", required=True, help="the version folder, e.g. runs/multi30k/export/1")
    tr.add_argument("--input", default="-", help="one sentence per line (default: stdin)")
    tr.add_argument("--output", default="-", help="where translations go (default: stdout)")
    tr.add_argument("--signature", default="serving_default")
    tr.add_argument("--batch-size", type=int, default=64)
    tr.set_defaults(func=_translate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``keras-transformer`` console script.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 2 on bad input (the error is printed
        to stderr as one line).
    """
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CliError, FileNotFoundError, ValueError) as error:
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
