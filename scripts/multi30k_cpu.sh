#!/usr/bin/env bash
# Multi30k English->German on a 2-core CPU within a 60-minute training budget (issue 7 recipe).
# The `small` preset (pre-LN, d_model 256, 3+3 layers; Eq. 3 at half rate, 400 warmup steps),
# shared 8k SentencePiece vocabulary, three-way tying, label smoothing 0.1, ~2k-token buckets,
# dropout 0.3, bfloat16 compute (1.4x float32 on CPUs with AVX512_BF16/AMX:
# scripts/bench/precision.py; use float32 on CPUs without them), 57 minutes of training,
# average of the last 10 epoch checkpoints (Section 6.1), beam 4, alpha 0.6.
# Dropout 0.3 and 10 checkpoints were chosen on the validation set (README "Results").
# Usage: scripts/multi30k_cpu.sh [DATA_DIR] [OUTPUT_DIR]
set -euo pipefail
command -v keras-transformer >/dev/null || { echo "keras-transformer not found: activate the virtual environment (pip install -e .) first" >&2; exit 2; }
DATA_DIR="${1:-${KERAS_TRANSFORMER_DATA:-../shared/data}}"
OUT="${2:-runs/multi30k-cpu60}"
keras-transformer run --data-dir "$DATA_DIR" --output-dir "$OUT" \
    --preset small --dropout-rate 0.3 --precision mixed_bfloat16 \
    --epochs 100 --max-train-minutes 57 --average-last 10 \
    --beam-size 4 --num-examples 5
