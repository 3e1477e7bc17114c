#!/usr/bin/env bash
# Start TensorFlow Serving (Docker) for a keras_transformer export.
#
# Usage: serving/start_server.sh EXPORT_DIR
#   EXPORT_DIR  the model base path: the folder holding <version>/saved_model.pb
#               (e.g. runs/multi30k/export), NOT a version folder itself.
#
# Environment:
#   TF_SERVING_IMAGE  docker image (default tensorflow/serving:latest; use a
#                     version >= the TensorFlow that wrote the export)
#   REST_PORT         host port of the REST API (default 8501)
#   GRPC_PORT         host port of the gRPC API (default 8500)
#   TF_SERVING_CONTAINER    (default keras-transformer-serving)
#   DRY_RUN=1         print the docker command (one line, shell-quoted) on stdout
#                     instead of running it; the summary goes to stderr
#   TF_INTRA_OP       threads per request's ops (default 1)
#   TF_INTER_OP       requests' ops run at once (default 2 x the host's CPU cores)
#
# Threads: decoding a small Transformer runs one small op after another, which
# one core serves better than several; concurrent requests then use the cores
# (scripts/bench/decode_vs_ctranslate2.py measured 1.5-2x the sentences/s of
# TensorFlow's default of every core per request).
#
# XLA: when any version's assets.extra/export_config.json records
# "xla_compiled": true (Translator(jit_compile=True)), the server is started with
# --xla_cpu_compilation_enabled=true; without it TF Serving rejects the
# XLA-compiled search at the first request.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  sed -n '2,20p' "$0" >&2
  exit 2
fi
EXPORT_DIR="$(cd "$1" && pwd)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IMAGE="${TF_SERVING_IMAGE:-tensorflow/serving:latest}"
REST_PORT="${REST_PORT:-8501}"
GRPC_PORT="${GRPC_PORT:-8500}"
NAME="${TF_SERVING_CONTAINER:-keras-transformer-serving}"

if [[ -f "$EXPORT_DIR/saved_model.pb" ]]; then
  echo "error: $EXPORT_DIR is a version folder; pass its parent (the folder holding numeric versions)" >&2
  exit 2
fi
versions=()
for d in "$EXPORT_DIR"/*/; do
  v="$(basename "$d")"
  [[ "$v" =~ ^[0-9]+$ && -f "$d/saved_model.pb" ]] && versions+=("$v")
done
if [[ ${#versions[@]} -eq 0 ]]; then
  echo "error: no <version>/saved_model.pb under $EXPORT_DIR (run keras_transformer.export.export_saved_model)" >&2
  exit 2
fi

# The image entrypoint already passes --port=8500 --rest_api_port=8501.
CORES="$(nproc 2>/dev/null || echo 2)"
flags=(--model_config_file=/models/models.config
       --tensorflow_intra_op_parallelism="${TF_INTRA_OP:-1}"
       --tensorflow_inter_op_parallelism="${TF_INTER_OP:-$((2 * CORES))}")
for v in "${versions[@]}"; do
  config="$EXPORT_DIR/$v/assets.extra/export_config.json"
  if [[ -f "$config" ]] && grep -Eq '"xla_compiled": *true' "$config"; then
    flags+=(--xla_cpu_compilation_enabled=true)
    break
  fi
done

cmd=(docker run --rm --name "$NAME"
     -p "$REST_PORT:8501" -p "$GRPC_PORT:8500"
     -v "$EXPORT_DIR:/models/translator:ro"
     -v "$HERE/models.config:/models/models.config:ro"
     "$IMAGE" "${flags[@]}")

echo "versions: ${versions[*]}; REST http://localhost:$REST_PORT/v1/models/translator" >&2
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  printf '%q ' "${cmd[@]}"; echo
else
  if ! command -v docker >/dev/null 2>&1; then
    echo "error: docker not found; DRY_RUN=1 prints the command, or run tensorflow_model_server with: ${flags[*]}" >&2
    exit 127
  fi
  exec "${cmd[@]}"
fi
