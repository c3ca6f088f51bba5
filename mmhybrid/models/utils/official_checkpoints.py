"""Official Swin and CSWin ImageNet checkpoints -> the layout of our backbones.

Swin (microsoft/Swin-Transformer): ``patch_embed.proj``, ``layers.{i}.blocks.{j}.
{norm1, attn.qkv, attn.proj, attn.relative_position_bias_table, norm2, mlp.fc1,
mlp.fc2}``, ``layers.{i}.downsample.{norm, reduction}``, ``norm``, ``head``.

CSWin (microsoft/CSWin-Transformer): ``stage1_conv_embed.{0,2}`` (conv, LayerNorm),
``stage{s}.{j}.{qkv, norm1, proj, norm2, mlp.fc1, mlp.fc2, attns.{0,1}.get_v}``,
``merge{s}.{conv, norm}``, ``norm``, ``head``; its segmentation backbone
(segmentation/backbone/cswin_transformer.py) has per-stage output norms
``norm{1..4}`` instead of ``norm`` (our ``norm0..3``). The two stripe branches' LePE convs
(``attns.0/1.get_v``, C/2 channels each; one C-channel conv in the last stage)
become one depth-wise conv ``attn.lepe`` over all channels, branch 0 first.
"""
import re

import torch


def _unfold_order(weight):
    """Swin's patch merging concatenates the 2x2 neighbours as [(0,0), (1,0),
    (0,1), (1,1)] blocks of C channels; mmcv's ``PatchMerging`` (nn.Unfold) orders
    channel-major with the neighbours row-major [(0,0), (0,1), (1,0), (1,1)]."""
    lead = weight.shape[:-1]
    C = weight.shape[-1] // 4
    w = weight.reshape(*lead, 4, C)[..., [0, 2, 1, 3], :]
    return w.transpose(-1, -2).reshape(*lead, 4 * C)


_SWIN_RULES = [
    (r'^patch_embed\.proj\.', 'patch_embed.projection.'),
    (r'^layers\.(\d+)\.blocks\.(\d+)\.mlp\.fc1\.', r'stages.\1.blocks.\2.ffn.layers.0.0.'),
    (r'^layers\.(\d+)\.blocks\.(\d+)\.mlp\.fc2\.', r'stages.\1.blocks.\2.ffn.layers.1.'),
    (r'^layers\.(\d+)\.', r'stages.\1.'),
    (r'^norm\.', 'norm3.'),
]
_DROP = re.compile(r'(relative_position_index|attn_mask)$|^head\.')


def convert_swin(state_dict):
    """Map an official Swin state dict to :class:`SwinELFATT` keys (head dropped)."""
    out = {}
    for key, value in state_dict.items():
        if _DROP.search(key):
            continue
        new = key
        for pattern, repl in _SWIN_RULES:
            new, n = re.subn(pattern, repl, new)
            if n:
                break
        if re.search(r'\.downsample\.(reduction\.weight|norm\.(weight|bias))$', new):
            value = _unfold_order(value)
        out[new] = value
    return out


_CSWIN_RULES = [
    (r'^stage1_conv_embed\.0\.', 'patch_embed.projection.'),
    (r'^stage1_conv_embed\.2\.', 'patch_embed.norm.'),
    (r'^stage(\d)\.(\d+)\.mlp\.fc1\.', 'stages.{s}.blocks.{j}.ffn.layers.0.0.'),
    (r'^stage(\d)\.(\d+)\.mlp\.fc2\.', 'stages.{s}.blocks.{j}.ffn.layers.1.'),
    (r'^stage(\d)\.(\d+)\.(qkv|proj)\.', 'stages.{s}.blocks.{j}.attn.{m}.'),
    (r'^stage(\d)\.(\d+)\.(norm1|norm2)\.', 'stages.{s}.blocks.{j}.{m}.'),
    (r'^merge(\d)\.', 'stages.{s}.downsample.'),
    (r'^norm([1-4])\.', 'norm{s}.'),
    (r'^norm\.', 'norm3.'),
]
_GET_V = re.compile(r'^stage(\d)\.(\d+)\.attns\.(\d)\.get_v\.(weight|bias)$')


def convert_cswin(state_dict):
    """Map an official CSWin state dict to :class:`CSWin` keys (head dropped,
    keys it does not know kept as they are)."""
    out, lepe = {}, {}
    for key, value in state_dict.items():
        match = _GET_V.match(key)
        if match:
            s, j, branch, kind = match.groups()
            name = f'stages.{int(s) - 1}.blocks.{j}.attn.lepe.{kind}'
            lepe.setdefault(name, {})[int(branch)] = value
            continue
        if key.startswith('head.'):
            continue
        for pattern, repl in _CSWIN_RULES:
            match = re.match(pattern, key)
            if match:
                groups = match.groups() + (None, ) * 3
                s = int(groups[0]) - 1 if groups[0] else None
                key = repl.format(s=s, j=groups[1], m=groups[2]) + key[match.end():]
                break
        out[key] = value  # unknown keys stay as they are (reported unexpected)
    for name, branches in lepe.items():
        out[name] = torch.cat([branches[b] for b in sorted(branches)], dim=0)
    return out


def classifier_head(state_dict):
    """A linear classifier ``head`` (official Swin/CSWin/DeiT ``head.weight``,
    timm Swin ``head.fc.weight``) as mmpretrain ``LinearClsHead`` keys
    (``head.fc.weight``, ``head.fc.bias``)."""
    out = {}
    for key, value in state_dict.items():
        if key.startswith('head.'):
            name = key[len('head.'):]
            out['head.fc.' + (name[3:] if name.startswith('fc.') else name)] = value
    return out
