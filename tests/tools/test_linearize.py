"""configs/linearize with the standard tools: the toy Stage I and Stage II
configs train with ``tools/train.py`` (Stage II from Stage I's checkpoint), the
student loads into a UPerNet through ``init_cfg=Pretrained``, and (slow) Stage
I's loss falls (InfiniteVL Sec. 3.3, Eq. 3)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.hooks import Hook
from mmengine.registry import DefaultScope

import mmhybrid  # noqa: F401
from mmhybrid.models.utils import load_pretrained
from mmhybrid.registry import build_model
from tools._common import build_runner, load_config
from tools.analysis import linearize_errors as tool

ROOT = Path(__file__).resolve().parents[2]
STAGE1 = ROOT / 'configs/linearize/sola-s_swin-t_toy_stage1.py'
STAGE2 = ROOT / 'configs/linearize/sola-s_swin-t_toy_stage2.py'


def _train(config, work_dir, toy_data, *options):
    cmd = [sys.executable, str(ROOT / 'tools/train.py'), str(config), '--work-dir',
           str(work_dir), '--cfg-options', f'data_root={toy_data["imagenet"]}/train',
           'train_cfg.max_iters=2', 'default_hooks.checkpoint.interval=2',
           'train_dataloader.batch_size=4', 'train_dataloader.num_workers=0',
           'train_dataloader.persistent_workers=False', *options]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=str(ROOT),
                                     OMP_NUM_THREADS='1'))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.fixture(scope='module')
def stages(toy_data, tmp_path_factory):
    """Work dirs and logs of the toy Stage I, then Stage II from its checkpoint."""
    root = tmp_path_factory.mktemp('linearize')
    log1 = _train(STAGE1, root / 'stage1', toy_data)
    first = root / 'stage1' / 'iter_2.pth'
    log2 = _train(STAGE2, root / 'stage2', toy_data, f'load_from={first}')
    return root, log1, log2


def _state(path):
    return torch.load(path, map_location='cpu', weights_only=True)['state_dict']


def test_toy_stage1_trains_layerwise(stages):
    root, log, _ = stages
    assert 'Iter(train) [2/2]' in log and 'loss_layer4_2:' in log
    state = _state(root / 'stage1' / 'iter_2.pth')
    assert any(k.startswith('teacher.') for k in state)
    assert any(k.startswith('backbone.') for k in state)


def test_toy_stage2_starts_from_stage1(stages):
    root, _, log = stages
    assert f'Load checkpoint from {root / "stage1" / "iter_2.pth"}' in log
    # everything but the classifiers (which Stage I has not) came from Stage I
    assert ('missing keys in source state_dict: teacher_head.weight, '
            'teacher_head.bias, head.weight, head.bias\n') in log
    assert 'Iter(train) [2/2]' in log and 'loss_logits:' in log
    first, second = (_state(root / s / 'iter_2.pth') for s in ('stage1', 'stage2'))
    key = 'backbone.stages.0.0.norm1.weight'  # frozen in Stage I
    assert not torch.equal(first[key], second[key])  # trained in Stage II
    teacher = [k for k in first if k.startswith('teacher.')]
    assert all(torch.equal(first[k], second[k]) for k in teacher)


def test_student_loads_into_upernet(stages):
    """The distilled student, ``backbone.*`` of the checkpoint, is a full load
    for an mmseg UPerNet through ``init_cfg=Pretrained``."""
    root, _, _ = stages
    checkpoint = str(root / 'stage2' / 'iter_2.pth')
    student = load_config(str(STAGE2)).model.backbone.to_dict()
    missing, unexpected = load_pretrained(build_model(student), checkpoint)
    assert missing == [] and unexpected == []  # "loaded N/N tensors"

    from mmseg.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmseg'):
        model = MODELS.build(dict(
            type='EncoderDecoder',
            data_preprocessor=dict(type='SegDataPreProcessor', size=(64, 64)),
            backbone=dict(student,
                          init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),
            decode_head=dict(type='UPerHead', in_channels=[16, 32, 64, 128],
                             in_index=[0, 1, 2, 3], channels=16, num_classes=4,
                             loss_decode=dict(type='CrossEntropyLoss'))))
    model.init_weights()
    saved = _state(checkpoint)
    own = model.backbone.state_dict()
    assert own and all(torch.equal(v, saved[f'backbone.{k}']) for k, v in own.items())


class _Losses(Hook):

    def __init__(self):
        self.values = []

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.values.append(outputs['loss'].item())


@pytest.mark.slow
def test_stage1_loss_falls(toy_data, tmp_path):
    """30 toy Stage I iterations, the tiny SoLA student inheriting a (random)
    tiny Swin teacher's weights: the mean loss of the last 5 iterations is below half that
    of the first 5."""
    cfg = load_config(str(STAGE1), {'data_root': f'{toy_data["imagenet"]}/train'},
                      str(tmp_path / 'work'))
    teacher_file = str(tmp_path / 'tiny_swin.pth')
    torch.manual_seed(1)
    torch.save(dict(state_dict=build_model(cfg.model.teacher.to_dict()).state_dict()),
               teacher_file)
    for part in (cfg.model.teacher, cfg.model.backbone):
        part.init_cfg = dict(type='Pretrained', checkpoint=teacher_file)
    cfg.train_cfg.max_iters = 30
    cfg.train_dataloader.update(batch_size=4, num_workers=0, persistent_workers=False)
    cfg.default_hooks.checkpoint = None
    cfg.log_level = 'WARNING'
    runner = build_runner(cfg)
    losses = _Losses()
    runner.register_hook(losses)
    runner.train()
    start, end = sum(losses.values[:5]) / 5, sum(losses.values[-5:]) / 5
    print(f'Stage I toy loss: first 5 iterations {start:.3e}, last 5 {end:.3e}')
    assert end < 0.5 * start


def test_linearize_errors_tool(stages, toy_data, capsys):
    root, _, _ = stages
    options = ['--images', '4', '--cfg-options',
               f'data_root={toy_data["imagenet"]}/train']
    # the tool sets the config's default scope: restored afterwards
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        before = tool.main([str(STAGE1), *options])
        after = tool.main([str(STAGE1), '--checkpoint',
                           str(root / 'stage1' / 'iter_2.pth'), *options])
    assert set(before) == set(after) == {(s, l) for s in (1, 2, 3, 4) for l in (1, 2)}
    assert before != after and all(0 < e < float('inf') for e in after.values())
    assert '| 4 | 2 | 2 |' in capsys.readouterr().out
