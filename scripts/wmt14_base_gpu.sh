#!/usr/bin/env bash
# The paper's base model on WMT14 English->German (Section 5-6, Table 3), on one or more GPUs.
# Data: TFDS wmt14_translate/de-en (built once: `tfds build wmt14_translate/de-en --data_dir DIR`),
# ~4.5M pairs. Prepare once, stream always: `prepare` trains the shared 37k vocabulary (the paper's
# BPE size; unigram here) on a seeded 1M-sentence sample, tokenizes the corpus once on all CPU cores
# and writes 32 id shards + manifest.json; `train --prepared-dir` streams them (bounded memory,
# each worker its own shards, exact resume) and re-prepares only when the sources or the vocabulary
# changed. Re-running this script after a kill resumes where it stopped.
# ~25k tokens per side per update (Section 5.1): 4+ GPUs take 25,000-token global batches; fewer
# GPUs take 6,250 tokens each and accumulate gradients (1 GPU: 4 steps, 2 GPUs: 2 steps).
# mixed_float16 with loss scaling and XLA on GPU. 100k updates is about 17 passes over the
# 4.5M pairs at this batch size; the last 5 checkpoints (every 2000 batches) are averaged.
# Then BLEU on newstest2014 (3,003 sentences; sacreBLEU, detokenized, cased).
# Several machines: run `prepare` once into a folder they all see, then the `train` line on every
# machine with its own TF_CONFIG (32 shards serve 1, 2, 4, 8, 16 or 32 workers evenly).
# Usage: scripts/wmt14_base_gpu.sh TFDS_DATA_DIR [OUTPUT_DIR] [DATA_DIR holding wmt14_newstest/]
set -euo pipefail
command -v keras-transformer >/dev/null || { echo "keras-transformer not found: activate the virtual environment (pip install -e .) first" >&2; exit 2; }
TFDS_DIR="${1:?give the TFDS data dir holding wmt14_translate/de-en}"
OUT="${2:-runs/wmt14-base}"
DATA_DIR="${3:-${KERAS_TRANSFORMER_DATA:-../shared/data}}"
PREPARED="${PREPARED_DIR:-$OUT-prepared}"
GPUS=$(python -c "import tensorflow as tf; print(max(1, len(tf.config.list_physical_devices('GPU'))))")
if [ "$GPUS" -ge 4 ]; then BATCH_TOKENS=25000; ACCUMULATE=1; else BATCH_TOKENS=$(( 6250 * GPUS )); ACCUMULATE=$(( 4 / GPUS )); fi
keras-transformer prepare --output-dir "$PREPARED" \
    --tfds wmt14_translate/de-en --tfds-data-dir "$TFDS_DIR" --source-lang en --target-lang de \
    --vocab-size 37000 --vocab-sample-size 1000000 --max-length 256 --num-shards 32
keras-transformer train --model-dir "$OUT" --prepared-dir "$PREPARED" \
    --preset base --batch-tokens "$BATCH_TOKENS" \
    --gradient-accumulation-steps "$ACCUMULATE" --precision mixed_float16 --jit-compile \
    --epochs 17 --save-freq 2000 --average-last 5
keras-transformer evaluate --model-dir "$OUT" --beam-size 4 \
    --source "$DATA_DIR/wmt14_newstest/newstest2014.en" --reference "$DATA_DIR/wmt14_newstest/newstest2014.de" \
    --output "$OUT/newstest2014.hyp.de"
