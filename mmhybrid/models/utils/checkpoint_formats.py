"""Public ImageNet checkpoint layouts -> ours: one registry, detected from the keys.

Every layout we read is one :class:`Format` in ``FORMATS``. :func:`convert_state_dict`
picks it and runs it; :func:`~mmhybrid.models.utils.load_pretrained` (``init_cfg``
Pretrained) and ``tools/convert/convert_checkpoint.py`` both go through it, so a
file loads as it is. Our ViT layout (:class:`InfViT` / :class:`HAViT`):
``layers.i.{norm1, attn.qkv | attn.{q,k,v}, attn.proj, ls1.gamma, norm2,
ffn.{fc1,fc2}, ls2.gamma}``, ``norm{i}`` per output layer; our pyramid layout
(:class:`SwinELFATT` / :class:`CSWin`): ``stages.i.blocks.j.{norm1, attn.{qkv,
proj, relative_position_bias_table, lepe}, norm2, ffn.layers.0.0,
ffn.layers.1}``, ``stages.i.downsample``, ``norm{i}``. timm has no CSWin.
"""
import math
import re
from dataclasses import dataclass
from typing import Callable, Tuple

import torch

from mmhybrid.utils.checkpoint import load_checkpoint
from .inherit import SUPPORTED_PAIRS, inherit_from_softmax, teacher_blocks

# SoLAVision (and InfiniteVLVision) take Swin's softmax layers by weight
# inheritance (.inherit)
VIT, SWIN, CSWIN = ('InfViT', ), ('SwinELFATT', 'SoLAVision'), ('CSWin', )


@dataclass(frozen=True)
class Format:
    """One public checkpoint layout: ``detect(keys) -> bool``, the backbone
    classes (or bases) it converts into, ``convert(state_dict, model)`` into our
    names, and ``skip``, a regex of keys that are no backbone weights."""
    name: str
    source: str
    targets: Tuple[str, ...]
    detect: Callable
    convert: Callable
    skip: str = r'^head\.'


def extract_state_dict(checkpoint):
    """The state dict inside a checkpoint (mmengine's ``state_dict``, timm's and
    DeiT's ``model``, an EMA-only ``state_dict_ema``), without a ``module.``
    prefix (a DDP-wrapped model)."""
    for key in ('state_dict', 'model', 'module', 'state_dict_ema'):
        if isinstance(checkpoint, dict) and isinstance(checkpoint.get(key), dict):
            checkpoint = checkpoint[key]
            break
    if (isinstance(checkpoint, dict) and checkpoint
            and all(k.startswith('module.') for k in checkpoint)):
        checkpoint = {k[len('module.'):]: v for k, v in checkpoint.items()}
    return checkpoint


def _any(pattern):
    regex = re.compile(pattern)
    return lambda keys: any(regex.search(k) for k in keys)


def _rename(state_dict, rules):
    """Apply the first matching ``(regex, replacement)`` rule to every key."""
    out = {}
    for key, value in state_dict.items():
        for pattern, repl in rules:
            new, n = re.subn(pattern, repl, key)
            if n:
                key = new
                break
        out[key] = value
    return out


def _unfold_order(weight):
    """Swin's patch merging concatenates the 2x2 neighbours as [(0,0), (1,0),
    (0,1), (1,1)] blocks of C channels; ours (:class:`mmhybrid.layers.PatchMerging`),
    like mmcv's (nn.Unfold), orders channel-major with the neighbours row-major
    [(0,0), (0,1), (1,0), (1,1)]."""
    lead, C = weight.shape[:-1], weight.shape[-1] // 4
    w = weight.reshape(*lead, 4, C)[..., [0, 2, 1, 3], :]
    return w.transpose(-1, -2).reshape(*lead, 4 * C)


_SWIN_SKIP = r'^head\.|relative_position_index$|attn_mask$'


def convert_swin(state_dict):
    """Official Swin (microsoft/Swin-Transformer: ``patch_embed.proj``,
    ``layers.i.blocks.j.{attn, mlp.fc1, mlp.fc2}``, ``layers.i.downsample``,
    ``norm``) -> :class:`SwinELFATT` keys (head dropped)."""
    skip = re.compile(_SWIN_SKIP)
    out = _rename({k: v for k, v in state_dict.items() if not skip.search(k)}, [
        (r'^patch_embed\.proj\.', 'patch_embed.projection.'),
        (r'^layers\.(\d+)\.blocks\.(\d+)\.mlp\.fc1\.', r'stages.\1.blocks.\2.ffn.layers.0.0.'),
        (r'^layers\.(\d+)\.blocks\.(\d+)\.mlp\.fc2\.', r'stages.\1.blocks.\2.ffn.layers.1.'),
        (r'^layers\.(\d+)\.', r'stages.\1.'),
        (r'^norm\.', 'norm3.'),
    ])
    merge = re.compile(r'\.downsample\.(reduction\.weight|norm\.(weight|bias))$')
    return {k: _unfold_order(v) if merge.search(k) else v for k, v in out.items()}


_GET_V = re.compile(r'\.attns\.(\d)\.get_v\.(weight|bias)$')


def convert_cswin(state_dict):
    """Official CSWin (microsoft/CSWin-Transformer: ``stage1_conv_embed.{0,2}``,
    ``stage{s}.{j}.{qkv, norm1, proj, norm2, mlp, attns.{0,1}.get_v}``,
    ``merge{s}``, ``norm``, or per-stage ``norm{1..4}`` in its segmentation
    backbone) -> :class:`CSWin` keys (head dropped, unknown keys kept). The two
    stripe branches' LePE convs (C/2 channels each; one C-channel conv in the last
    stage) become one depth-wise conv ``attn.lepe``, branch 0 first."""
    stage = lambda m: str(int(m[1]) - 1)  # noqa: E731
    out = _rename({k: v for k, v in state_dict.items() if not k.startswith('head.')}, [
        (r'^stage1_conv_embed\.0\.', 'patch_embed.projection.'),
        (r'^stage1_conv_embed\.2\.', 'patch_embed.norm.'),
        (r'^stage(\d)\.(\d+)\.', lambda m: f'stages.{stage(m)}.blocks.{m[2]}.'),
        (r'^merge(\d)\.', lambda m: f'stages.{stage(m)}.downsample.'),
        (r'^norm([1-4])\.', lambda m: f'norm{stage(m)}.'),
        (r'^norm\.', 'norm3.'),
    ])
    out = _rename(out, [(r'(\.blocks\.\d+)\.(qkv|proj)\.', r'\1.attn.\2.'),
                        (r'\.mlp\.fc1\.', '.ffn.layers.0.0.'),
                        (r'\.mlp\.fc2\.', '.ffn.layers.1.')])
    lepe = {}
    for key in list(out):
        match = _GET_V.search(key)
        if match:
            name = f'{key[:match.start()]}.attn.lepe.{match[2]}'
            lepe.setdefault(name, {})[int(match[1])] = out.pop(key)
    for name, branches in lepe.items():
        out[name] = torch.cat([branches[b] for b in sorted(branches)], dim=0)
    return out


def _openmmlab_vit(state_dict, model):
    last = len(model.layers) - 1
    return _rename(state_dict, [
        (r'^(layers\.\d+)\.ln([12])\.', r'\1.norm\2.'),
        (r'^(layers\.\d+)\.attn\.attn\.in_proj_', r'\1.attn.qkv.'),  # mmseg
        (r'^(layers\.\d+)\.attn\.attn\.out_proj\.', r'\1.attn.proj.'),
        (r'^(layers\.\d+)\.attn\.gamma1\.weight$', r'\1.ls1.gamma'),
        (r'^(layers\.\d+)\.ffn\.gamma2\.weight$', r'\1.ls2.gamma'),
        (r'^(layers\.\d+)\.ffn\.layers\.0\.0\.', r'\1.ffn.fc1.'),
        (r'^(layers\.\d+)\.ffn\.layers\.1\.', r'\1.ffn.fc2.'),
        (r'^ln1\.', f'norm{last}.'),
    ])


def _timm_vit(state_dict, model):
    last = len(model.layers) - 1
    state_dict = dict(state_dict)
    if 'dist_token' in state_dict:  # DeiT distilled: [cls, dist, patches]
        state_dict.pop('dist_token')
        pos = state_dict['pos_embed']
        state_dict['pos_embed'] = torch.cat((pos[:, :1], pos[:, 2:]), dim=1)
    return _rename(state_dict, [
        (r'^patch_embed\.proj\.', 'patch_embed.projection.'),
        (r'^blocks\.(\d+)\.mlp\.fc([12])\.', r'layers.\1.ffn.fc\2.'),
        (r'^blocks\.(\d+)\.gamma_([12])$', r'layers.\1.ls\2.gamma'),  # DeiT-III
        (r'^blocks\.', 'layers.'),
        (r'^norm\.', f'norm{last}.'),
    ])


def _infsa(state_dict, model):
    """The authors' scalar ``rho`` scales every layer's attention once: each of
    our heads gets ``gamma = rho`` (``discount='layer'``), or ``rho^(1/t)`` for a
    pure layer at depth t with ``discount='depth'`` (the same function)."""
    last = len(model.layers) - 1
    out = _rename(state_dict, [
        (r'^patch_embed\.', 'patch_embed.projection.'),
        (r'^encoder\.norm\.', f'norm{last}.'),
        (r'^encoder\.layers\.(\d+)\.attn\.([qkv])_proj\.', r'layers.\1.attn.\2.'),
        (r'^encoder\.layers\.(\d+)\.attn\.out_proj\.', r'layers.\1.attn.proj.'),
        (r'^encoder\.layers\.(\d+)\.ff\.0\.', r'layers.\1.ffn.fc1.'),
        (r'^encoder\.layers\.(\d+)\.ff\.3\.', r'layers.\1.ffn.fc2.'),
        (r'^encoder\.layers\.(\d+)\.attn\.rho_logit$', r'layers.\1.attn.gamma_logit'),
        (r'^encoder\.layers\.', 'layers.'),
    ])
    for i, layer in enumerate(model.layers):
        key = f'layers.{i}.attn.gamma_logit'
        own = getattr(layer.attn, 'gamma_logit', None)
        if key in out and own is not None:
            rho = torch.sigmoid(out[key].double())
            gamma = rho**(1. / getattr(layer.attn, 'power', 1))
            out[key] = torch.logit(gamma).to(own.dtype).expand_as(own).clone()
    return out


def _timm_swin(state_dict, model):
    """timm merges at the start of stages 1-3; the official code (and we) at
    the end of stages 0-2. Its merge orders the 2x2 neighbours as the official
    code does."""
    shifted = _rename(state_dict, [
        (r'^layers\.(\d+)\.downsample\.',
         lambda m: f'layers.{int(m.group(1)) - 1}.downsample.'),
    ])
    return convert_swin(shifted)


def _openmmlab_swin(state_dict, model):
    return _rename(state_dict, [
        (r'\.attn\.w_msa\.', '.attn.'),
        (r'^norm\.', 'norm3.'),  # mmseg's swin2mmseg keeps the official name
    ])


FORMATS = (
    Format('openmmlab-vit', 'mmpretrain / mmseg VisionTransformer', VIT,
           _any(r'^layers\.\d+\.(ln1|ffn\.layers\.0\.0)\.'), _openmmlab_vit),
    Format('timm-vit', 'timm VisionTransformer / official DeiT, DeiT-III', VIT,
           _any(r'^blocks\.\d+\.(norm1|mlp\.fc1)\.'), _timm_vit,
           skip=r'^(head|head_dist|fc_norm)\.'),
    Format('infsa', 'InfSA authors (giorgioroffo/infinite-self-attention)', VIT,
           _any(r'^encoder\.layers\.\d+\.attn\.q_proj\.'), _infsa),
    Format('timm-swin', 'timm SwinTransformer', SWIN,
           lambda keys: (_any(r'^layers\.\d+\.blocks\.')(keys)
                         and _any(r'^layers\.[1-9]\d*\.downsample\.')(keys)
                         and not _any(r'^layers\.0\.downsample\.')(keys)),
           _timm_swin, skip=_SWIN_SKIP),
    Format('swin', 'official Swin (microsoft/Swin-Transformer)', SWIN,
           _any(r'^layers\.\d+\.blocks\.'), lambda sd, _: convert_swin(sd),
           skip=_SWIN_SKIP),
    Format('openmmlab-swin', 'mmpretrain / mmseg SwinTransformer', SWIN,
           _any(r'^stages\.\d+\.blocks\.\d+\.attn\.w_msa\.'), _openmmlab_swin,
           skip=_SWIN_SKIP),
    Format('cswin', 'official CSWin (microsoft/CSWin-Transformer)', CSWIN,
           _any(r'^stage1(_conv_embed)?\.'), lambda sd, _: convert_cswin(sd)),
)


def is_a(model, names):
    """``model``'s class or one of its bases is named in ``names``."""
    return any(cls.__name__ in names for cls in type(model).__mro__)


def detect_format(state_dict):
    """The :class:`Format` of ``state_dict``, or None for our own layout."""
    keys = set(state_dict)
    return next((f for f in FORMATS if f.detect(keys)), None)


def convert_state_dict(state_dict, model):
    """``state_dict`` in any registered layout -> ``model``'s names: ``(state_dict,
    format (None: ours), skipped non-backbone keys, notes for the load report,
    the :class:`~.inherit.Inheritance` account or None)``.

    A checkpoint whose blocks are softmax layers (Swin, DeiT, ViT; after
    conversion, or in our Swin / ViT layout) reaches ``model``'s blocks through
    their mixers' and MLPs' rules (:func:`~.inherit.inherit_from_softmax`)."""
    fmt = detect_format(state_dict)
    skipped, notes, account = [], [], None
    if fmt is not None:
        if not is_a(model, fmt.targets):
            raise ValueError(
                f'this is a {fmt.name} checkpoint ({fmt.source}): it converts into '
                f'{", ".join(fmt.targets)}, not {type(model).__name__}. Pairs we '
                f'support: {SUPPORTED_PAIRS}')
        skip = re.compile(fmt.skip)
        skipped = [k for k in state_dict if skip.search(k)]
        if 'dist_token' in state_dict:
            notes.append('distillation token dropped (not the same function as '
                         'the distilled model)')
        state_dict = fmt.convert(
            {k: v for k, v in state_dict.items() if not skip.search(k)}, model)
        if fmt.targets == SWIN and getattr(model, 'downsample', None) == 'conv':
            notes.append("Swin's linear patch merging does not load into "
                         "downsample='conv' (build with downsample='linear')")
    if is_a(model, VIT):
        state_dict = _fit_vit(state_dict, model, notes)
    if is_a(model, VIT + SWIN) and teacher_blocks(state_dict) is not None:
        state_dict, account = inherit_from_softmax(state_dict, model)
    return state_dict, fmt, skipped, notes, account


def _fit_vit(state_dict, model, notes):
    """Class-token slot of the position embedding, a missing patch bias,
    tied/untied q, k of InfSA checkpoints (a softmax ViT's fused q, k, v reach
    InfSA through its own rule, ``inherit_softmax``)."""
    state_dict = dict(state_dict)
    pos = state_dict.get('pos_embed')
    extra = model.num_extra_tokens
    if pos is not None and pos.dim() == 3:
        tokens = pos.shape[1]
        has_cls = _is_square(tokens - 1) and not _is_square(tokens)
        if extra and not has_cls and _is_square(tokens):
            # timm no_embed_class / DeiT-III: the class token gets no position
            # embedding, i.e. a zero one
            state_dict['pos_embed'] = torch.cat(
                (pos.new_zeros(1, 1, pos.shape[2]), pos), dim=1)
            notes.append('pos_embed given a zero class-token slot')
        elif not extra and has_cls:
            state_dict['pos_embed'] = pos[:, 1:]
            notes.append('class-token pos_embed slot dropped (with_cls_token=False)')
    bias = 'patch_embed.projection.bias'
    if ('patch_embed.projection.weight' in state_dict and bias not in state_dict
            and model.patch_embed.projection.bias is not None):
        # mmseg's ViT has no patch bias by default: a zero one is that function
        state_dict[bias] = torch.zeros_like(model.patch_embed.projection.bias)
        notes.append('zero patch_embed bias (the checkpoint has none)')
    tied, filled = [], []
    for i, layer in enumerate(model.layers):
        attn = layer.attn
        if not hasattr(attn, 'tie_qk'):
            continue
        k, q = f'layers.{i}.attn.k.', f'layers.{i}.attn.q.'
        has_k = any(key.startswith(k) for key in state_dict)
        if attn.k is None and has_k and state_dict.get(
                k + 'weight', attn.q.weight).shape == attn.q.weight.shape:
            tied.append(i)  # (other widths: reported as another arch below)
        elif attn.k is not None and not has_k and any(
                key.startswith(q) for key in state_dict):
            # a tied checkpoint: K = Q is the same function as k := q
            state_dict.update({k + key[len(q):]: value for key, value
                               in state_dict.items() if key.startswith(q)})
            filled.append(i)
    if tied:
        raise ValueError(
            f'the checkpoint has separate key projections (attn.k) for layers '
            f'{tied}, but {type(model).__name__} ties them to the queries '
            '(tie_qk=True, the default of linear InfSA): loading it would drop '
            'them and change the function. Build the model with tie_qk=False.')
    if filled:
        notes.append(f'attn.k of layers {filled} set to attn.q (a tied-Q=K '
                     'checkpoint into an untied model: the same function)')
    return state_dict


def _is_square(n):
    return n > 0 and math.isqrt(n)**2 == n


def convert_checkpoint_file(src, dst, model):
    """Write ``src`` (any registered layout) as an mmpretrain-classifier checkpoint
    for ``model`` (``backbone.*`` in our layout, a linear ``head`` as ``head.fc.*``,
    an mmpretrain checkpoint's other keys as they are); returns ``(state_dict,
    format)`` as written and detected."""
    state_dict = extract_state_dict(load_checkpoint(str(src), map_location='cpu'))
    if any(k.startswith('backbone.') for k in state_dict):
        others = {k: v for k, v in state_dict.items()
                  if not k.startswith('backbone.')}
        state_dict = {k[len('backbone.'):]: v for k, v in state_dict.items()
                      if k.startswith('backbone.')}
    else:  # a linear classifier (official head.*, timm Swin head.fc.*) -> head.fc.*
        others = {'head.fc.' + re.sub(r'^head\.(fc\.)?', '', k): v
                  for k, v in state_dict.items() if k.startswith('head.')}
    converted, fmt, _, _, _ = convert_state_dict(state_dict, model)
    out = {**{f'backbone.{k}': v for k, v in converted.items()}, **others}
    meta = dict(converted_from=str(src), format=fmt.name if fmt else 'mmhybrid',
                model=type(model).__name__)
    torch.save({'state_dict': out, 'meta': meta}, str(dst))
    return out, fmt
