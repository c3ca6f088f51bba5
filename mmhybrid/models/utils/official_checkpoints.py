"""Official Swin and CSWin ImageNet checkpoints -> the layout of our backbones.

Swin (microsoft/Swin-Transformer): ``patch_embed.proj``, ``layers.{i}.blocks.{j}.
{norm1, attn.qkv, attn.proj, attn.relative_position_bias_table, norm2, mlp.fc1,
mlp.fc2}``, ``layers.{i}.downsample.{norm, reduction}``, ``norm``, ``head``.

CSWin (microsoft/CSWin-Transformer): ``stage1_conv_embed.{0,2}`` (conv, LayerNorm),
``stage{s}.{j}.{qkv, norm1, proj, norm2, mlp.fc1, mlp.fc2, attns.{0,1}.get_v}``,
``merge{s}.{conv, norm}``, ``norm``, ``head``. The two stripe branches' LePE convs
(``attns.0/1.get_v``, C/2 channels each; one C-channel conv in the last stage)
become one depth-wise conv ``attn.lepe`` over all channels, branch 0 first.
"""
import re

import torch


def is_official_swin(state_dict):
    return any(k.startswith('layers.') for k in state_dict)


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
    (r'^norm\.', 'norm3.'),
]
_GET_V = re.compile(r'^stage(\d)\.(\d+)\.attns\.(\d)\.get_v\.(weight|bias)$')


def is_official_cswin(state_dict):
    return any(k.startswith(('stage1_conv_embed.', 'stage1.')) for k in state_dict)


def convert_cswin(state_dict):
    """Map an official CSWin state dict to :class:`CSWin` keys (head dropped)."""
    out, lepe = {}, {}
    for key, value in state_dict.items():
        match = _GET_V.match(key)
        if match:
            s, j, branch, kind = match.groups()
            name = f'stages.{int(s) - 1}.blocks.{j}.attn.lepe.{kind}'
            lepe.setdefault(name, {})[int(branch)] = value
            continue
        for pattern, repl in _CSWIN_RULES:
            match = re.match(pattern, key)
            if match:
                groups = match.groups() + (None, ) * 3
                s = int(groups[0]) - 1 if groups[0] else None
                new = repl.format(s=s, j=groups[1], m=groups[2])
                out[new + key[match.end():]] = value
                break
    for name, branches in lepe.items():
        out[name] = torch.cat([branches[b] for b in sorted(branches)], dim=0)
    return out


def classifier_head(state_dict):
    """The official classifier ``head`` of either model as mmpretrain
    ``LinearClsHead`` keys (``head.fc.weight``, ``head.fc.bias``)."""
    return {f'head.fc.{k[5:]}': v for k, v in state_dict.items()
            if k.startswith('head.')}


def convert_checkpoint_file(src, dst, convert):
    """Read an official checkpoint, write an mmpretrain-classifier checkpoint.

    The result holds ``backbone.*`` (our layout) and ``head.fc.*`` keys, so it
    loads into an mmpretrain ``ImageClassifier`` and, through
    ``init_cfg=dict(type='Pretrained', checkpoint=dst)``, into the backbone alone
    (the ``backbone.`` prefix is found automatically).

    Returns:
        dict: the converted state dict.
    """
    checkpoint = torch.load(src, map_location='cpu', weights_only=True)
    for key in ('model', 'state_dict'):
        if isinstance(checkpoint, dict) and isinstance(checkpoint.get(key), dict):
            checkpoint = checkpoint[key]
            break
    state_dict = {f'backbone.{k}': v for k, v in convert(checkpoint).items()}
    state_dict.update(classifier_head(checkpoint))
    torch.save({'state_dict': state_dict, 'meta': {'converted_from': str(src)}}, dst)
    return state_dict
