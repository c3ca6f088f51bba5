"""Behaviour every mmhybrid backbone shares with OpenMMLab's own backbones."""
import warnings

import torch.nn as nn
import torch.utils.checkpoint as cp
from mmengine.model import BaseModule, initialize
from mmengine.model.weight_init import trunc_normal_
from torch.nn.modules.batchnorm import _BatchNorm

from ..utils import load_pretrained

# OpenMMLab habit (mmpretrain's arch_zoo lists 't' and 'tiny' alike)
ARCH_ALIASES = {'tiny': 't', 'small': 's', 'base': 'b', 'large': 'l'}


class ArchError(KeyError):
    """An unknown ``arch`` name: a KeyError as upstream backbones raise, printed
    without KeyError's quotes."""

    def __str__(self):
        return str(self.args[0]) if self.args else ''


def resolve_arch(arch, zoo, owner, required):
    """A copy of the settings of ``arch``: a key of ``zoo``, an alias of one
    ('tiny', 'small', 'base', 'large'; any case), or a dict (``required`` names
    its keys in the error; :func:`require_keys` checks them)."""
    if isinstance(arch, dict):
        return dict(arch)
    if isinstance(arch, str):
        key = arch.lower()
        key = key if key in zoo else ARCH_ALIASES.get(key, key)
        if key in zoo:
            return dict(zoo[key])
    aliases = {v: k for k, v in ARCH_ALIASES.items()}
    names = ', '.join(repr(k) + (f' ({aliases[k]!r})' if k in aliases else '')
                      for k in zoo)
    raise ArchError(f'unknown {owner} arch {arch!r}; use one of {names}, or a '
                    f'dict with {", ".join(required)}')


def require_keys(arch, required, owner):
    """``arch`` if it has every key of ``required``."""
    missing = [k for k in required if k not in arch]
    if missing:
        raise ValueError(f'{owner} arch dict {arch} lacks {missing}; it needs '
                         f'{", ".join(required)}')
    return arch


def check_rates(owner, **rates):
    """Dropout / drop-path probabilities must lie in [0, 1)."""
    for name, value in rates.items():
        if not 0 <= value < 1:
            raise ValueError(f'{owner}: {name} must be a probability in [0, 1), '
                             f'got {value}')



def parse_out_indices(out_indices, num_outputs, owner=None, unit='outputs'):
    """``3``, ``(1, 3)`` or ``[-1]`` -> sorted tuple in ``[0, num_outputs)``.

    Negative indices count from the end (as mmpretrain and mmseg's ViT allow).
    Outputs come in forward order, so the indices are returned sorted. ``owner``
    and ``unit`` ('stages', 'layers') only word the error messages.
    """
    given = out_indices
    prefix = f'{owner}: ' if owner else ''
    if isinstance(out_indices, int):
        out_indices = (out_indices, )
    try:
        out_indices = [int(i) for i in out_indices]
    except (TypeError, ValueError):
        raise TypeError(f'{prefix}out_indices must be an int or a sequence of ints, '
                        f'got {given!r}') from None
    if not out_indices:
        raise ValueError(f'{prefix}out_indices {given!r} out of range: it is empty, '
                         f'name at least one of the {num_outputs} {unit}')
    if any(not -num_outputs <= i < num_outputs for i in out_indices):
        raise ValueError(f'{prefix}out_indices {given!r} out of range: it has '
                         f'{num_outputs} {unit}, use 0..{num_outputs - 1} (or '
                         f'-{num_outputs}..-1 from the end)')
    out_indices = [i % num_outputs for i in out_indices]
    if len(set(out_indices)) != len(out_indices):
        raise ValueError(f'{prefix}out_indices {given!r} names an output twice')
    return tuple(sorted(out_indices))


class BaseBackbone(BaseModule):
    """``out_indices``, ``frozen_stages``, ``norm_eval``, ``with_cp``, Pretrained.

    Subclasses implement :meth:`stage_parts` (what stage ``i`` owns; 0 is the stem)
    and :meth:`unused_parts` (what the outputs named by ``out_indices`` do not
    need), extend :meth:`init_scratch` with their own parameters, call
    :meth:`run_layer` for each layer so that ``with_cp`` applies, and stop their
    forward after the last output.

    Args:
        num_stages (int): number of stages (or layers) ``out_indices`` indexes.
        out_indices (int | sequence[int]): outputs to return; negative indices
            count from the end. Modules after the last output are neither run nor
            trained (``requires_grad=False``), so DDP needs no
            ``find_unused_parameters``; they stay in the state dict.
        frozen_stages (int): -1 trains everything; 0 freezes the stem; n > 0 also
            freezes stages 1..n (weights fixed, dropout/BN in eval mode).
        norm_eval (bool): keep BatchNorm layers in eval mode while training.
        with_cp (bool): activation checkpointing for every layer.
        pretrained (str, optional): deprecated, as in mmseg: mmseg's
            ``EncoderDecoder`` passes the model-level ``pretrained`` here; it
            becomes ``init_cfg=dict(type='Pretrained', checkpoint=pretrained)``.
        init_cfg (dict | list[dict]): initialisers; a
            ``dict(type='Pretrained', checkpoint=..., prefix=None, strict=None)``
            entry loads a bare backbone state dict or a model checkpoint
            (``backbone.`` keys found automatically), resizes position embeddings
            and reports missing/unexpected/mismatched keys; it fails when less
            than half the backbone matches unless ``strict=False`` (see
            :func:`mmhybrid.models.utils.load_pretrained`). Other entries go to
            mmengine's ``initialize`` first; Pretrained entries are applied last,
            as mmengine does.
    """
    pos_embed_keys = ('pos_embed', )
    num_extra_tokens = 0
    # smallest input side the backbone runs on (patch stems pad any input)
    min_input_size = 1
    # what out_indices counts, for messages
    out_unit = 'stages'

    def __init__(self, num_stages, frozen_stages=-1, norm_eval=False,
                 with_cp=False, init_cfg=None, out_indices=-1, pretrained=None):
        if pretrained is not None:
            if init_cfg is not None:
                raise ValueError(
                    'init_cfg and pretrained cannot be set at the same time '
                    '(mmseg passes the model-level pretrained to the backbone): '
                    'keep one of them')
            if not isinstance(pretrained, str):
                raise TypeError(f'pretrained must be a str or None, got '
                                f'{type(pretrained).__name__}')
            warnings.warn(
                f'{type(self).__name__}: pretrained is deprecated, using '
                f'init_cfg=dict(type="Pretrained", checkpoint={pretrained!r})')
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        super().__init__(init_cfg)
        if not -1 <= frozen_stages <= num_stages:
            raise ValueError(f'frozen_stages must be in [-1, {num_stages}], '
                             f'got {frozen_stages}')
        self.out_indices = parse_out_indices(out_indices, num_stages,
                                             type(self).__name__, self.out_unit)
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp

    def stage_parts(self, index):
        """Modules and parameters owned by stage ``index`` (0 = stem)."""
        raise NotImplementedError

    def unused_parts(self):
        """Modules and parameters after the last output (not run, not trained)."""
        return []

    def init_scratch(self):
        """Transformer defaults for training from scratch: truncated-normal (0.02)
        linear weights and position embeddings, zero biases, unit LayerNorms."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                trunc_normal_(m.weight, std=.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for key in self.pos_embed_keys:
            if getattr(self, key, None) is not None:
                trunc_normal_(getattr(self, key), std=.02)

    def check_input(self, x):
        """A (B, C, H, W) batch with the stem's channels and at least
        ``min_input_size`` pixels per side."""
        channels = self.patch_embed.projection.in_channels
        name = type(self).__name__
        if x.dim() != 4 or x.shape[1] != channels:
            raise ValueError(f'{name} expects a (B, C, H, W) image batch with C = '
                             f'{channels}, got shape {tuple(x.shape)}')
        if min(x.shape[-2:]) < self.min_input_size:
            raise ValueError(f'{name} needs images of at least {self.min_input_size}'
                             f'x{self.min_input_size} pixels, got '
                             f'{x.shape[-2]}x{x.shape[-1]}: resize or pad the input')

    def run_layer(self, layer, *args):
        if self.with_cp and self.training and any(
                getattr(a, 'requires_grad', False) for a in args):
            return cp.checkpoint(layer, *args, use_reentrant=False)
        return layer(*args)

    def init_weights(self):
        self.init_scratch()
        cfgs = self.init_cfg or []
        cfgs = [cfgs] if isinstance(cfgs, dict) else list(cfgs)
        pretrained = [c for c in cfgs if c.get('type') == 'Pretrained']
        others = [c for c in cfgs if c.get('type') != 'Pretrained']
        if others:
            initialize(self, others)
        for cfg in pretrained:
            load_pretrained(
                self, cfg['checkpoint'], prefix=cfg.get('prefix'),
                map_location=cfg.get('map_location', 'cpu'),
                pos_embed_keys=self.pos_embed_keys,
                num_extra_tokens=self.num_extra_tokens, strict=cfg.get('strict'))
        self._is_init = True
        self._freeze_stages()

    def _freeze_stages(self):
        frozen = [part for index in range(self.frozen_stages + 1)
                  for part in self.stage_parts(index)]
        for part in frozen + list(self.unused_parts()):
            if isinstance(part, nn.Parameter):
                part.requires_grad = False
                continue
            part.eval()
            for param in part.parameters():
                param.requires_grad = False

    def train(self, mode=True):
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self
