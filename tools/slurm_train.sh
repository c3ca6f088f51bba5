#!/usr/bin/env bash
# Training on a slurm cluster, one task per GPU:
#   tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [ARGS...]
# GPUS (total, default 8), GPUS_PER_NODE (8), CPUS_PER_TASK (5), SRUN_ARGS and
# PYTHON may be set in the environment; ARGS go to tools/train.py.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck disable=SC2086  # SRUN_ARGS holds several options
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
srun -p "$1" --job-name="$2" --gres=gpu:"${GPUS_PER_NODE:-8}" --ntasks="${GPUS:-8}" \
    --ntasks-per-node="${GPUS_PER_NODE:-8}" --cpus-per-task="${CPUS_PER_TASK:-5}" \
    --kill-on-bad-exit=1 ${SRUN_ARGS:-} \
    "${PYTHON:-python}" -u "$ROOT/tools/train.py" "$3" --work-dir="$4" --launcher slurm "${@:5}"
