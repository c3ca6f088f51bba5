#!/usr/bin/env bash
# Distributed training with torchrun: tools/dist_train.sh CONFIG GPUS [ARGS...]
# NNODES, NODE_RANK, MASTER_ADDR, PORT and PYTHON may be set in the environment.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python}" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${PORT:-29500}" \
    --nproc_per_node="$2" "$ROOT/tools/train.py" "$1" --launcher pytorch "${@:3}"
