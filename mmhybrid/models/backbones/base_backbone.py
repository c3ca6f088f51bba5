"""Behaviour every mmhybrid backbone shares with OpenMMLab's own backbones."""
import warnings

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule, initialize
from mmengine.model.weight_init import trunc_normal_
from torch.nn.modules.batchnorm import _BatchNorm

from ..utils import PatchEmbed, load_pretrained, resize_pos_embed

# OpenMMLab habit (mmpretrain's arch_zoo lists 't' and 'tiny' alike)
ARCH_ALIASES = {'tiny': 't', 'small': 's', 'base': 'b', 'large': 'l'}


class ArchError(KeyError):
    """An unknown ``arch`` name: a KeyError as upstream backbones raise, printed
    without KeyError's quotes."""

    def __str__(self):
        return str(self.args[0])


def resolve_arch(arch, zoo, owner, required, **overrides):
    """A copy of the settings of ``arch`` (a key of ``zoo``, an alias of one such as
    'tiny', any case, or a dict), updated by the ``overrides`` that are not None;
    it must hold every key of ``required``."""
    if not isinstance(arch, dict):
        key = arch.lower() if isinstance(arch, str) else arch
        key = key if key in zoo else ARCH_ALIASES.get(key, key)
        if key not in zoo:
            aliases = {v: k for k, v in ARCH_ALIASES.items()}
            names = ', '.join(repr(k) + (f' ({aliases[k]!r})' if k in aliases else '')
                              for k in zoo)
            raise ArchError(f'unknown {owner} arch {arch!r}; use one of {names}, '
                            f'or a dict with {", ".join(required)}')
        arch = zoo[key]
    arch = dict(arch, **{k: v for k, v in overrides.items() if v is not None})
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
    """``3``, ``(1, 3)`` or ``[-1]`` -> sorted tuple in ``[0, num_outputs)``;
    negative indices count from the end (as mmpretrain and mmseg's ViT allow)."""
    given, n = out_indices, num_outputs
    prefix = f'{owner}: out_indices {given!r}' if owner else f'out_indices {given!r}'
    try:
        out_indices = [int(i) for i in ((out_indices, ) if isinstance(out_indices, int)
                                        else out_indices)]
    except (TypeError, ValueError):
        raise TypeError(f'{prefix} must be an int or a sequence of ints') from None
    if not out_indices or any(not -n <= i < n for i in out_indices):
        raise ValueError(f'{prefix} out of range: it has {n} {unit}, use 0..{n - 1} '
                         f'(or -{n}..-1 from the end)'
                         f'{"; it is empty, name at least one" * (not out_indices)}')
    out_indices = [i % n for i in out_indices]
    if len(set(out_indices)) != len(out_indices):
        raise ValueError(f'{prefix} names an output twice')
    return tuple(sorted(out_indices))


class BaseBackbone(BaseModule):
    """``out_indices``, ``frozen_stages``, ``norm_eval``, ``with_cp``, Pretrained.

    Subclasses implement :meth:`stage_modules` (what ``frozen_stages`` freezes with
    stage ``i``) and :meth:`unused_parts` (what the outputs named by ``out_indices``
    do not need), call :meth:`build_outputs` last, run each layer through
    :meth:`run_layer` so that ``with_cp`` applies, and stop their forward after
    the last output.

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
        init_cfg (dict | list[dict]): initialisers, applied after mmengine's
            others as mmengine does: ``dict(type='Pretrained', checkpoint=...,
            prefix=None, strict=None)`` loads a backbone or model checkpoint
            through :func:`mmhybrid.models.utils.load_pretrained` (``backbone.``
            keys found, position embeddings resized, mismatches reported).
    """
    pos_embed_keys = ('pos_embed', )
    num_extra_tokens = 0
    # smallest input side the backbone runs on (the stem pads any input)
    min_input_size = 1
    # what out_indices counts, for messages
    out_unit = 'stages'

    @property
    def no_weight_decay(self):
        """Parameters that take no weight decay (position embeddings, class
        token); modules inside declare theirs the same way."""
        return (*self.pos_embed_keys, 'cls_token')

    def __init__(self, num_stages, frozen_stages=-1, norm_eval=False,
                 with_cp=False, init_cfg=None, out_indices=-1, pretrained=None):
        if pretrained is not None:
            if init_cfg is not None:
                raise ValueError('init_cfg and pretrained cannot be set at the same '
                                 'time (mmseg passes the model-level pretrained to '
                                 'the backbone): keep one of them')
            if not isinstance(pretrained, str):
                raise TypeError(f'pretrained must be a str or None, got '
                                f'{type(pretrained).__name__}')
            warnings.warn(f'{type(self).__name__}: pretrained is deprecated, using init_'
                          f'cfg=dict(type="Pretrained", checkpoint={pretrained!r})')
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        super().__init__(init_cfg)
        if not -1 <= frozen_stages <= num_stages:
            raise ValueError(f'frozen_stages must be in [-1, {num_stages}], '
                             f'got {frozen_stages}')
        self.num_stages = num_stages  # what out_indices can name
        self.out_indices = parse_out_indices(out_indices, num_stages,
                                             type(self).__name__, self.out_unit)
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp

    def stage_parts(self, index):
        """What stage ``index`` owns: for 0 the patch stem, class token and
        position embedding (those present), else :meth:`stage_modules` of stage
        ``index - 1`` and its output norm."""
        if index == 0:
            return [p for p in (getattr(self, k) for k in (
                'patch_embed', 'cls_token', *self.pos_embed_keys)) if p is not None]
        norm = getattr(self, f'norm{index - 1}', None)
        return [*self.stage_modules(index - 1), *([norm] if norm is not None else [])]

    def unused_parts(self):
        """Modules and parameters after the last output (not run, not trained)."""
        return []

    def build_outputs(self, channels, norm_cfg):
        """A norm per output ``i`` (``norm{i}``, ``channels[i]`` wide), then freeze."""
        for i in self.out_indices:
            self.add_module(f'norm{i}', build_norm_layer(norm_cfg, channels[i])[1])
        self._freeze_stages()

    def build_stem(self, in_channels, dims, img_size, norm_cfg, drop_rate,
                   pos_embed=True, **conv):
        """``patch_embed`` (:class:`~mmhybrid.models.utils.PatchEmbed`, mmcv's with
        its padding in the graph, of ``conv``: ``kernel_size``, ``stride``,
        ``padding``; ceil(H / stride) x ceil(W / stride) tokens), ``cls_token``
        if ``num_extra_tokens``, the position embedding ``pos_embed_keys[0]`` on the ``img_size / stride``
        grid (None without ``pos_embed``) and ``drop_after_pos``."""
        self.patch_embed = PatchEmbed(in_channels=in_channels, embed_dims=dims,
                                      norm_cfg=norm_cfg, **conv)
        self.pos_grid = (img_size // conv['stride'], ) * 2
        self.cls_token = (nn.Parameter(torch.zeros(1, 1, dims))
                          if self.num_extra_tokens else None)
        tokens = self.num_extra_tokens + self.pos_grid[0] * self.pos_grid[1]
        setattr(self, self.pos_embed_keys[0],
                nn.Parameter(torch.zeros(1, tokens, dims)) if pos_embed else None)
        self.drop_after_pos = nn.Dropout(drop_rate)

    def embed(self, x):
        """(B, C, H, W) image -> (tokens with the class token and the resized
        position embedding, hw) after checking the input."""
        channels = self.patch_embed.projection.in_channels
        name, m = type(self).__name__, self.min_input_size
        if x.dim() != 4 or x.shape[1] != channels:
            raise ValueError(f'{name} expects a (B, C, H, W) image batch with C = '
                             f'{channels}, got shape {tuple(x.shape)}')
        if min(x.shape[-2:]) < m:
            raise ValueError(f'{name} needs images of at least {m}x{m} pixels, got '
                             f'{x.shape[-2]}x{x.shape[-1]}: resize or pad the input')
        # a channels-last image: the stem conv then writes the token layout (no
        # transposing copy before its norm); the stem 1.9x faster at 1024^2 (4x4
        # stride 4, one CPU thread)
        x, hw = self.patch_embed(x.contiguous(memory_format=torch.channels_last))
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        pos_embed = getattr(self, self.pos_embed_keys[0])
        if pos_embed is not None:
            x = x + resize_pos_embed(pos_embed, self.pos_grid, hw,
                                     self.num_extra_tokens)
        return self.drop_after_pos(x), hw

    def init_scratch(self):
        """Transformer defaults for training from scratch: truncated-normal (0.02)
        linear weights, position embeddings and class token, zero biases, unit
        LayerNorms; then each mixer with a depth-dependent init (WKV's decays)
        gets its ``init_decay(depth_ratio)``, 0 for the first such mixer, 1 for
        the last."""
        initialize(self, [dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
                          dict(type='Constant', layer='LayerNorm', val=1., bias=0.)])
        for key in (*self.pos_embed_keys, 'cls_token'):
            if getattr(self, key, None) is not None:
                trunc_normal_(getattr(self, key), std=.02)
        decaying = [m for m in self.modules() if hasattr(m, 'init_decay')]
        for i, mixer in enumerate(decaying):
            mixer.init_decay(i / max(len(decaying) - 1, 1))

    def run_layer(self, layer, *args):
        if self.with_cp and self.training and any(
                getattr(a, 'requires_grad', False) for a in args):
            return cp.checkpoint(layer, *args, use_reentrant=False)
        return layer(*args)

    def init_weights(self):
        self.init_scratch()
        cfgs = self.init_cfg or []
        cfgs = [cfgs] if isinstance(cfgs, dict) else list(cfgs)
        initialize(self, [c for c in cfgs if c.get('type') != 'Pretrained'])
        for cfg in cfgs:
            if cfg.get('type') == 'Pretrained':
                load_pretrained(self, cfg['checkpoint'], prefix=cfg.get('prefix'),
                                map_location=cfg.get('map_location', 'cpu'),
                                strict=cfg.get('strict'))
        self._is_init = True
        self._freeze_stages()

    def _freeze_stages(self):
        frozen = [part for index in range(self.frozen_stages + 1)
                  for part in self.stage_parts(index)]
        for part in frozen + list(self.unused_parts()):
            part.requires_grad_(False)
            if isinstance(part, nn.Module):
                part.eval()

    def train(self, mode=True):
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self
