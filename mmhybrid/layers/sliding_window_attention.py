"""2D sliding-window (neighbourhood) attention layer ('W' in a schedule).

InfiniteVL's SWA layer (Sec. 3.2, Supplement 6) on the token grid of an image:
each token attends to the window x window tokens around it.
"""
import torch.nn as nn

from mmhybrid.ops import sliding_window_attention
from .mixer_layer import MixerLayer


class SlidingWindowAttention(nn.Module):
    """Multi-head neighbourhood attention: qkv, :func:`sliding_window_attention`,
    proj. No position bias (like SoLA's global softmax layers, position comes
    from the stem's embedding and the conv MLP)."""

    def __init__(self, dims, num_heads, window_size=7, qkv_bias=True):
        super().__init__()
        if dims % num_heads:
            raise ValueError(f'dims {dims} not divisible by num_heads {num_heads}')
        window = ((window_size, ) * 2 if isinstance(window_size, int) else
                  tuple(window_size))
        if len(window) != 2 or any(w < 1 or w % 2 == 0 for w in window):
            raise ValueError(f'window_size must be an odd int or a pair of odd '
                             f'ints, got {window_size!r}')
        self.num_heads = num_heads
        self.window_size = window
        self.qkv = nn.Linear(dims, dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(dims, dims)

    def forward(self, x, hw_shape):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.num_heads, -1).permute(
            2, 0, 3, 1, 4)
        x = sliding_window_attention(q, k, v, hw_shape, self.window_size)
        return self.proj(x.transpose(1, 2).reshape(B, N, C)), None


class SlidingWindowLayer(MixerLayer):
    """Pre-norm residual layer: sliding-window attention, then conv MLP ('W').

    Returns ``(x, None)`` so that it is interchangeable with the other layers.
    """

    def __init__(self, dims, num_heads, window_size=7, mlp_ratio=4.,
                 qkv_bias=True, drop_path=0., layer_scale_init_value=None,
                 norm_cfg=dict(type='LN')):
        super().__init__(
            dims, SlidingWindowAttention(dims, num_heads, window_size, qkv_bias),
            mlp_ratio, drop_path, layer_scale_init_value, norm_cfg)
