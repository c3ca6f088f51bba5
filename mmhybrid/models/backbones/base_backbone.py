"""Behaviour every mmhybrid backbone shares with OpenMMLab's own backbones."""
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmengine.model import BaseModule
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


def check_out_indices(owner, out_indices, num, unit='stages'):
    """``out_indices`` (an int or a sequence, negative counting from the end) as a
    tuple of indices in ``0..num - 1``."""
    indices = (out_indices, ) if isinstance(out_indices, int) else tuple(out_indices)
    if not indices or any(not -num <= i < num for i in indices):
        raise ValueError(f'{owner}: out_indices {out_indices} out of range; it has '
                         f'{num} {unit}, use indices in 0..{num - 1} (or '
                         f'-{num}..-1), at least one')
    return tuple(i % num for i in indices)


class BaseBackbone(BaseModule):
    """``frozen_stages``, ``norm_eval``, ``with_cp`` and Pretrained ``init_cfg``.

    Subclasses implement :meth:`stage_parts` (what stage ``i`` owns; 0 is the stem),
    extend :meth:`init_scratch` with their own parameters, and call
    :meth:`run_layer` for each layer so that ``with_cp`` applies.

    Args:
        frozen_stages (int): -1 trains everything; 0 freezes the stem; n > 0 also
            freezes stages 1..n (weights fixed, dropout/BN in eval mode).
        norm_eval (bool): keep BatchNorm layers in eval mode while training.
        with_cp (bool): activation checkpointing for every layer.
        init_cfg (dict): ``dict(type='Pretrained', checkpoint=..., prefix=None,
            strict=None)`` loads a bare backbone state dict or a model checkpoint
            (``backbone.`` keys found automatically), resizes position
            embeddings and reports missing/unexpected/mismatched keys; it fails
            when less than half the backbone matches unless ``strict=False``
            (see :func:`mmhybrid.models.utils.load_pretrained`). Other
            initialisers are passed to mmengine.
    """
    pos_embed_keys = ('pos_embed', )
    num_extra_tokens = 0
    # smallest input side the backbone runs on (patch stems pad any input)
    min_input_size = 1

    def __init__(self, num_stages, frozen_stages=-1, norm_eval=False,
                 with_cp=False, init_cfg=None):
        super().__init__(init_cfg)
        if not -1 <= frozen_stages <= num_stages:
            raise ValueError(f'frozen_stages must be in [-1, {num_stages}], '
                             f'got {frozen_stages}')
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp

    def stage_parts(self, index):
        """Modules and parameters owned by stage ``index`` (0 = stem)."""
        raise NotImplementedError

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

    @staticmethod
    def convert_checkpoint(state_dict):
        """Map a public checkpoint layout to ours; identity by default."""
        return state_dict

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
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            load_pretrained(
                self, cfg['checkpoint'], prefix=cfg.get('prefix'),
                pos_embed_keys=self.pos_embed_keys,
                num_extra_tokens=self.num_extra_tokens,
                converter=self.convert_checkpoint, strict=cfg.get('strict'))
        elif cfg is not None:
            super().init_weights()
        self._is_init = True
        self._freeze_stages()

    def _freeze_stages(self):
        for index in range(self.frozen_stages + 1):
            for part in self.stage_parts(index):
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
