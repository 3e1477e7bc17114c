#!/usr/bin/env bash
# Multi30k English->German on a 2-core CPU within a 60-minute training budget, the alternative to
# scripts/multi30k_cpu.sh measured for issue 25: an ensemble of two `compact` Transformers trained at
# the same time, one per core, each with the CPU recipe's settings (README "BLEU 40 on a CPU in an
# hour" says how the two compared).
#
# Each member: scripts/multi30k_cpu.sh's `run` settings (the `compact` preset: Transformer-Tiny's size,
# pre-LN, 4+4 layers, d_model 128, dff 256, 4 heads; Eq. 3 at full rate, 400 warmup steps; ~4k-token
# batches, dropout 0.2, the shared 8k SentencePiece vocabulary trained identically so both members
# share one spm.model, three-way tying, label smoothing 0.1, subword regularization with 8 samples at
# alpha 0.4, the precision the CPU runs fastest, 57 minutes of training, a checkpoint every 135
# updates and the average of the last 10 within the last 30% of the steps), seeds 0 and 1.
# Two single-core trainings at once make more updates than one two-core training (a small model's
# matrix products keep one core busy but not two): each member gets 0.62-0.70x the updates of a lone
# model (1.24-1.41x in all, measured on AMD EPYCs with AVX512_BF16 and with AVX2 only).
# The ensemble averages the members' log-probabilities at each step of beam search (beam 4,
# alpha 1.0).
#
# Writes OUTPUT_DIR/model0 and OUTPUT_DIR/model1 (two `run` folders with their logs, single-model
# scores and exports), OUTPUT_DIR/test2016.hyp.de and OUTPUT_DIR/val.hyp.de (the ensemble's
# translations), OUTPUT_DIR/ensemble_scores.txt and the ensemble's SavedModel OUTPUT_DIR/export/1.
# Re-running resumes stopped members (`run` resumes) and rescores.
# Usage: scripts/multi30k_cpu_ensemble.sh [DATA_DIR] [OUTPUT_DIR] [extra `run` flags, e.g. --max-train-minutes 19]
set -euo pipefail
command -v keras-transformer >/dev/null || { echo "keras-transformer not found: activate the virtual environment (pip install -e .) first" >&2; exit 2; }
DATA_DIR="${1:-${KERAS_TRANSFORMER_DATA:-../shared/data}}"
OUT="${2:-runs/multi30k-cpu60-ensemble}"
shift $(( $# < 2 ? $# : 2 ))
[ -f "$DATA_DIR/multi30k/test2016.en" ] || { echo "no Multi30k under $DATA_DIR (expected $DATA_DIR/multi30k/test2016.en)" >&2; exit 2; }
mkdir -p "$OUT"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

# The CPUs this process may use, split in two halves: one per member (taskset, from util-linux).
read -r -a CPUS < <(python -c 'import os; print(*sorted(os.sched_getaffinity(0)))')
HALF=$(( ${#CPUS[@]} / 2 ))
pin() {  # pin MEMBER: the taskset prefix of member 0 or 1 (none with a single CPU or no taskset)
    if [ "$HALF" -ge 1 ] && command -v taskset >/dev/null; then
        local list
        if [ "$1" = 0 ]; then list="${CPUS[*]:0:HALF}"; else list="${CPUS[*]:HALF}"; fi
        echo "taskset -c ${list// /,}"
    fi
}

pids=()
for member in 0 1; do
    echo "member $member: $(pin $member) keras-transformer run ... --seed $member; log: $OUT/model$member.log"
    $(pin $member) keras-transformer run --data-dir "$DATA_DIR" --output-dir "$OUT/model$member" \
        --preset compact --batch-tokens 4096 --dropout-rate 0.2 --precision auto --seed "$member" \
        --epochs 200 --max-train-minutes 57 --save-freq 135 --average-last 10 --average-span 0.3 \
        --subword-samples 8 --subword-alpha 0.4 --beam-size 4 --length-penalty 1.0 --num-examples 0 "$@" > "$OUT/model$member.log" 2>&1 &
    pids+=($!)
done
failed=0
for member in 0 1; do
    if ! wait "${pids[$member]}"; then
        echo "member $member failed; the end of $OUT/model$member.log:" >&2
        tail -n 20 "$OUT/model$member.log" >&2
        failed=1
    fi
done
[ "$failed" = 0 ] || exit 1
for member in 0 1; do
    python -c 'import json, sys; print("member {m} alone: {test_split} BLEU {bleu}, chrF {chrf}, lowercased tokenized {bleu_lc_tok}; {train_minutes} min of training".format(m=sys.argv[2], **json.load(open(sys.argv[1]))))' \
        "$OUT/model$member/results.json" "$member"
done

M="$OUT/model0 $OUT/model1"
{
    echo "ensemble of $M, beam 4, alpha 1.0"
    echo "== validation (val.en -> val.de, 1,014 sentences)"
    keras-transformer evaluate --model-dir $M --source "$DATA_DIR/multi30k/val.en" \
        --reference "$DATA_DIR/multi30k/val.de" --target-lang de --beam-size 4 --length-penalty 1.0 --output "$OUT/val.hyp.de"
    echo "== test2016 (1,000 sentences)"
    keras-transformer evaluate --model-dir $M --source "$DATA_DIR/multi30k/test2016.en" \
        --reference "$DATA_DIR/multi30k/test2016.de" --target-lang de --beam-size 4 --length-penalty 1.0 --output "$OUT/test2016.hyp.de"
} | tee "$OUT/ensemble_scores.txt"
keras-transformer export --model-dir $M --export-dir "$OUT/export" --beam-size 4 --length-penalty 1.0 --overwrite
