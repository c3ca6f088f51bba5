"""Every config under configs/ builds with the real Runner and trains one step.

Each config runs on the toy dataset of its task (real ADE20K / COCO / ImageNet
layouts and dataset classes) with its input size shrunk and its architecture
kept, then validates on one image.
"""
import math
from pathlib import Path

import pytest

from tests._toy_runner import (RecordMetrics, build_toy_runner,  # noqa: F401
                         cheap_config_text, toy_config)

CONFIG_ROOT = Path(__file__).resolve().parents[2] / 'configs'
# configs/linearize trains a distiller on image folders, without validation:
# tests/tools/test_linearize.py runs its toy configs with tools/train.py
CONFIGS = sorted(p for p in CONFIG_ROOT.rglob('*.py')
                 if '_base_' not in p.relative_to(CONFIG_ROOT).parts
                 and p.relative_to(CONFIG_ROOT).parts[0] != 'linearize')


def _param(path):
    """300M-parameter InfViT-24L configs: minutes an iteration on 2 cores, slow."""
    return pytest.param(path, marks=pytest.mark.slow) if '-24l_' in path.name else path


@pytest.mark.parametrize(
    'path', [_param(p) for p in CONFIGS],
    ids=[str(p.relative_to(CONFIG_ROOT)) for p in CONFIGS])
def test_config_trains_one_iteration(path, toy_data, tmp_path):
    cfg = toy_config(path, toy_data, tmp_path)
    assert 'mmhybrid' in cfg.custom_imports['imports']
    runner = build_toy_runner(cfg)
    record = RecordMetrics()
    runner.register_hook(record)
    runner.train()
    assert runner.iter == 1
    loss = runner.message_hub.get_scalar('train/loss').current()
    assert math.isfinite(loss)
    assert isinstance(record.metrics, dict)  # validated on one image
