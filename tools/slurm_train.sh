#!/usr/bin/env bash
# Training on a slurm cluster, one task per GPU:
#   tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [ARGS...]
# GPUS (total, default 8), GPUS_PER_NODE (8), CPUS_PER_TASK (5), SRUN_ARGS and
# PYTHON may be set in the environment; ARGS go to tools/train.py.
set -euo pipefail
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-}
PYTHON=${PYTHON:-python}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

# shellcheck disable=SC2086  # SRUN_ARGS holds several options
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
srun -p "$PARTITION" --job-name="$JOB_NAME" --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="$GPUS" --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" --kill-on-bad-exit=1 $SRUN_ARGS \
    "$PYTHON" -u "$ROOT/tools/train.py" "$CONFIG" --work-dir="$WORK_DIR" \
    --launcher slurm "${@:5}"
