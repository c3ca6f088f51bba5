"""A user's own checkpoint from a config inheriting mmseg's bases, which keep
mmengine's ``CheckpointHook``: two iterations with the real Runner on the toy
ADE20K write ``iter_2.pth``, a full pickle (``HistoryBuffer`` ...) that torch's
weights-only default refuses. Named ``trusted://PATH`` it exports
(``tools/deploy/export.py``) and loads through ``mmseg.apis.init_model`` in a fresh
interpreter, ``init_cfg`` Pretrained and ``visualize_features.py``; the plain path
is refused with that one fix. ``swap_backbone`` gives such a config our hook."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from tests._toy_runner import build_toy_runner, toy_config
from tools.deploy import export
from tools.tiny_backbones import TINY_BACKBONES

ROOT = Path(__file__).resolve().parents[2]
SOLA = dict(TINY_BACKBONES['SoLAVision'], _delete_=True)
UPSTREAM = f'''
_base_ = ['mmseg::_base_/models/upernet_swin.py', 'mmseg::_base_/datasets/ade20k.py',
          'mmseg::_base_/default_runtime.py', 'mmseg::_base_/schedules/schedule_160k.py']
model = dict(data_preprocessor=dict(size=(512, 512)), backbone={SOLA!r},
             decode_head=dict(in_channels=[16, 16, 32, 32], channels=16,
                              num_classes=150),
             auxiliary_head=dict(in_channels=32, channels=16, num_classes=150))
'''


@pytest.fixture(scope='module')
def user_checkpoint(toy_data, tmp_path_factory):
    """(config, iter_2.pth) written by mmengine's CheckpointHook."""
    folder = tmp_path_factory.mktemp('user')
    config = folder / 'my_upernet.py'
    config.write_text(UPSTREAM)
    assert Config.fromfile(str(config)).default_hooks.checkpoint.type == 'CheckpointHook'
    cfg = toy_config(config, toy_data, folder / 'work_dir', iters=2, validate=False)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False,
                                        interval=2)
    build_toy_runner(cfg, iters=2).train()
    checkpoint = folder / 'work_dir' / 'iter_2.pth'
    assert 'mmengine.logging.history_buffer.HistoryBuffer' in (
        torch.serialization.get_unsafe_globals_in_checkpoint(str(checkpoint)))
    return config, checkpoint


def _state_dict(checkpoint):
    return torch.load(checkpoint, map_location='cpu', weights_only=False)['state_dict']


def test_export_takes_the_trusted_checkpoint_and_refuses_the_plain_path(
        user_checkpoint, tmp_path):
    config, checkpoint = user_checkpoint
    args = [str(config), '--part', 'segmentor', '--shape', '64', '64',
            '--check-shapes', '97', '131']
    with pytest.raises(SystemExit) as refused:
        export.main(args[:1] + [str(checkpoint)] + args[1:])
    assert str(refused.value).startswith(f'error: checkpoint {checkpoint} holds Python '
                                         'objects')
    assert f'name it trusted://{checkpoint}' in str(refused.value)
    out = tmp_path / 'seg.onnx'
    assert export.main(args[:1] + [f'trusted://{checkpoint}'] + args[1:] +
                       ['--out', str(out)]) == 0
    # the graph holds the trained weights: the same logits as mmseg's own model
    from mmseg.apis import init_model
    model = init_model(str(config), f'trusted://{checkpoint}', device='cpu')
    x = torch.randn(1, 3, 97, 131)
    with torch.no_grad():
        ref = model._forward(x)
    got, = export.onnx_runner(str(out))(x)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_init_model_in_a_fresh_interpreter(user_checkpoint):
    """What docs/training.md tells users: the checkpoint as ``trusted://PATH``; no
    import of mmhybrid beyond what building the config's model does."""
    config, checkpoint = user_checkpoint
    script = (
        'import sys, torch\n'
        'from mmseg.apis import init_model\n'
        'model = init_model(sys.argv[1], "trusted://" + sys.argv[2], device="cpu")\n'
        'saved = torch.load(sys.argv[2], weights_only=False)["state_dict"]\n'
        'own = model.state_dict()\n'
        'assert set(saved) == set(own)\n'
        'assert all(torch.equal(own[k], v) for k, v in saved.items())\n'
        'print("loaded", len(saved))\n')
    result = subprocess.run([sys.executable, '-c', script, str(config), str(checkpoint)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-2] == 'loaded'


def test_pretrained_and_visualize_features_take_it(user_checkpoint):
    from mmhybrid.models.utils import load_pretrained
    from mmhybrid.registry import build_model
    config, checkpoint = user_checkpoint
    saved = _state_dict(checkpoint)
    backbone = build_model(dict(TINY_BACKBONES['SoLAVision']))
    load_pretrained(backbone, f'trusted://{checkpoint}', strict=True)
    torch.testing.assert_close(backbone.pos_embed, saved['backbone.pos_embed'])

    from tools.analysis.visualize_features import build_backbone
    model = build_backbone(config=str(config), checkpoint=f'trusted://{checkpoint}')[0]
    torch.testing.assert_close(model.pos_embed, saved['backbone.pos_embed'])


def test_swap_backbone_puts_our_checkpoint_hook_in(tmp_path):
    from mmengine.registry import HOOKS

    from mmhybrid.engine import AtomicCheckpointHook
    from mmhybrid.utils import swap_backbone
    config = tmp_path / 'my_upernet.py'
    config.write_text(UPSTREAM)
    cfg = Config.fromfile(str(config))
    swap_backbone(cfg, TINY_BACKBONES['SwinELFATT'])
    hook = cfg.default_hooks.checkpoint
    assert (hook.type, hook.interval) == ('mmhybrid.AtomicCheckpointHook', 16000)
    assert type(HOOKS.build(hook)) is AtomicCheckpointHook  # under mmseg's _scope_
