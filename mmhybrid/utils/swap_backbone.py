"""Put a backbone into an upstream mmseg / mmdet / mmpretrain model config, whose
neck and heads carry the channels and outputs of its own backbone."""
import copy

import torch
from mmengine.hooks import CheckpointHook
from mmengine.registry import MODELS, DefaultScope

from .default_scope import register_scope

# mmseg decode heads that also read backbone output 0 (the argument of its channels)
C1_HEADS = {'DepthwiseSeparableASPPHead': 'c1_in_channels'}
HEAD_KEYS = ('decode_head', 'auxiliary_head', 'head')


def _as_list(value):
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def probe_backbone(backbone, scope=None, size=224):
    """Build ``backbone`` and run one zero image: its ``out_indices`` (if it has
    them), how many outputs they can name (``num_stages``, if it has them), and the
    channels and stride of every output."""
    cfg = {k: v for k, v in copy.deepcopy(dict(backbone)).items()
           if k not in ('pretrained', 'init_cfg')}
    register_scope(scope)
    with DefaultScope.overwrite_default_scope(scope):
        module = MODELS.build(cfg)
    with torch.no_grad():
        outs = module.eval()(torch.zeros(1, cfg.get('in_channels', 3), size, size))
    return (getattr(module, 'out_indices', None), getattr(module, 'num_stages', None),
            [o.shape[1] for o in outs], [size // o.shape[-1] for o in outs])


def _plain_pyramid(fpn, used, in_channels, stride):
    """A SimpleFeaturePyramid making the levels ``fpn`` made from a 4-8-16-32
    pyramid (its inputs ``used``) out of one plain map of ``stride``."""
    scales = tuple(stride / (4 * 2**k) for k in used)
    if not set(scales) <= {4., 2., 1., .5}:
        raise ValueError(f'FPN levels of strides {[4 * 2**k for k in used]} '
                         f'cannot be made from one map of stride {stride}')
    return dict(type='mmhybrid.SimpleFeaturePyramid', in_channels=in_channels,
                out_channels=fpn['out_channels'], scales=scales,
                num_outs=fpn.get('num_outs', len(scales)))


def swap_backbone(cfg, backbone, pretrained=None):
    """Replace the backbone of a model config (or model dict) ``cfg`` and fix
    what depends on it, in place; returns ``cfg``.

    ``backbone`` (e.g. ``dict(type='mmhybrid.SoLAVision', arch='t')``) must return
    the maps the replaced one returned, in order; a dry run on a 224^2 image
    measures their channels and strides. Then the neck's ``in_channels`` (or,
    with no neck, every head's ``in_channels`` and DeepLabV3+'s
    ``c1_in_channels``) get its channels; outputs nothing reads are dropped from
    ``out_indices`` (DDP refuses parameters without gradients): an FPN's
    ``start_level`` becomes 0, heads' ``in_index`` are renumbered; a plain
    backbone (one stride) turns an ``FPN`` into ``mmhybrid.SimpleFeaturePyramid``
    (ViTDet); a plain backbone without ``out_indices`` of its own, in a recipe
    reading n maps of one stride (mmseg's ViT + MultiLevelNeck), returns n layers
    spread over its depth (12 layers, 4 maps: 2, 5, 8, 11, as mmseg's ViT-B). The
    replaced model's ``pretrained`` / Pretrained ``init_cfg`` go; ``pretrained``
    becomes the new backbone's ``init_cfg``. In a whole config, mmengine's
    ``CheckpointHook`` becomes ``mmhybrid.AtomicCheckpointHook`` (same arguments;
    checkpoints that load weights-only everywhere, docs/training.md).
    """
    model = cfg['model'] if 'model' in cfg else cfg
    scope = cfg.get('default_scope') if 'model' in cfg else None
    backbone = copy.deepcopy(dict(backbone))
    base, total, channels, strides = probe_backbone(backbone, scope)
    num = len(channels)
    if 'model' in cfg:
        _use_atomic_checkpoints(cfg)

    model.pop('pretrained', None)
    if (model.get('init_cfg') or {}).get('type') == 'Pretrained':
        model.pop('init_cfg')
    backbone.pop('pretrained', None)
    if pretrained is not None:
        backbone['init_cfg'] = dict(type='Pretrained', checkpoint=pretrained)

    necks = _as_list(model.get('neck'))
    neck = necks[0] if necks else None
    if neck is not None and 'in_channels' not in neck:
        if model.get('type') != 'ImageClassifier':
            raise NotImplementedError(
                f'cannot tell what neck {neck.get("type")} reads (no in_channels)')
        neck = None  # e.g. GlobalAveragePooling: the head reads the backbone
    if neck is not None:
        used = _neck_inputs(neck, num)
    else:
        used = sorted({i for head in _heads(model)
                       for i in _head_inputs(head, num)})
    if not used:
        raise NotImplementedError(
            f'found no neck or head of {model.get("type")} reading the backbone')

    if neck is not None and neck.get('type') == 'FPN' and len(set(strides)) == 1:
        # a plain backbone: every level from its last map (ViTDet)
        necks[0] = _plain_pyramid(neck, used, channels[-1], strides[-1])
        used = [num - 1]
    else:
        if (used[-1] >= num and 'out_indices' not in backbone and total
                and len(set(strides)) == 1 and used[-1] < total):
            n = used[-1] + 1
            backbone['out_indices'] = tuple(total * (i + 1) // n - 1 for i in range(n))
            base, total, channels, strides = probe_backbone(backbone, scope)
            num = len(channels)
        if used[-1] >= num:
            raise ValueError(
                f'the config reads backbone outputs {used}, but '
                f'{backbone["type"]} returns {num}: set its out_indices to name '
                f'{used[-1] + 1} outputs')
        if neck is not None:
            _renumber_neck(neck, [channels[i] for i in used])
        position = {old: new for new, old in enumerate(used)}
        for head in [] if neck is not None else _heads(model):
            _renumber_head(head, num, position, channels)
    if neck is not None:
        model['neck'] = necks if isinstance(model['neck'], list) else necks[0]
    if base is not None:
        backbone['out_indices'] = tuple(base[i] for i in used)
    model['backbone'] = backbone
    return cfg


def check_backbone_widths(cfg):
    """Raise ValueError, naming both widths and the fix, where the neck (or, with
    no neck, a head) of a model config (or whole config) ``cfg`` expects other
    channels than its backbone returns (one dry run of the backbone): before a
    Runner is built, not at the first forward pass."""
    model = cfg['model'] if 'model' in cfg else cfg
    scope = cfg.get('default_scope') if 'model' in cfg else None
    backbone = model.get('backbone')
    neck = (_as_list(model.get('neck')) or [None])[0]
    if backbone is None or (neck is not None and 'in_channels' not in neck
                            and model.get('type') != 'ImageClassifier'):
        return  # no backbone, or a neck that does not say what it reads
    channels = probe_backbone(backbone, scope, size=64)[2]
    if neck is not None and 'in_channels' in neck:
        given = neck['in_channels']
        readers = [('model.neck.in_channels', given,
                    channels if isinstance(given, (list, tuple)) else channels[-1])]
    else:
        readers = []
        for key in HEAD_KEYS:
            for i, head in enumerate(_as_list(model.get(key))):
                where = f'model.{key}' + (f'[{i}]' if isinstance(model[key], list) else '')
                index = head.get('in_index', -1)
                wanted = [channels[j] for j in _as_list(index)]
                readers.append((f'{where}.in_channels', head.get('in_channels'),
                                wanted if isinstance(index, (list, tuple)) else wanted[0]))
                if head.get('type') in C1_HEADS:
                    readers.append((f'{where}.{C1_HEADS[head["type"]]}',
                                    head.get(C1_HEADS[head['type']]), channels[0]))
    for where, given, wanted in readers:
        if given is not None and _as_list(given) != _as_list(wanted):
            raise ValueError(
                f'{where}={given!r}, but the backbone {backbone["type"]} returns '
                f'{wanted!r} channels there (all its outputs: {channels}): set '
                f'{where}={wanted!r}, or put the backbone in with '
                'mmhybrid.utils.swap_backbone(cfg, backbone)')


def _use_atomic_checkpoints(cfg):
    hook = (cfg.get('default_hooks') or {}).get('checkpoint')
    if hook is not None and hook.get('type') in ('CheckpointHook',
                                                 'mmengine.CheckpointHook',
                                                 CheckpointHook):
        hook['type'] = 'mmhybrid.AtomicCheckpointHook'


def _heads(model):
    return [h for key in HEAD_KEYS for h in _as_list(model.get(key))]


def _neck_inputs(neck, num):
    if not isinstance(neck['in_channels'], (list, tuple)):
        return [num - 1]
    start = neck.get('start_level', 0)
    end = neck.get('end_level', -1)
    stop = len(neck['in_channels']) if end == -1 else end + 1
    return list(range(start, stop))


def _renumber_neck(neck, channels):
    if not isinstance(neck['in_channels'], (list, tuple)):
        neck['in_channels'] = channels[-1]
        return
    neck['in_channels'] = channels
    neck.update({k: v for k, v in (('start_level', 0), ('end_level', -1)) if k in neck})


def _head_inputs(head, num):
    index = head.get('in_index', -1)
    used = [i % num if i < 0 else i for i in _as_list(index)]
    if head.get('type') in C1_HEADS:
        used.append(0)
    return used


def _renumber_head(head, num, position, channels):
    index = head.get('in_index', -1)
    if isinstance(index, (list, tuple)):
        old = [i % num if i < 0 else i for i in index]
        head['in_index'] = [position[i] for i in old]
        head['in_channels'] = [channels[i] for i in old]
    else:
        old = index % num if index < 0 else index
        if 'in_index' in head:
            head['in_index'] = position[old]
        head['in_channels'] = channels[old]
    if head.get('type') in C1_HEADS:
        head[C1_HEADS[head['type']]] = channels[0]
