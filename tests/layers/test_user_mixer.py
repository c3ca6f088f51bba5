"""A mixer written outside the package: a user's file registers it with MIXERS, a
user's config imports that file and names the mixer in three backbones' layouts,
and tools/train.py trains each for one iteration on the toy ADE20K set."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tools.tiny_backbones import tiny_backbone
from tests._tiny_toy_config import write_tiny_toy_config

ROOT = Path(__file__).resolve().parents[2]

USER_MIXER = '''
import torch.nn as nn
from mmhybrid.registry import MIXERS


@MIXERS.register_module(name='dwconv')
class DepthwiseConvMixer(nn.Module):
    letter = 'D'

    def __init__(self, dims, num_heads, kernel_size=3):
        super().__init__()
        self.conv = nn.Conv2d(dims, dims, kernel_size, padding=kernel_size // 2,
                              groups=dims)

    def forward(self, x, hw_shape, state):
        B, N, C = x.shape
        y = self.conv(x.transpose(1, 2).reshape(B, C, *hw_shape))
        return y.flatten(2).transpose(1, 2), state
'''

# backbone overrides and the channels of its four outputs
CASES = {
    'SoLAVision': (dict(mixers='LD/LD/LDSLDS/LS',
                        mixer_cfg=dict(dwconv=dict(kernel_size=5))), None),
    'SwinELFATT': (dict(_delete_=True, **tiny_backbone('SwinELFATT', mixers='D/HD/SD/D')),
                   (16, 32, 64, 128)),
    'InfViT': (dict(_delete_=True, **tiny_backbone('InfViT', mixers='DSDI')),
               (32, 32, 32, 32)),
}


@pytest.mark.parametrize('backbone', sorted(CASES))
def test_user_mixer_trains_in_any_backbone(backbone, toy_data, tmp_path):
    (tmp_path / 'my_mixers.py').write_text(USER_MIXER)
    base = write_tiny_toy_config(tmp_path, iters=1)
    overrides, channels = CASES[backbone]
    heads = '' if channels is None else textwrap.dedent(f'''
        decode_head=dict(in_channels={list(channels)!r}),
        auxiliary_head=dict(in_channels={channels[-1]}),''')
    config = tmp_path / 'user.py'
    config.write_text(
        f"_base_ = ['{base.name}']\n"
        "custom_imports = dict(imports=['mmhybrid', 'my_mixers'], "
        "allow_failed_imports=False)\n"
        f'model = dict(backbone={overrides!r},{heads})\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
               OMP_NUM_THREADS='1')
    result = subprocess.run(
        [sys.executable, str(ROOT / 'tools/train.py'), str(config), '--work-dir',
         str(tmp_path / 'work'), '--cfg-options', f'data_root={toy_data["ade"]}'],
        env=env, capture_output=True, text=True, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert 'Iter(train) [1/1]' in log and 'loss:' in log
    # the checkpoint holds the user's mixer: a depth-wise conv inside an attn
    ckpt = torch.load(tmp_path / 'work' / 'iter_1.pth', map_location='cpu',
                      weights_only=False)
    assert any(k.endswith('.attn.conv.weight') for k in ckpt['state_dict'])
