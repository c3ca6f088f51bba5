#!/usr/bin/env bash
# Create (or reuse) .venv/ with torch, mmengine, mmcv with compiled ops (built once
# from the sdist, cached outside the repository), mmseg, mmdet, mmpretrain, diffusers
# and mmhybrid (with tools/) in editable mode; a no-op once done. Knobs: PYTHON (default
# python3.11, else python3), MMHYBRID_VENV (.venv), MMHYBRID_TORCH (torch pip specs;
# a base interpreter that has torch and torchvision lends them to the venv),
# MMHYBRID_CACHE (where the mmcv wheel is kept, ~/.cache/mmhybrid).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MMHYBRID_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
TORCH_SPECS=${MMHYBRID_TORCH:-"torch==2.14.1 torchvision==0.29.1"}
CACHE=${MMHYBRID_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mmhybrid}
MMCV_VERSION=2.1.0
STACK=(
  "mmengine==0.10.7" "mmsegmentation==1.2.2" "mmdet==3.3.0" "mmpretrain==1.2.0"
  # runtime imports the MM wheels do not declare
  "setuptools<82" "ftfy" "regex" "opencv-python<5"
)
log() { printf '[setup] %s\n' "$*"; }

# skip everything when this script and setup.py have not changed
stamp_key=$(cat "$0" "$ROOT/setup.py" | sha1sum | cut -c1-16)
STAMP="$VENV/.mmhybrid-setup-$stamp_key"
if [[ -f "$STAMP" ]]; then
  log "environment up to date ($VENV)"
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  venv_flags=()
  if "$PYTHON" -c 'import torch, torchvision' 2>/dev/null; then
    log "base interpreter already has torch: the venv will reuse it"
    venv_flags+=(--system-site-packages)
  fi
  log "creating $VENV with $PYTHON"
  "$PYTHON" -m venv "${venv_flags[@]}" "$VENV"
fi
VPY="$VENV/bin/python"
PIP=("$VPY" -m pip install -qq --disable-pip-version-check)

if ! "$VPY" -c 'import torch, torchvision' 2>/dev/null; then
  log "installing $TORCH_SPECS"
  # shellcheck disable=SC2086
  "${PIP[@]}" $TORCH_SPECS
fi
"${PIP[@]}" "setuptools<82" wheel ninja numpy psutil

# mmcv with compiled ops: one wheel per (mmcv, torch, CUDA, Python), cached.
if ! "$VPY" -c 'import mmcv, mmcv.ops' 2>/dev/null; then
  key=$("$VPY" -c 'import sys, torch; print(f"torch{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}".replace("+", "_"))')
  wheel_dir="$CACHE/mmcv-$MMCV_VERSION-$key"
  if ! ls "$wheel_dir"/mmcv-*.whl >/dev/null 2>&1; then
    log "building mmcv $MMCV_VERSION with ops against $key (once; ~20-30 min on 2 cores)"
    src=$(mktemp -d)
    "$VPY" -m pip download -qq --no-deps --no-binary :all: "mmcv==$MMCV_VERSION" -d "$src"
    tar -xzf "$src"/mmcv-*.tar.gz -C "$src"
    # torch >= 2.14 headers need C++20; mmcv 2.1.0 hard-codes -std=c++17.
    if "$VPY" -c 'import torch, sys; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(v < (2, 14))'; then
      sed -i 's/-std=c++17/-std=c++20/g' "$src/mmcv-$MMCV_VERSION/setup.py"
    fi
    build_env=(MMCV_WITH_OPS=1 MAX_JOBS="$(nproc)")
    "$VPY" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' && build_env+=(FORCE_CUDA=1)
    mkdir -p "$wheel_dir"
    env "${build_env[@]}" "$VPY" -m pip wheel -qq --no-build-isolation --no-deps \
      "$src/mmcv-$MMCV_VERSION" -w "$src/wheel"
    mv "$src"/wheel/mmcv-*.whl "$wheel_dir/"
    rm -rf "$src"
  fi
  log "installing cached $(ls "$wheel_dir"/mmcv-*.whl)"
  "${PIP[@]}" --no-deps "$wheel_dir"/mmcv-*.whl
  "${PIP[@]}" addict yapf
fi

log "installing the OpenMMLab stack and mmhybrid"
"${PIP[@]}" "${STACK[@]}"
"${PIP[@]}" -e "$ROOT[tests,sd]"
# transformers >= 5 breaks mmpretrain 1.2.0's multimodal models, which mmseg and mmdet
# import (docs/stable_diffusion.md). Venvs set up before 2026-11-28 got it with the sd
# extra, and an interpreter-start hook that hid the break: remove both.
site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -f "$site/mmhybrid-startup.pth"
if "$VPY" -c 'import sys; from importlib.metadata import version
sys.exit(int(version("transformers").split(".")[0]) < 5)' 2>/dev/null; then
  log "removing transformers >= 5 (it breaks mmpretrain 1.2.0; see docs/stable_diffusion.md)"
  "$VPY" -m pip uninstall -qq -y transformers
fi
"$VPY" -c 'from mmseg.utils import register_all_modules; register_all_modules()'
"$VPY" -c 'import mmcv.ops, mmengine, mmseg, mmdet, mmpretrain, mmhybrid' >/dev/null
(cd / && "$VPY" -c 'import tools._common')  # the installed tools, from anywhere
rm -f "$VENV"/.mmhybrid-setup-*
touch "$STAMP"
log "ready: $VENV"
