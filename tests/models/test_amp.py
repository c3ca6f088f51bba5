"""Mixed precision: every backbone trains a few steps under CPU autocast.

bf16 everywhere; fp16 too (torch autocasts fp16 on any x86 CPU, emulated without
AVX512-FP16/AMX, with the CPU GradScaler). Inputs include images scaled x100
(large activations) and a long token sequence. Checked: outputs close to fp32,
finite losses and gradients, weights still finite after the steps.

``tools/train.py --amp`` uses mmengine's AmpOptimWrapper, which needs a GPU in
mmengine 0.10.7: on a CPU machine it stops with one clear line; on CUDA it
trains the toy config with the dynamic loss scaler (real Runner).
"""
import runpy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import mmhybrid  # noqa: F401

from tools.tiny_backbones import NAMES, build_tiny

ROOT = Path(__file__).resolve().parents[2]
INPUTS = {'plain': ((2, 3, 64, 64), 1.), 'x100': ((2, 3, 64, 64), 100.),
          'long': ((1, 3, 96, 384), 1.)}


def relative_error(a, b):
    return ((a.float() - b).norm() / b.norm()).item()


@pytest.mark.parametrize('kind', sorted(INPUTS))
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16],
                         ids=['bf16', 'fp16'])
@pytest.mark.parametrize('name', NAMES)
def test_backbone_trains_under_autocast(name, dtype, kind):
    torch.manual_seed(0)
    model = build_tiny(name).train()
    shape, scale = INPUTS[kind]
    x = torch.randn(shape) * scale
    with torch.no_grad():
        reference = model(x)
    linear_dtypes = []
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.register_forward_hook(
                lambda mod, args, out: linear_dtypes.append(out.dtype))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler('cpu', enabled=dtype == torch.float16)
    for step in range(3):
        optimizer.zero_grad()
        with torch.autocast('cpu', dtype=dtype):
            outs = model(x)
            loss = sum(F.mse_loss(o, torch.ones_like(o)) for o in outs)
        if step == 0:
            # the matmuls ran in low precision; outputs (after LayerNorm,
            # which autocast keeps in fp32 on some paths) stay close to fp32
            assert dtype in linear_dtypes
            for out, ref in zip(outs, reference):
                assert relative_error(out, ref) < 0.05
        assert torch.isfinite(loss), f'step {step}: loss {loss}'
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        for key, p in model.named_parameters():
            assert p.grad is None or torch.isfinite(p.grad).all(), key
        scaler.step(optimizer)
        scaler.update()
    assert scaler.get_scale() == (1. if dtype == torch.bfloat16 else 65536.)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def _train_main(monkeypatch, *args):
    train = runpy.run_path(str(ROOT / 'tools/train.py'), run_name='train')
    monkeypatch.setattr(sys, 'argv', ['train.py', *map(str, args)])
    return train['main']()


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the CPU refusal')
def test_train_amp_on_cpu_refuses_clearly(monkeypatch, tmp_path, toy_data):
    config = ROOT / 'configs/sola/demo/upernet_sola-t_toy-ade.py'
    with pytest.raises(SystemExit) as info:
        _train_main(monkeypatch, config, '--amp', '--work-dir', tmp_path,
                    '--cfg-options', f'data_root={toy_data["ade"]}')
    message = str(info.value)
    assert 'AmpOptimWrapper' in message and 'needs a GPU' in message
    assert 'without --amp' in message
    assert not list(tmp_path.iterdir())  # stopped before the Runner


@pytest.mark.cuda
def test_train_amp_on_cuda_uses_amp_optim_wrapper(monkeypatch, tmp_path,
                                                  toy_data):
    from mmengine.hooks import Hook
    from mmengine.runner import Runner

    seen = {}

    class Record(Hook):

        def after_train_iter(self, runner, batch_idx, data_batch=None,
                             outputs=None):
            seen['wrapper'] = runner.optim_wrapper
            seen['loss'] = outputs['loss'].item()

    build = Runner.from_cfg

    def from_cfg(cfg):
        runner = build(cfg)
        runner.register_hook(Record())
        return runner

    monkeypatch.setattr(Runner, 'from_cfg', from_cfg)
    config = ROOT / 'configs/sola/demo/upernet_sola-t_toy-ade.py'
    _train_main(monkeypatch, config, '--amp', '--work-dir', tmp_path,
                '--cfg-options', f'data_root={toy_data["ade"]}',
                'train_cfg.max_iters=2', 'train_cfg.val_interval=2',
                'train_dataloader.batch_size=2', 'train_dataloader.num_workers=0',
                'train_dataloader.persistent_workers=False',
                'val_dataloader.num_workers=0',
                'val_dataloader.persistent_workers=False')
    assert type(seen['wrapper']).__name__ == 'AmpOptimWrapper'
    assert seen['wrapper'].loss_scaler.is_enabled()
    assert torch.isfinite(torch.tensor(seen['loss']))
