#!/usr/bin/env bash
# Multi30k English->German on a 2-core CPU within a 60-minute training budget (issue 7 recipe).
# Shared 8k SentencePiece vocabulary, three-way tying, label smoothing 0.1, ~2k-token buckets,
# Eq. 3 schedule, average of the last 5 epoch checkpoints (Section 6.1), beam 4, alpha 0.6.
# Usage: scripts/multi30k_cpu.sh [DATA_DIR] [OUTPUT_DIR]
set -euo pipefail
command -v keras-transformer >/dev/null || { echo "keras-transformer not found: activate the virtual environment (pip install -e .) first" >&2; exit 2; }
DATA_DIR="${1:-${KERAS_TRANSFORMER_DATA:-../shared/data}}"
OUT="${2:-runs/multi30k-cpu60}"
keras-transformer run --data-dir "$DATA_DIR" --output-dir "$OUT" \
    --preset small --dropout-rate 0.2 --warmup-steps 1000 \
    --epochs 100 --max-train-minutes 55 --average-last 5 \
    --beam-size 4 --num-examples 5
