"""The global softmax-attention layer of SoLA-Vision (Sec. 4.4): ViT MHSA + conv MLP."""
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import DropPath

from mmhybrid.ops.attention import softmax_attention
from .historical_attention import build_history
from .layer_scale import LayerScale


class MultiheadSelfAttention(nn.Module):
    """Global MHSA, ``softmax(QK^T / sqrt(d)) V`` via :func:`softmax_attention`.

    Args:
        head_dim (int, optional): channels per head; default ``dims // num_heads``
            (otherwise q, k, v are ``num_heads * head_dim`` wide).
        history (dict, optional): historical attention (HAViT, see
            :class:`~mmhybrid.layers.HistoricalAttention`); then
            :meth:`forward` takes and returns the history.
    """

    def __init__(self, dims, num_heads, qkv_bias=True, attn_drop=0.,
                 head_dim=None, history=None):
        super().__init__()
        if head_dim is None and dims % num_heads:
            raise ValueError(f'dims {dims} not divisible by num_heads {num_heads}')
        inner = dims if head_dim is None else num_heads * head_dim
        self.num_heads = num_heads
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(dims, inner * 3, bias=qkv_bias)
        self.proj = nn.Linear(inner, dims)
        self.historical = build_history(history, num_heads)

    def forward(self, x, history=None):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.num_heads, -1).permute(
            2, 0, 3, 1, 4)
        if self.historical is not None:  # HAViT Eq. 5-7
            x, history = self.historical(
                q, k, v, history, dropout_p=self.attn_drop if self.training else 0.)
            return self.proj(x.transpose(1, 2).reshape(B, N, -1)), history
        x = softmax_attention(q, k, v,
                              dropout_p=self.attn_drop if self.training else 0.)
        return self.proj(x.transpose(1, 2).reshape(B, N, -1))


class ConvMlp(nn.Module):
    """MLP with a 3x3 depth-wise conv on the hidden map: fc1, dwconv, GELU, fc2."""

    def __init__(self, dims, mlp_ratio=4.):
        super().__init__()
        hidden = int(dims * mlp_ratio)
        self.fc1 = nn.Linear(dims, hidden)
        self.dwconv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dims)

    def forward(self, x, hw_shape):
        B, N, _ = x.shape
        x = self.fc1(x)
        x = x.transpose(1, 2).reshape(B, -1, *hw_shape)
        x = self.dwconv(x).flatten(2).transpose(1, 2)
        return self.fc2(self.act(x))


class SoftmaxLayer(nn.Module):
    """Pre-norm residual layer: global MHSA, then conv MLP ('S' in a schedule).

    Returns ``(x, None)`` so that it is interchangeable with :class:`WKVLayer`;
    with ``history`` (HAViT) it takes the previous layer's history and returns
    ``(x, new_history)``.
    """

    def __init__(self, dims, num_heads, mlp_ratio=4., qkv_bias=True,
                 drop_path=0., layer_scale_init_value=None,
                 norm_cfg=dict(type='LN'), history=None):
        super().__init__()
        self.norm1 = build_norm_layer(norm_cfg, dims)[1]
        self.attn = MultiheadSelfAttention(dims, num_heads, qkv_bias,
                                           history=history)
        self.ls1 = LayerScale(dims, layer_scale_init_value)
        self.norm2 = build_norm_layer(norm_cfg, dims)[1]
        self.ffn = ConvMlp(dims, mlp_ratio)
        self.ls2 = LayerScale(dims, layer_scale_init_value)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x, hw_shape, history=None):
        if self.attn.historical is None:
            out = self.attn(self.norm1(x))
        else:
            out, history = self.attn(self.norm1(x), history)
        x = x + self.drop_path(self.ls1(out))
        x = x + self.drop_path(self.ls2(self.ffn(self.norm2(x), hw_shape)))
        return x, history
