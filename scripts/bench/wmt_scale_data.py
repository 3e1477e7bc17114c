"""Benchmark of "prepare once, stream always" at WMT14's size (issue 14).

1. Builds a parallel corpus of ``--pairs`` pairs (default 4.5M, WMT14 en-de's
   size) with WMT-like lengths, reproducibly (``--seed``), from the real
   sentences in the data folder: aligned segments of Multi30k (en-de, all
   splits), newstest2014 (en-de) and Tatoeba (en-es) are concatenated, 2 or
   more per pair, until the English side reaches a length drawn from a
   log-normal distribution (like WMT14's training data: mean about 27
   words, a long tail past 100), so pairs are
   recombined, not copies of each other (the number of duplicates is
   printed). The target side mixes German and Spanish: the benchmark measures
   data handling, not translation quality. Prints the files' sizes.
2. ``keras-transformer prepare`` on it (``--cores`` CPUs, pinned; the shared
   37,000-piece vocabulary of the WMT recipe on a 1M-sentence sample,
   ``max_length`` 256, 32 shards): wall time and peak RSS (the sum over the
   process and its tokenizing processes, sampled every 0.2 s, and the largest
   single process as the kernel counts it).
3. ``keras-transformer train --prepared-dir`` with the ``base`` preset: time
   from the start of the command to the first training step, and the peak
   RSS over ``--rss-steps`` steps, at each corpus size of ``--rss-pairs``
   (the smaller ones prepared from the first N pairs with the same
   vocabulary). Then the same ``train`` without a prepared folder (the data
   read, the vocabulary trained and the ids tokenized in memory): time to the
   first step and peak RSS, stopped after ``--in-memory-timeout`` seconds or
   above ``--in-memory-max-rss-gb``.
4. In this process: real (non-padding) source + target tokens/s delivered by
   the streaming pipeline from the shards, against the tokens/s the ``base``
   preset's training step consumes on the same batches (the precision
   ``train`` picks, XLA as ``train`` on this device). Target: >= 10x.

Targets (issue 14): prepare < 15 min on 2 cores, first step < 60 s with a
prepared folder, training RSS < 3 GB and not growing with the corpus.

Usage (from the repository root, with the venv; see README "WMT scale")::

    KERAS_TRANSFORMER_DATA=../shared/data python scripts/bench/wmt_scale_data.py --pairs 4500000 \\
        --work-dir /tmp/wmt-scale
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, REPO)

GB = 1024**3


# ----------------------------------------------------------------------------- corpus


def _lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def load_segments(data_dir: str) -> tuple[list[str], list[str], dict[str, int]]:
    """Aligned real sentence pairs: Multi30k (en-de), newstest2014 (en-de), Tatoeba (en-es)."""
    sources, targets, counts = [], [], {}
    for split in ("train", "val", "test2016"):
        en, de = _lines(f"{data_dir}/multi30k/{split}.en"), _lines(f"{data_dir}/multi30k/{split}.de")
        sources += en
        targets += de
    counts["multi30k"] = len(sources)
    en, de = _lines(f"{data_dir}/wmt14_newstest/newstest2014.en"), _lines(f"{data_dir}/wmt14_newstest/newstest2014.de")
    sources += en
    targets += de
    counts["newstest2014"] = len(en)
    tatoeba = 0
    for line in _lines(f"{data_dir}/tatoeba_spa_eng/spa.txt"):
        fields = line.split("\t")
        if len(fields) >= 2 and fields[0].strip() and fields[1].strip():
            sources.append(fields[0].strip())
            targets.append(fields[1].strip())
            tatoeba += 1
    counts["tatoeba"] = tatoeba
    keep = [i for i, (a, b) in enumerate(zip(sources, targets)) if a.strip() and b.strip()]
    return [sources[i].strip() for i in keep], [targets[i].strip() for i in keep], counts


def build_corpus(data_dir: str, out_dir: str, pairs: int, seed: int, median_words: float, sigma: float) -> dict:
    """Writes ``train.en`` / ``train.de`` of ``pairs`` recombined pairs; returns what it built."""
    start = time.perf_counter()
    sources, targets, counts = load_segments(data_dir)
    words = np.array([len(s.split()) for s in sources], np.int64)
    rng = np.random.default_rng(seed)
    os.makedirs(out_dir, exist_ok=True)
    src_path, tgt_path = os.path.join(out_dir, "train.en"), os.path.join(out_dir, "train.de")
    hashes = np.empty([pairs], np.uint64)
    lengths = np.empty([pairs], np.int32)
    draws = 24  # segments drawn per pair; a pair uses the first k >= 2 that reach its length
    done = 0
    with open(src_path, "w", encoding="utf-8") as fs, open(tgt_path, "w", encoding="utf-8") as ft:
        while done < pairs:
            n = min(100_000, pairs - done)
            want = np.clip(np.round(rng.lognormal(np.log(median_words), sigma, n)), 3, 200).astype(np.int64)
            picks = rng.integers(0, len(sources), (n, draws))
            reach = np.cumsum(words[picks], axis=1) >= want[:, None]
            k = np.where(reach.any(axis=1), reach.argmax(axis=1) + 1, draws)
            k = np.maximum(k, 2)
            src_block, tgt_block = [], []
            for row, count in zip(picks.tolist(), k.tolist()):
                segments = row[:count]
                src_block.append(" ".join(sources[i] for i in segments))
                tgt_block.append(" ".join(targets[i] for i in segments))
            for i, (a, b) in enumerate(zip(src_block, tgt_block)):
                digest = hashlib.blake2b(f"{a}\t{b}".encode(), digest_size=8).digest()
                hashes[done + i] = int.from_bytes(digest, "little")
                lengths[done + i] = a.count(" ") + 1
            fs.write("\n".join(src_block) + "\n")
            ft.write("\n".join(tgt_block) + "\n")
            done += n
    distinct = int(np.unique(hashes).size)
    info = {
        "pairs": pairs, "segments": counts, "distinct_pairs": distinct, "duplicates": pairs - distinct,
        "source_words": {"mean": float(lengths.mean()), "median": float(np.median(lengths)),
                         "p99": float(np.percentile(lengths, 99)), "max": int(lengths.max())},
        "files": {p: os.path.getsize(p) for p in (src_path, tgt_path)},
        "seconds": time.perf_counter() - start,
    }
    return info


# ----------------------------------------------------------------------------- processes


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Run:
    """A subprocess whose process tree's RSS is sampled, and whose stdout lines are timestamped."""

    def __init__(self, command: list[str], cores: int | None = None, log_path: str | None = None):
        def pin():
            if cores:
                os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])

        self.start = time.perf_counter()
        self.proc = subprocess.Popen(list(map(str, command)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     preexec_fn=pin, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.peak_tree = 0
        self.lines: list[tuple[float, str]] = []
        self.log = open(log_path, "w") if log_path else None
        self._stop = False
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _sample(self):
        while not self._stop and self.proc.poll() is None:
            tree, total, stack = _children(), 0, [self.proc.pid]
            while stack:
                pid = stack.pop()
                total += _rss(pid)
                stack += tree.get(pid, [])
            self.peak_tree = max(self.peak_tree, total)
            time.sleep(0.2)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.perf_counter() - self.start, line.rstrip("\n")))
            if self.log:
                self.log.write(line)
                self.log.flush()

    def wait_for(self, pattern: str, timeout: float, max_rss: float | None = None) -> float | None:
        """Seconds from the start to the first output line matching ``pattern`` (None: exited, timed out, too big)."""
        regex = re.compile(pattern)
        seen = 0
        while time.perf_counter() - self.start < timeout:
            for at, line in self.lines[seen:]:
                if regex.search(line):
                    return at
            seen = len(self.lines)
            if self.proc.poll() is not None:
                self._reader.join(5)
                for at, line in self.lines[seen:]:
                    if regex.search(line):
                        return at
                return None
            if max_rss is not None and self.peak_tree > max_rss:
                return None
            time.sleep(0.1)
        return None

    def stop(self) -> None:
        """Kills the process (we started it) and its children."""
        if self.proc.poll() is None:
            tree, stack, pids = _children(), [self.proc.pid], []
            while stack:
                pid = stack.pop()
                pids.append(pid)
                stack += tree.get(pid, [])
            for pid in reversed(pids):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc.wait()
        self._stop = True
        self._reader.join(5)
        if self.log:
            self.log.close()

    def finish(self, timeout: float) -> int:
        """Waits for the process to exit; returns its status."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
        self._stop = True
        self._reader.join(5)
        if self.log:
            self.log.close()
        return self.proc.returncode

    def tail(self, n: int = 15) -> str:
        return "\n".join(line for _, line in self.lines[-n:])


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "keras_transformer.cli", *map(str, args)]


def _gb(n: float) -> str:
    return f"{n / GB:.2f} GB"


# ----------------------------------------------------------------------------- measurements


def prepare(corpus_dir, prepared_dir, args, limit=None, vocab=None, log_path=None) -> dict:
    command = _cli("prepare", "--output-dir", prepared_dir, "--train-source", f"{corpus_dir}/train.en",
                   "--train-target", f"{corpus_dir}/train.de", "--max-length", args.max_length,
                   "--num-shards", args.num_shards, "--processes", args.cores)
    command += ["--vocab", vocab] if vocab else ["--vocab-size", args.vocab_size,
                                                 "--vocab-sample-size", args.vocab_sample_size]
    if limit:
        command += ["--limit-train", str(limit)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    run = Run(command, cores=args.cores, log_path=log_path)
    status = run.finish(timeout=args.prepare_timeout)
    if status != 0:
        raise SystemExit(f"prepare failed ({status}):\n{run.tail()}")
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    with open(os.path.join(prepared_dir, "manifest.json")) as f:
        manifest = json.load(f)
    train = manifest["splits"]["train"]
    vocab_line = next((line for _, line in run.lines if "vocabulary trained in" in line), "")
    return {
        "seconds": time.perf_counter() - run.start,
        "peak_rss_tree": run.peak_tree,
        "largest_process_rss": largest if largest > before * 1024 else None,
        "pairs": sum(s["pairs"] for s in train["shards"]),
        "lengths": train["lengths"],
        "shard_bytes": sum(s["bytes"] for s in train["shards"]),
        "vocab_seconds": float(vocab_line.split("trained in ")[1].split(" s")[0]) if vocab_line else None,
        "tokenize_seconds": train.get("seconds"),
    }


def train_run(args, model_dir, data_flags, steps, timeout, max_rss=None, log_path=None) -> dict:
    shutil.rmtree(model_dir, ignore_errors=True)
    command = _cli("train", "--model-dir", model_dir, *data_flags, "--preset", "base", "--batch-tokens",
                   args.train_batch_tokens, "--max-length", args.max_length, "--epochs", 1, "--log-every", 1,
                   "--seed", args.seed)
    run = Run(command, log_path=log_path)
    first = run.wait_for(r"^epoch 1, step 1\b", timeout=timeout, max_rss=max_rss)
    result = {"first_step_seconds": first}
    if first is not None and steps > 1:
        result["last_step_seconds"] = run.wait_for(rf"^epoch 1, step {steps}\b", timeout=first + args.rss_timeout)
    over = max_rss is not None and run.peak_tree > max_rss
    exited = run.proc.poll()
    run.stop()
    result.update(peak_rss_tree=run.peak_tree, stopped_over_rss=over, exited=exited,
                  tail=run.tail(8) if first is None else "")
    return result


_STREAM_ONLY = """
import sys, time
from keras_transformer.data.prepared import open_prepared
from keras_transformer.data.streaming import make_streaming_batches
corpus = open_prepared(sys.argv[1])
batches = make_streaming_batches(corpus, batch_tokens=int(sys.argv[2]), seed=0)
start, n = time.perf_counter(), 0
for _ in batches.dataset(0, 1):
    n += 1
    if n == 1:
        print("first batch", flush=True)
    if time.perf_counter() - start > float(sys.argv[3]):
        break
print(f"streamed {n} batches", flush=True)
"""


def stream_only_rss(prepared_dir, args, seconds: float) -> dict:
    """Peak RSS of a process that only streams training batches from ``prepared_dir`` (no model): the data path's memory."""
    run = Run([sys.executable, "-c", _STREAM_ONLY, prepared_dir, args.train_batch_tokens, seconds])
    done = run.wait_for(r"^streamed \d+ batches", timeout=seconds + 300)
    streamed = next((line for _, line in run.lines if line.startswith("streamed")), "")
    run.stop()
    return {"peak_rss_tree": run.peak_tree, "finished": done is not None, "streamed": streamed}


def pipeline_vs_training(prepared_dir, args) -> dict:
    import tensorflow as tf

    from keras_transformer.config import get_preset
    from keras_transformer.data.prepared import open_prepared
    from keras_transformer.data.streaming import make_streaming_batches
    from keras_transformer import training

    corpus = open_prepared(prepared_dir)
    out = {}
    for tokens in sorted({args.train_batch_tokens, args.pipeline_batch_tokens}):
        batches = make_streaming_batches(corpus, batch_tokens=tokens, seed=args.seed)
        counted = batches.dataset(0, 1).map(
            lambda x, y: (tf.math.count_nonzero(x[0], dtype=tf.int64) + tf.math.count_nonzero(y, dtype=tf.int64),
                          tf.size(x[0], tf.int64) + tf.size(y, tf.int64)))
        real = slots = n = 0
        start = time.perf_counter()
        for r, s in counted:
            real, slots, n = real + int(r), slots + int(s), n + 1
            if time.perf_counter() - start > args.pipeline_seconds:
                break
        seconds = time.perf_counter() - start
        out[tokens] = {"batches": n, "of": batches.steps_per_epoch, "seconds": seconds,
                       "tokens_per_second": real / seconds, "padding": 1 - real / slots}

    precision, why = training.set_precision("auto")
    config = get_preset("base", vocab_size=corpus.manifest["vocabulary"]["vocab_size"],
                        batch_tokens=args.train_batch_tokens, max_length=corpus.max_length)
    jit = training.default_jit_compile()
    model = training.build_model(config)
    training.compile_model(model, config, jit_compile=jit)
    warm, timed = 2, args.train_steps
    data = []
    for (source, target_in), target_out in make_streaming_batches(
            corpus, batch_tokens=args.train_batch_tokens, seed=args.seed + 1).dataset(0, 1).take(warm + timed):
        data.append(((source.numpy(), target_in.numpy()), target_out.numpy()))
    import _common

    _common.timed_fit(model, data[:warm], warm=0)  # traces once
    run = _common.timed_fit(model, data, warm=warm)
    real = _common.real_tokens(data[warm:], "both")
    out["train"] = {"steps": run["steps"], "seconds": run["seconds"], "tokens_per_second": real / run["seconds"],
                    "precision": precision, "jit_compile": jit}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4_500_000, help="corpus size in pairs (default 4500000)")
    parser.add_argument("--data-dir", default=os.environ.get("KERAS_TRANSFORMER_DATA", "../shared/data"),
                        help="folder holding multi30k/, tatoeba_spa_eng/, wmt14_newstest/ "
                        "(default: $KERAS_TRANSFORMER_DATA)")
    parser.add_argument("--work-dir", default="/tmp/wmt-scale",
                        help="where the corpus, prepared folders and runs go (default /tmp/wmt-scale; reused)")
    parser.add_argument("--seed", type=int, default=0, help="corpus, shuffle and model seed (default 0)")
    parser.add_argument("--median-words", type=float, default=18.0,
                        help="median of the drawn English lengths in words (default 18; whole segments overshoot "
                        "it: the corpus' median is about 23, its mean about 27, as WMT14's)")
    parser.add_argument("--sigma", type=float, default=0.65, help="log-normal sigma of the lengths (default 0.65)")
    parser.add_argument("--cores", type=int, default=2, help="CPUs prepare is pinned to and its processes (default 2)")
    parser.add_argument("--vocab-size", type=int, default=37000, help="shared vocabulary (default 37000, the paper's)")
    parser.add_argument("--vocab-sample-size", type=int, default=1_000_000,
                        help="sentences the vocabulary is trained on (default 1000000)")
    parser.add_argument("--max-length", type=int, default=256, help="max_length of prepare and train (default 256)")
    parser.add_argument("--num-shards", type=int, default=32, help="shards (default 32)")
    parser.add_argument("--rss-pairs", default="1000000",
                        help="comma-separated smaller corpus sizes to train on too, besides --pairs (default 1000000; "
                        "sizes >= --pairs are skipped)")
    parser.add_argument("--rss-steps", type=int, default=20, help="training steps RSS is sampled over (default 20)")
    parser.add_argument("--rss-timeout", type=float, default=900,
                        help="seconds allowed for those steps after the first (default 900)")
    parser.add_argument("--first-step-timeout", type=float, default=600,
                        help="seconds allowed to the first step with a prepared folder (default 600)")
    parser.add_argument("--train-batch-tokens", type=int, default=4096,
                        help="tokens per batch of the base training runs (default 4096: a base step at 25,000 "
                        "tokens takes minutes on a CPU)")
    parser.add_argument("--pipeline-batch-tokens", type=int, default=25000,
                        help="the pipeline is also timed at this batch size (default 25000, the paper's)")
    parser.add_argument("--pipeline-seconds", type=float, default=60, help="pipeline timing budget (default 60)")
    parser.add_argument("--train-steps", type=int, default=5, help="timed base training steps (default 5)")
    parser.add_argument("--skip-in-memory", action="store_true", help="skip the train run without a prepared folder")
    parser.add_argument("--in-memory-timeout", type=float, default=1800,
                        help="seconds allowed to the first step without a prepared folder (default 1800)")
    parser.add_argument("--in-memory-max-rss-gb", type=float, default=12,
                        help="stop the in-memory run above this RSS (default 12)")
    parser.add_argument("--prepare-timeout", type=float, default=7200, help="seconds allowed to prepare (default 7200)")
    args = parser.parse_args(argv)

    work = os.path.abspath(args.work_dir)
    os.makedirs(work, exist_ok=True)
    corpus_dir = os.path.join(work, f"corpus-{args.pairs}-seed{args.seed}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; work dir {work}", flush=True)

    # 1. The corpus.
    info_path = os.path.join(corpus_dir, "info.json")
    if os.path.isfile(info_path):
        with open(info_path) as f:
            info = json.load(f)
        print(f"corpus: reusing {corpus_dir}", flush=True)
    else:
        info = build_corpus(args.data_dir, corpus_dir, args.pairs, args.seed, args.median_words, args.sigma)
        with open(info_path, "w") as f:
            json.dump(info, f, indent=1)
    words = info["source_words"]
    print(f"corpus: {info['pairs']:,} pairs from {info['segments']} real segment pairs, "
          f"{info['distinct_pairs']:,} distinct ({info['duplicates']:,} duplicates); English words per pair: mean "
          f"{words['mean']:.1f}, median {words['median']:.0f}, 99th percentile {words['p99']:.0f}, max {words['max']}; "
          + ", ".join(f"{os.path.basename(p)} {n / 1e6:,.1f} MB" for p, n in info["files"].items())
          + f" (built in {info['seconds']:.0f} s)", flush=True)

    # 2. prepare.
    prepared = os.path.join(work, f"prepared-{args.pairs}")
    shutil.rmtree(prepared, ignore_errors=True)
    result = prepare(corpus_dir, prepared, args, log_path=os.path.join(work, "prepare.log"))
    lengths = result["lengths"]
    print(f"prepare ({args.cores} cores, vocab {args.vocab_size} on <= {args.vocab_sample_size:,} sentences, "
          f"max_length {args.max_length}, {args.num_shards} shards): {result['seconds'] / 60:.1f} min "
          f"(vocabulary {result['vocab_seconds']} s); peak RSS {_gb(result['peak_rss_tree'])} (all processes), "
          f"largest process {_gb(result['largest_process_rss'] or 0)}; {result['pairs']:,} pairs kept, "
          f"{lengths['dropped']:,} dropped; {lengths['source_tokens']:,} + {lengths['target_tokens']:,} tokens; "
          f"shards {result['shard_bytes'] / 1e6:,.0f} MB [target < 15 min]", flush=True)
    again = Run(_cli("prepare", "--output-dir", prepared, "--train-source", f"{corpus_dir}/train.en",
                     "--train-target", f"{corpus_dir}/train.de", "--max-length", args.max_length))
    again.finish(timeout=600)
    reused = any("reusing the prepared data" in line for _, line in again.lines)
    print(f"prepare again, same sources: {time.perf_counter() - again.start:.1f} s "
          f"({'reused' if reused else 'NOT reused'}: fingerprints only)", flush=True)

    # 3. train: first step and RSS at each size; then without a prepared folder.
    sizes = sorted({int(n) for n in args.rss_pairs.split(",") if n.strip() and int(n) < args.pairs})
    spm_model = os.path.join(prepared, "spm.model")
    for size in sizes + [args.pairs]:
        folder = prepared
        if size != args.pairs:
            folder = os.path.join(work, f"prepared-{size}")
            shutil.rmtree(folder, ignore_errors=True)
            prepare(corpus_dir, folder, args, limit=size, vocab=spm_model)
        run = train_run(args, os.path.join(work, f"train-{size}"), ["--prepared-dir", folder], args.rss_steps,
                        args.first_step_timeout, log_path=os.path.join(work, f"train-{size}.log"))
        if run["first_step_seconds"] is None:
            print(f"train --prepared-dir at {size:,} pairs: no first step\n{run['tail']}", flush=True)
            continue
        data = stream_only_rss(folder, args, seconds=60)
        print(f"streaming alone (no model) at {size:,} pairs, {args.train_batch_tokens} tokens/batch: "
              f"{data['streamed'] or 'no batch'} in 60 s, peak RSS {_gb(data['peak_rss_tree'])} (the data path's "
              "own memory, TensorFlow included)", flush=True)
        steps = f"{args.rss_steps} steps" if run.get("last_step_seconds") else "fewer steps (timeout)"
        print(f"train --prepared-dir at {size:,} pairs (base, {args.train_batch_tokens} tokens/batch): first step "
              f"{run['first_step_seconds']:.1f} s after the start [target < 60 s]; peak RSS over {steps} "
              f"{_gb(run['peak_rss_tree'])} [target < 3 GB, flat in the corpus size]", flush=True)
    logits = args.train_batch_tokens * args.vocab_size * 4
    print(f"(the base step's own memory: one float32 copy of its [{args.train_batch_tokens} tokens, "
          f"{args.vocab_size}] logits is {_gb(logits)}, and the step holds several: logits, softmax, their "
          "gradients, bfloat16 casts; weights + Adam moments about 0.8 GB)", flush=True)
    if not args.skip_in_memory:
        run = train_run(args, os.path.join(work, "train-in-memory"),
                        ["--train-source", f"{corpus_dir}/train.en", "--train-target", f"{corpus_dir}/train.de",
                         "--vocab-size", args.vocab_size], 1, args.in_memory_timeout,
                        max_rss=args.in_memory_max_rss_gb * GB, log_path=os.path.join(work, "train-in-memory.log"))
        if run["first_step_seconds"] is not None:
            what = f"first step {run['first_step_seconds']:.1f} s after the start"
        elif run["stopped_over_rss"]:
            what = f"stopped above {args.in_memory_max_rss_gb} GB before its first step"
        elif run["exited"] is not None:
            what = f"exited ({run['exited']}) before its first step:\n{run['tail']}"
        else:
            what = f"no first step within {args.in_memory_timeout:.0f} s"
        print(f"train without a prepared folder at {args.pairs:,} pairs (reads, trains the vocabulary on all "
              f"sentences and tokenizes in memory): {what}; peak RSS {_gb(run['peak_rss_tree'])}", flush=True)

    # 4. Input pipeline from the shards vs the base training step.
    speed = pipeline_vs_training(prepared, args)
    for tokens, r in speed.items():
        if tokens != "train":
            print(f"streaming pipeline, batches of <= {tokens:,} tokens: {r['batches']} of {r['of']} batches in "
                  f"{r['seconds']:.1f} s = {r['tokens_per_second']:,.0f} real tokens/s; padding {r['padding']:.1%}",
                  flush=True)
    train = speed["train"]
    pipe = speed[args.train_batch_tokens]["tokens_per_second"]
    print(f"training step of the 'base' preset ({train['precision']}, XLA {'on' if train['jit_compile'] else 'off'}, "
          f"{args.train_batch_tokens} tokens/batch): {train['steps']} steps in {train['seconds']:.1f} s = "
          f"{train['tokens_per_second']:,.0f} real tokens/s", flush=True)
    print(f"pipeline tokens/s / training tokens/s: {pipe / train['tokens_per_second']:,.0f}x (target >= 10)",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
