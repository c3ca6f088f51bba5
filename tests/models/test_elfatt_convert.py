"""Official Swin / CSWin checkpoints (their public key layout) -> our backbones.

More layouts (timm, mmpretrain, mmseg, DeiT, InfSA) and the source models
themselves: tests/models/test_weight_sources.py."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.registry import DefaultScope

import mmhybrid  # noqa: F401
from mmhybrid.layers import PatchMerging
from mmhybrid.models.backbones import CSWin, SwinELFATT
from mmhybrid.models.utils import (convert_checkpoint_file, convert_cswin,
                                   convert_swin, load_pretrained)
from mmhybrid.utils import register_scope
from tools.tiny_backbones import ARCHS

ROOT = Path(__file__).resolve().parents[2]
SWIN, CSWIN = ARCHS['SwinELFATT'], ARCHS['CSWin']


def official_swin(arch, window=4, num_classes=7):
    """A random state dict in microsoft/Swin-Transformer's layout."""
    sd, C = {}, arch['embed_dims']

    def add(name, *shape):
        sd[name] = torch.randn(*shape)

    add('patch_embed.proj.weight', C, 3, 4, 4)
    for n in ('patch_embed.proj.bias', 'patch_embed.norm.weight', 'patch_embed.norm.bias'):
        add(n, C)
    for i, (depth, heads) in enumerate(zip(arch['depths'], arch['num_heads'])):
        c = C * 2**i
        for j in range(depth):
            p = f'layers.{i}.blocks.{j}.'
            for n in ('norm1', 'norm2'):
                add(p + n + '.weight', c)
                add(p + n + '.bias', c)
            add(p + 'attn.relative_position_bias_table', (2 * window - 1)**2, heads)
            sd[p + 'attn.relative_position_index'] = torch.zeros(
                window**2, window**2, dtype=torch.long)
            add(p + 'attn.qkv.weight', 3 * c, c)
            add(p + 'attn.qkv.bias', 3 * c)
            add(p + 'attn.proj.weight', c, c)
            add(p + 'attn.proj.bias', c)
            add(p + 'mlp.fc1.weight', 4 * c, c)
            add(p + 'mlp.fc1.bias', 4 * c)
            add(p + 'mlp.fc2.weight', c, 4 * c)
            add(p + 'mlp.fc2.bias', c)
            if j % 2:
                add(p + 'attn_mask', 4, window**2, window**2)
        if i < 3:
            add(f'layers.{i}.downsample.norm.weight', 4 * c)
            add(f'layers.{i}.downsample.norm.bias', 4 * c)
            add(f'layers.{i}.downsample.reduction.weight', 2 * c, 4 * c)
    add('norm.weight', C * 8)
    add('norm.bias', C * 8)
    add('head.weight', num_classes, C * 8)
    add('head.bias', num_classes)
    return sd


def official_cswin(arch, num_classes=7):
    """A random state dict in microsoft/CSWin-Transformer's layout."""
    sd, C = {}, arch['embed_dims']

    def add(name, *shape):
        sd[name] = torch.randn(*shape)

    add('stage1_conv_embed.0.weight', C, 3, 7, 7)
    for n in ('stage1_conv_embed.0.bias', 'stage1_conv_embed.2.weight',
              'stage1_conv_embed.2.bias'):
        add(n, C)
    for s, depth in enumerate(arch['depths'], 1):
        c = C * 2**(s - 1)
        for j in range(depth):
            p = f'stage{s}.{j}.'
            for n in ('norm1', 'norm2'):
                add(p + n + '.weight', c)
                add(p + n + '.bias', c)
            add(p + 'qkv.weight', 3 * c, c)
            add(p + 'qkv.bias', 3 * c)
            add(p + 'proj.weight', c, c)
            add(p + 'proj.bias', c)
            add(p + 'mlp.fc1.weight', 4 * c, c)
            add(p + 'mlp.fc1.bias', 4 * c)
            add(p + 'mlp.fc2.weight', c, 4 * c)
            add(p + 'mlp.fc2.bias', c)
            branches = 1 if s == 4 else 2
            for b in range(branches):
                add(p + f'attns.{b}.get_v.weight', c // branches, 1, 3, 3)
                add(p + f'attns.{b}.get_v.bias', c // branches)
        if s < 4:
            add(f'merge{s}.conv.weight', 2 * c, c, 3, 3)
            add(f'merge{s}.conv.bias', 2 * c)
            add(f'merge{s}.norm.weight', 2 * c)
            add(f'merge{s}.norm.bias', 2 * c)
    add('norm.weight', C * 8)
    add('norm.bias', C * 8)
    add('head.weight', num_classes, C * 8)
    add('head.bias', num_classes)
    return sd


CASES = {
    'swin': (SwinELFATT, SWIN, official_swin, convert_swin, dict(window_size=4)),
    # an ELFATT Swin takes Swin's linear merging only when asked to
    'swin-linear': (SwinELFATT, SWIN, official_swin, convert_swin,
                    dict(window_size=4, downsample='linear')),
    'cswin': (CSWin, CSWIN, official_cswin, convert_cswin, {}),
}


@pytest.mark.parametrize('name', CASES)
def test_local_variant_loads_exactly(name):
    cls, arch, official, convert, kw = CASES[name]
    model = cls(arch=arch, attn='local', out_indices=(3, ), **kw)
    converted = convert(official(arch))
    model.load_state_dict(converted, strict=True)
    with torch.no_grad():
        out = model(torch.randn(1, 3, 64, 64))[0]
    assert torch.isfinite(out).all()


@pytest.mark.parametrize('name', CASES)
def test_elfatt_variant_loads_every_matching_tensor(name, tmp_path):
    cls, arch, official, convert, kw = CASES[name]
    sd = official(arch)
    path = tmp_path / 'official.pth'
    torch.save({'model': sd}, path)
    model = cls(arch=arch, attn='elfatt', out_indices=(3, ), block_sizes=(4, 4, 16, 4),
                **kw)
    missing, unexpected = load_pretrained(model, str(path))
    converted = convert(sd)
    own = model.state_dict()
    shared = [k for k in converted if k in own and own[k].shape == converted[k].shape]
    mismatched = [k for k in converted if k in own and k not in shared]
    for k in shared:
        assert torch.equal(own[k], converted[k]), k
    if cls is SwinELFATT:  # each mixer's rule: LePE new at zero, bias table dropped
        lepe = {k for k in own if '.attn.lepe.' in k}
        assert lepe and all(not own[k].any() for k in lepe)
        conv = model.downsample == 'conv'  # merge tensors stay at their init
        assert conv == (name == 'swin') and not set(missing) & lepe
        assert all(conv and '.downsample.' in k for k in unexpected)
        assert set(missing) == ({k for k in own if k not in converted and k not in lepe}
                                | set(mismatched))
        assert all(conv and '.downsample.' in k for k in missing)
    else:  # same tensors, only the attention computation changes
        assert missing == [] and unexpected == []


def test_swin_patch_merging_order():
    """Official merge: cat(x[0::2,0::2], x[1::2,0::2], x[0::2,1::2], x[1::2,1::2])."""
    C = 3
    norm_w, norm_b, red = torch.randn(4 * C), torch.randn(4 * C), torch.randn(2 * C, 4 * C)
    x = torch.randn(2, 6, 8, C)
    cat = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2],
                     x[:, 1::2, 1::2]], dim=-1)
    expected = torch.nn.functional.layer_norm(cat, (4 * C, ), norm_w, norm_b) @ red.T
    converted = convert_swin({'layers.0.downsample.norm.weight': norm_w,
                              'layers.0.downsample.norm.bias': norm_b,
                              'layers.0.downsample.reduction.weight': red})
    merge = PatchMerging(C, 2 * C)
    merge.load_state_dict({k.split('downsample.')[1]: v for k, v in converted.items()})
    out, hw = merge(x.reshape(2, 48, C), (6, 8))
    assert hw == (3, 4)
    torch.testing.assert_close(out, expected.reshape(2, 12, 2 * C))


def test_cswin_lepe_branches_concatenate_in_order():
    sd = official_cswin(CSWIN)
    out = convert_cswin(sd)
    w = out['stages.1.blocks.1.attn.lepe.weight']
    assert torch.equal(w[:16], sd['stage2.1.attns.0.get_v.weight'])
    assert torch.equal(w[16:], sd['stage2.1.attns.1.get_v.weight'])
    assert torch.equal(out['stages.3.blocks.0.attn.lepe.bias'],
                       sd['stage4.0.attns.0.get_v.bias'])
    assert torch.equal(out['stages.0.downsample.conv.weight'], sd['merge1.conv.weight'])


def test_cli_writes_an_mmpretrain_classifier_checkpoint(tmp_path):
    register_scope('mmpretrain')
    from mmpretrain.registry import MODELS
    src, dst = tmp_path / 'swin.pth', tmp_path / 'swin_mmhybrid.pth'
    torch.save({'model': official_swin(SWIN)}, src)
    config = tmp_path / 'swin_local.py'
    config.write_text(f"model = dict(backbone=dict(type='mmhybrid.SwinELFATT', "
                      f"arch={SWIN!r}, attn='local', window_size=4))\n")
    run = subprocess.run([sys.executable, str(ROOT / 'tools/convert/convert_checkpoint.py'),
                          str(src), str(dst), '--model', str(config),
                          '--options', 'out_indices=3'],
                         capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stderr
    assert 'swin format (official Swin' in run.stdout
    assert 'SwinELFATT: loaded' in run.stdout + run.stderr
    cswin_dst = tmp_path / 'cswin_mmhybrid.pth'
    torch.save(official_cswin(CSWIN), tmp_path / 'cswin.pth')
    _, fmt = convert_checkpoint_file(tmp_path / 'cswin.pth', cswin_dst,
                                     CSWin(arch=CSWIN, attn='local'))
    assert fmt.name == 'cswin'
    for cls, arch, path, kw in ((SwinELFATT, SWIN, dst, dict(window_size=4)),
                                (CSWin, CSWIN, cswin_dst, {})):
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            classifier = MODELS.build(dict(
                type='ImageClassifier',
                backbone=dict(type=f'mmhybrid.{cls.__name__}', arch=arch,
                              attn='local', out_indices=(3, ), **kw),
                neck=dict(type='GlobalAveragePooling'),
                head=dict(type='LinearClsHead', num_classes=7, in_channels=128)))
        state = torch.load(path, weights_only=True)['state_dict']
        classifier.load_state_dict(state, strict=True)
