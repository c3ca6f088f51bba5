"""The one residual block of every mmhybrid backbone, and the state it passes on."""
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import DropPath

from .layer_scale import LayerScale


class MixerState(NamedTuple):
    """What flows from one block to the next besides the tokens (a named tuple:
    activation checkpointing, torch.compile and torch.export see through it).

    Attributes:
        hidden: the per-token hidden state of the last linear mixer (the WKV
            read-out of SoLA Eq. 9, the Gated DeltaNet read-out), which a Hidden
            State Bridge (SoLA Eq. 10) carries into a deeper softmax layer.
        history: the mixed logits ``A_{l-1}`` of the last historical softmax
            layer (HAViT Eq. 5), read by the next one.
    """
    hidden: Optional[torch.Tensor] = None
    history: Optional[torch.Tensor] = None


class Block(nn.Module):
    """Pre-norm residual block: ``x + DropPath(LS(mixer(LN(x))))``, then the same
    around the MLP.

    Every layer of every backbone is one of these; layers differ only in their
    token mixer (``mmhybrid.layers.mixers``) and MLP (``mmhybrid.layers.mlp``).
    Module names (``norm1``, ``attn``, ``ls1``, ``norm2``, ``ffn``, ``ls2``) are
    the state-dict keys of every checkpoint.

    Args:
        dims (int): channels.
        mixer (nn.Module): ``mixer(x, hw_shape, state) -> (out, state)``.
        mlp (nn.Module): ``mlp(x, hw_shape) -> out``.
        drop_path (float): stochastic depth of both branches.
        layer_scale_init_value (float, optional): LayerScale (CaiT) on both
            branches; None disables it.
        norm_cfg (dict): the two pre-norms.
        extra_tokens (int): tokens before the ``H*W`` map (a class token). A
            mixer whose ``reads_grid`` is True (the default: it reads the tokens
            as the map) mixes the map tokens only; the extra ones pass its branch
            unchanged (a zero mixer output).
    """

    def __init__(self, dims, mixer, mlp, drop_path=0., layer_scale_init_value=None,
                 norm_cfg=dict(type='LN'), extra_tokens=0):
        super().__init__()
        self.extra_tokens = extra_tokens if getattr(mixer, 'reads_grid', True) else 0
        self.norm1 = build_norm_layer(norm_cfg, dims)[1]
        self.attn = mixer
        self.ls1 = LayerScale(dims, layer_scale_init_value)
        self.norm2 = build_norm_layer(norm_cfg, dims)[1]
        self.ffn = mlp
        self.ls2 = LayerScale(dims, layer_scale_init_value)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def mix(self, x, hw_shape, state):
        if not self.extra_tokens:
            return self.attn(x, hw_shape, state)
        out, state = self.attn(x[:, self.extra_tokens:], hw_shape, state)
        return F.pad(out, (0, 0, self.extra_tokens, 0)), state

    def forward(self, x, hw_shape, state=MixerState()):
        out, state = self.mix(self.norm1(x), hw_shape, state)
        x = x + self.drop_path(self.ls1(out))
        x = x + self.drop_path(self.ls2(self.ffn(self.norm2(x), hw_shape)))
        return x, state
