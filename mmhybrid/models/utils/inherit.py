"""A softmax Transformer's checkpoint into a backbone of other token mixers
(weight inheritance, InfiniteVL Sec. 3.3; docs/design.md, "Weight inheritance").

The checkpoint, converted to our Swin layout (``stages.i.blocks.j``, SwinELFATT)
or ViT layout (``layers.j``, InfViT), holds softmax layers of a teacher. Every
block of the model takes the paired teacher block
(:func:`~mmhybrid.models.distillers.layer_pairs.teacher_index`, the pairing of
Stage I: a shallower student stage spreads over the teacher's layers, first and
last kept): its norms and layer scales copied, its mixer's ``inherit_softmax``
and its MLP's ``inherit_mlp`` (the rules live with the classes,
:mod:`mmhybrid.layers.inherit`). Stem, merges, output norms copy by name; a
position embedding the teacher lacks and the Hidden State Bridges start at zero.
"""
import re
from collections import Counter
from dataclasses import dataclass

import torch

from mmhybrid.layers.inherit import Inherited, Linear, MlpWeights, SoftmaxWeights

SUPPORTED_PAIRS = (
    "Swin-T -> SoLAVision(arch='s' or 's-gdn'), InfiniteVLVision(arch='s'); "
    "Swin-B -> SoLAVision(arch='b' or 'b-gdn'), InfiniteVLVision(arch='b') (stage 3: "
    "16 of 18 layers); Swin -> SwinELFATT of its arch, any plan; DeiT / DeiT-III / "
    'ViT -> InfViT of its embed_dims and depth (heads, patch size), any mixers')
_PYRAMID = re.compile(r'^stages\.(\d+)\.blocks\.(\d+)\.(.+)$')
_VIT = re.compile(r'^layers\.(\d+)\.(.+)$')
_MERGE = re.compile(r'^stages\.(\d+)\.downsample\.(.+)$')
_ATTN = ('attn.qkv.weight', 'attn.qkv.bias', 'attn.proj.weight', 'attn.proj.bias',
         'attn.relative_position_bias_table')
_MLPS = (('ffn.layers.0.0.', 'ffn.layers.1.'), ('ffn.fc1.', 'ffn.fc2.'))
# teacher tensor -> the neutral names (Inherited.dropped) that, all dropped, drop it
_NEUTRAL = {'attn.qkv.weight': ('q.weight', 'k.weight', 'v.weight'),
            'attn.qkv.bias': ('q.bias', 'k.bias', 'v.bias'),
            'attn.relative_position_bias_table': ('bias_table', )}
_BLOCK = ('norm1.weight', 'norm1.bias', 'norm2.weight', 'norm2.bias', 'ls1.gamma',
          'ls2.gamma')


@dataclass
class Inheritance:
    """The account of one load: model keys that are new (initialised by a rule
    or kept at their init), the teacher's tensors left out (layers of a deeper
    teacher stage), how many it had, and the summary for the load line (what
    each kind of layer copied, what is new and why, what the rules dropped)."""
    new: set
    dropped: int
    teacher_tensors: int
    summary: str


def teacher_blocks(state_dict):
    """``{(stage, layer): {name: tensor}}`` of a checkpoint in our Swin or ViT
    layout whose blocks are all softmax layers; None otherwise."""
    blocks = {}
    for key, value in state_dict.items():
        match = _PYRAMID.match(key)
        if match:
            blocks.setdefault((int(match[1]), int(match[2])), {})[match[3]] = value
            continue
        match = _VIT.match(key)
        if match:
            blocks.setdefault((0, int(match[1])), {})[match[2]] = value
    allowed = set(_ATTN + _BLOCK) | {p + w for pair in _MLPS for p in pair
                                     for w in ('weight', 'bias')}
    if not blocks or any('attn.qkv.weight' not in b or set(b) - allowed
                         for b in blocks.values()):
        return None
    return blocks


def _linear(block, prefix):
    return Linear(block[prefix + 'weight'], block.get(prefix + 'bias'))


def _softmax_layer(block):
    attn = SoftmaxWeights.from_fused(
        _linear(block, 'attn.qkv.'), _linear(block, 'attn.proj.'),
        block.get('attn.relative_position_bias_table'))
    fc1, fc2 = next(p for p in _MLPS if p[0] + 'weight' in block)
    return attn, MlpWeights(_linear(block, fc1), _linear(block, fc2))


def _layout_error(model, where, what):
    return ValueError(f'{type(model).__name__} cannot start from this softmax '
                      f'checkpoint: {where}: {what}. Pairs we support: '
                      f'{SUPPORTED_PAIRS}')


def _neutral(key):
    """The neutral names (as in ``Inherited.dropped``) of a teacher block's
    mixer or MLP tensor; None for its norms and layer scales."""
    if key in _NEUTRAL:
        return _NEUTRAL[key]
    for prefix, name in (('attn.', ''), ('ffn.layers.0.0.', 'fc1.'),
                         ('ffn.layers.1.', 'fc2.'), ('ffn.', '')):
        if key.startswith(prefix):
            return (name + key[len(prefix):], )
    return None


def _dropped(teacher, results):
    """How many of a teacher block's tensors the rules left out entirely."""
    names = {n for r in results for key in r.dropped for n in key.split(', ')}
    return sum(1 for key in teacher if _neutral(key) and (
        set(_neutral(key)) <= names or key.split('.', 1)[1] in names))


def _apply(result, prefix, out, new, own):
    """Put a rule's tensors under ``prefix``; the model keys it calls new go to
    ``new``. Returns the group label of a rule that is not a plain copy."""
    out.update({prefix + k: v for k, v in result.tensors.items()})
    parts = [n for name in result.new for n in name.split(', ')]
    new.update(k for k in own if k.startswith(prefix) and any(
        n == '' or k[len(prefix):] == n or k[len(prefix):].startswith(n + '.')
        for n in parts))
    return None if result.exact else result.describe()


def inherit_from_softmax(state_dict, model):
    """``state_dict`` (a softmax teacher in our Swin or ViT layout) -> ``model``'s
    names by the per-layer rules: ``(state_dict, Inheritance)``. A pair whose
    layouts do not match is a ValueError naming the stage and the numbers."""
    from mmhybrid.models.distillers.layer_pairs import (block_width, blocks_per_stage,
                                                        teacher_index)
    blocks = teacher_blocks(state_dict)
    own = model.state_dict()
    names = {id(m): n for n, m in model.named_modules()}
    students = blocks_per_stage(model)
    depths = Counter(stage for stage, _ in blocks)
    if len(depths) != len(students):
        raise _layout_error(model, 'stages', f'the checkpoint has {len(depths)}, '
                            f'the model {len(students)}')
    out, new, notes = {}, set(), []
    groups = Counter()
    used, dropped = set(), 0
    for i, stage in enumerate(students):
        n_t, n_s = depths[i], len(stage)
        where = f'stage {i + 1}'
        if n_s > n_t:
            raise _layout_error(model, where, f'{n_s} layers, the teacher {n_t}; a '
                                "student stage may be as deep as the teacher's or "
                                'shallower')
        width = blocks[(i, 0)]['norm1.weight'].shape[0]
        if width != block_width(stage[0]):
            raise _layout_error(model, where, f'{block_width(stage[0])} channels, '
                                f'the teacher {width}')
        if n_s < n_t:
            skipped = sorted(set(range(n_t)) -
                             {teacher_index(j, n_s, n_t) for j in range(n_s)})
            notes.append(f'{where}: {n_s} layers from {n_t} (teacher layers '
                         f'{[k + 1 for k in skipped]} dropped)')
        for j, block in enumerate(stage):
            k = teacher_index(j, n_s, n_t)
            used.add((i, k))
            teacher = blocks[(i, k)]
            prefix = names[id(block)] + '.'
            out.update({prefix + n: v for n, v in teacher.items() if n in _BLOCK})
            attn, mlp = _softmax_layer(teacher)
            results = []
            for part, rule, weights in (('attn', 'inherit_softmax', attn),
                                        ('ffn', 'inherit_mlp', mlp)):
                module = getattr(block, part)
                if not hasattr(module, rule):
                    result = Inherited({}, '', new={'': f'at init ({rule} missing)'})
                else:
                    try:
                        result = getattr(module, rule)(weights)
                    except ValueError as err:
                        raise _layout_error(model, f'{where}, layer {j + 1} '
                                            f'{part}', err) from None
                results.append(result)
                text = _apply(result, f'{prefix}{part}.', out, new, own)
                if text:
                    groups[f'{type(module).__name__} ({text})'] += 1
            dropped += _dropped(teacher, results)
    dropped += sum(len(b) for key, b in blocks.items() if key not in used)
    for key, value in state_dict.items():
        if _PYRAMID.match(key) or _VIT.match(key):
            continue
        merge = _MERGE.match(key)
        if merge and hasattr(model, 'merge'):
            key = f'{names[id(model.merge(int(merge[1]) + 1))]}.{merge[2]}'
        out[key] = value
    for key in getattr(model, 'pos_embed_keys', ()):
        if key in own and key not in out:
            out[key] = torch.zeros_like(own[key])
            new.add(key)
            groups[f'{key} (zero: the teacher has none)'] += 1
    for name, module in model.named_modules():
        if hasattr(module, 'inherit_new'):
            text = _apply(module.inherit_new(), name + '.', out, new, own)
            groups[f'{type(module).__name__} ({text.lstrip("; ")})'] += 1
    summary = '; '.join(notes + [f'{text} x{n}' if n > 1 else text
                                 for text, n in groups.items()])
    return out, Inheritance(new, dropped, len(state_dict), summary)
