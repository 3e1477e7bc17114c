"""Decoding speed of our SavedModel exports against CTranslate2, on the same model and sentences.

One trained model folder (``train``/``run`` output) is exported three ways in
this run: our TF Serving SavedModel without XLA (the default export) and with
``--xla``, and CTranslate2 float32 and int8 (``export --format ctranslate2``).
Older exports (e.g. from an earlier commit) can join as extra columns with
``--saved-model NAME=PATH``. Every system translates the same first
``--sentences`` lines of Multi30k test2016 with the same beam size, length
penalty and maximum length, in four cells: greedy and beam search, batches of
32 and of 1 sentence (in file order; each side gets the same batches).

Thread settings: one batch at a time on one thread ("1x1") or on 2 threads
("1x2": one caller, 2 intra-op threads), or two or four batches at once on 1
thread each ("2x1", "4x1": that many callers; TF: 1 intra-op thread, as many
inter-op threads; CTranslate2: ``inter_threads=2`` or ``4``,
``intra_threads=1``), as a server does with concurrent requests. Each system runs each setting in a fresh process (TensorFlow fixes
its thread pools at start-up), and the table shows each system's best setting
per cell, named. Each figure is the median of ``--passes`` timed passes after
a warm-up pass (which also compiles every XLA shape), in sentences/s and
output tokens/s (SentencePiece pieces of the translations, EOS not counted,
counted the same way for every system).

Outputs are compared too: the identical-sentence rate of each system against
CTranslate2 float32, and the sacreBLEU of each against the references. Greedy
outputs of ours and CTranslate2 float32 should agree (same arithmetic up to
rounding); beam outputs may differ a little, because CTranslate2 normalizes by
``length ** alpha`` where we use Wu et al.'s ``((5 + length) / 6) ** alpha``.

Run it on an otherwise idle machine (2 cores: anything alongside halves the
figures):

    python scripts/bench/decode_vs_ctranslate2.py --model-dir runs/multi30k-cpu60 \\
        --saved-model before=runs/before/export/1 --saved-model "before --xla=runs/before/export-xla/1"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

CELLS = [("greedy", 32), ("greedy", 1), ("beam", 32), ("beam", 1)]
SETTINGS = {"1x1": (1, 1), "1x2": (1, 2), "2x1": (2, 1), "4x1": (4, 1)}  # callers x threads per caller


# -- worker (one system, one thread setting, in its own process) --------------------------------
def _time_passes(translate, batches, callers, passes, warmup_all):
    """(median seconds, outputs of the first timed pass) translating every batch ``passes`` times."""
    warm = batches if warmup_all else batches[: max(1, 32 // len(batches[0]))]
    for batch in warm:
        translate(batch)
    times, first = [], None
    for _ in range(passes):
        outputs = [None] * len(batches)

        def work(part):
            for i in part:
                outputs[i] = translate(batches[i])

        parts = [list(range(len(batches)))[c::callers] for c in range(callers)]
        threads = [threading.Thread(target=work, args=(part,)) for part in parts]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        times.append(time.perf_counter() - start)
        if first is None:
            first = [text for out in outputs for text in out]
    return statistics.median(times), first


def worker(args):
    callers, threads = SETTINGS[args.setting]
    lines = _read_lines(args.source, args.sentences)
    result = {"system": args.system, "setting": args.setting, "cells": {}}
    if args.kind == "ctranslate2":
        from keras_transformer.decoding.ctranslate2 import CTranslate2Translator

        translators = {
            mode: CTranslate2Translator(args.path, beam_size=1 if mode == "greedy" else args.beam_size,
                                        length_penalty=args.length_penalty, inter_threads=callers,
                                        intra_threads=threads)
            for mode in ("greedy", "beam")
        }
        fns = {mode: (lambda t: (lambda batch: t.translate(batch)["translations"]))(t) for mode, t in translators.items()}
        warmup_all = False
        import ctranslate2

        result["threads"] = f"ctranslate2 {ctranslate2.__version__}: inter_threads={callers}, intra_threads={threads}"
    else:
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (SentencePiece ops of the SavedModel)

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(callers)
        loaded = tf.saved_model.load(args.path)
        config = json.load(open(os.path.join(args.path, "assets.extra", "export_config.json"), encoding="utf-8"))
        signatures = {"greedy": loaded.signatures["greedy"], "beam": loaded.signatures["serving_default"]}

        def make(signature):
            def translate(batch):
                out = signature(tf.constant(batch))["translations"].numpy()
                return [t.decode("utf-8") for t in out]
            return translate

        fns = {mode: make(sig) for mode, sig in signatures.items()}
        warmup_all = bool(config.get("xla_compiled"))
        result["threads"] = (f"tensorflow {tf.__version__}: {callers} caller(s), intra_op={threads}, "
                             f"inter_op={callers}")
        result["decoding"] = config.get("decoding")
    for mode, batch_size in CELLS:
        batches = [lines[i: i + batch_size] for i in range(0, len(lines), batch_size)]
        seconds, outputs = _time_passes(fns[mode], batches, callers, args.passes, warmup_all)
        result["cells"][f"{mode} {batch_size}"] = {"seconds": seconds, "outputs": outputs}
        print(f"    {args.system} {args.setting} {mode} batch {batch_size}: {len(lines) / seconds:.1f} sent/s",
              file=sys.stderr, flush=True)
    with open(args.result, "w", encoding="utf-8") as f:
        json.dump(result, f)


# -- driver ----------------------------------------------------------------------------------------
def _read_lines(path, n):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][:n]


def _export_all(model_dir, work_dir, beam_size, alpha):
    """{system name: (kind, path)} of the exports of ``model_dir`` made in this run."""
    from keras_transformer.export import export_saved_model
    from keras_transformer.export.ctranslate2 import export_ctranslate2
    from keras_transformer.run_folder import RunFolder
    from keras_transformer.runner.translating import make_translator
    from keras_transformer.settings import DecodingSettings

    model, tokenizer, config = RunFolder(model_dir).load()
    decoding_settings = DecodingSettings(beam_size=beam_size, length_penalty=alpha)
    systems = {}
    for name, xla in (("ours", False), ("ours --xla", True)):
        translator, _, _ = make_translator(model, tokenizer, config, decoding_settings, jit_compile=xla)
        base = os.path.join(work_dir, "xla" if xla else "default")
        systems[name] = ("saved_model", export_saved_model(translator, base, version=1, overwrite=True))
    decoding = {"max_length": config.max_length, "extra_decode_length": config.extra_decode_length,
                "beam_size": beam_size, "length_penalty": alpha}
    for name, quantization in (("ct2 float32", None), ("ct2 int8", "int8")):
        path = os.path.join(work_dir, name.replace(" ", "-"))
        systems[name] = ("ctranslate2", export_ctranslate2(model, tokenizer, path, quantization=quantization,
                                                           decoding=decoding, overwrite=True))
    return systems


def _count_tokens(texts, spm_path):
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=spm_path)
    return sum(len(processor.encode(t)) for t in texts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", help="a trained model folder (model.keras, spm.model, config.json)")
    parser.add_argument("--source", default=os.path.join(
        os.environ.get("KERAS_TRANSFORMER_DATA", "../shared/data"), "multi30k", "test2016.en"))
    parser.add_argument("--reference", default=None, help="default: --source with .de")
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--length-penalty", type=float, default=0.6)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--work-dir", default=None, help="where the exports go (default: a temporary folder)")
    parser.add_argument("--saved-model", action="append", default=[], metavar="NAME=PATH",
                        help="an extra SavedModel version folder to measure, e.g. an export of an earlier commit")
    parser.add_argument("--settings", default="1x1,1x2,2x1,4x1", help="thread settings to try (callers x threads)")
    parser.add_argument("--output", default=None, help="write every figure and output here (JSON)")
    # worker mode (internal)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--setting", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if not args.model_dir:
        parser.error("--model-dir is required")

    from keras_transformer.evaluation import score_corpus

    reference_path = args.reference or os.path.splitext(args.source)[0] + ".de"
    lines = _read_lines(args.source, args.sentences)
    references = _read_lines(reference_path, args.sentences)
    work = args.work_dir or tempfile.mkdtemp(prefix="decode-bench-")
    os.makedirs(work, exist_ok=True)
    print(f"exporting {args.model_dir} into {work}", flush=True)
    systems = _export_all(args.model_dir, work, args.beam_size, args.length_penalty)
    for item in args.saved_model:
        name, _, path = item.partition("=")
        systems[name] = ("saved_model", path)
    print(f"{len(lines)} sentences of {args.source}; beam {args.beam_size}, alpha {args.length_penalty}; "
          f"{os.cpu_count()} CPUs; systems: {', '.join(systems)}", flush=True)

    results = {}
    for name, (kind, path) in systems.items():
        for setting in args.settings.split(","):
            out = os.path.join(work, f"result-{len(results)}.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--kind", kind, "--system", name,
                   "--path", path, "--setting", setting, "--result", out, "--source", args.source,
                   "--sentences", str(args.sentences), "--beam-size", str(args.beam_size),
                   "--length-penalty", str(args.length_penalty), "--passes", str(args.passes)]
            subprocess.run(cmd, check=True)
            with open(out, encoding="utf-8") as f:
                results[(name, setting)] = json.load(f)

    spm_path = os.path.join(args.model_dir, "spm.model")
    table = {}  # (system, cell) -> best figures
    for (name, setting), result in results.items():
        for cell, figures in result["cells"].items():
            seconds = figures["seconds"]
            best = table.get((name, cell))
            if best is None or seconds < best["seconds"]:
                table[(name, cell)] = {"seconds": seconds, "setting": setting, "outputs": figures["outputs"],
                                       "threads": result["threads"]}
    print("\nthread settings:")
    for (name, setting), result in results.items():
        print(f"  {name:14s} {setting}: {result['threads']}")

    names = list(systems)
    print(f"\nsentences/s (tokens/s), best thread setting of each system; {args.passes} passes, median")
    header = f"{'mode':7s} {'batch':>5s} " + " ".join(f"{n:>24s}" for n in names) + "   ours/ct2-f32  --xla/ct2-f32"
    print(header)
    summary = {}
    for mode, batch in CELLS:
        cell = f"{mode} {batch}"
        row = f"{mode:7s} {batch:5d} "
        for name in names:
            entry = table[(name, cell)]
            sps = len(lines) / entry["seconds"]
            tps = _count_tokens(entry["outputs"], spm_path) / entry["seconds"]
            entry.update(sentences_per_second=sps, tokens_per_second=tps)
            row += f"{sps:9.1f} ({tps:7.0f}) {entry['setting']:>4s} "
        base = table[("ct2 float32", cell)]["sentences_per_second"]
        ratios = (table[("ours", cell)]["sentences_per_second"] / base,
                  table[("ours --xla", cell)]["sentences_per_second"] / base)
        summary[cell] = ratios
        print(row + f"   {ratios[0]:12.2f}  {ratios[1]:13.2f}")

    print("\noutputs (best-setting run of each cell): identical sentences vs ct2 float32, BLEU vs reference")
    for mode, batch in CELLS:
        cell = f"{mode} {batch}"
        ct2 = table[("ct2 float32", cell)]["outputs"]
        parts = []
        for name in names:
            outputs = table[(name, cell)]["outputs"]
            same = sum(a == b for a, b in zip(outputs, ct2)) / len(ct2)
            bleu = score_corpus(outputs, references).bleu
            parts.append(f"{name}: {100 * same:.1f}% / BLEU {bleu:.2f}")
        print(f"  {cell:9s} " + "; ".join(parts))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump({"systems": systems, "table": {f"{n} | {c}": v for (n, c), v in table.items()},
                       "ratios": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
