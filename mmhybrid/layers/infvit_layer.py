"""The Pre-LN ViT block of InfViT (Fig. 2a) with a pluggable token mixer."""
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import DropPath

from .historical_attention import is_historical
from .infsa_attention import InfSAttention
from .layer_scale import LayerScale
from .mlp import Mlp
from .softmax_layer import MultiheadSelfAttention

ATTN_TYPES = {'P': 'pure', 'L': 'linear', 'S': 'softmax'}


class InfViTLayer(nn.Module):
    """``x + attn(LN(x))`` then ``x + MLP(LN(x))``.

    Args:
        attn_type (str): ``'pure'`` / ``'linear'`` InfSA, or ``'softmax'`` (the
            standard ViT baseline of equal depth, for comparisons).
        tie_qk, gamma_init, depth, discount, local_path: see
            :class:`InfSAttention`.
        head_dim, history: see :class:`MultiheadSelfAttention` (softmax only);
            with ``history`` (HAViT) the layer takes and returns the history:
            ``x, history = layer(x, hw, history)``.
    """

    def __init__(self, dims, num_heads, attn_type='linear', mlp_ratio=4.,
                 qkv_bias=True, tie_qk=None, gamma_init=0.7, depth=1,
                 discount='layer', local_path=None, drop_path=0.,
                 layer_scale_init_value=None, norm_cfg=dict(type='LN', eps=1e-6),
                 head_dim=None, history=None):
        super().__init__()
        if attn_type not in ATTN_TYPES.values():
            raise ValueError(f'unknown attn_type {attn_type!r}; use '
                             f'{sorted(ATTN_TYPES.values())}')
        if attn_type != 'softmax' and (head_dim, history) != (None, None):
            raise ValueError('head_dim and history apply to softmax layers only, '
                             f'not {attn_type!r}')
        self.attn_type = attn_type
        self.norm1 = build_norm_layer(norm_cfg, dims)[1]
        if attn_type == 'softmax':
            self.attn = MultiheadSelfAttention(dims, num_heads, qkv_bias,
                                               head_dim=head_dim, history=history)
        else:
            self.attn = InfSAttention(
                dims, num_heads, attn_type, tie_qk=tie_qk, qkv_bias=qkv_bias,
                gamma_init=gamma_init, depth=depth, discount=discount,
                local_path=local_path)
        self.ls1 = LayerScale(dims, layer_scale_init_value)
        self.norm2 = build_norm_layer(norm_cfg, dims)[1]
        self.ffn = Mlp(dims, mlp_ratio)
        self.ls2 = LayerScale(dims, layer_scale_init_value)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x, hw_shape, history=None):
        h = self.norm1(x)
        if is_historical(self):
            h, history = self.attn(h, history)
        else:
            h = self.attn(h) if self.attn_type == 'softmax' else self.attn(h, hw_shape)
        x = x + self.drop_path(self.ls1(h))
        x = x + self.drop_path(self.ls2(self.ffn(self.norm2(x))))
        return (x, history) if is_historical(self) else x
