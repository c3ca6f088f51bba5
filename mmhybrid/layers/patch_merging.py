"""Swin's 2x2 patch merging, gathered token-major."""
import torch.nn as nn
from mmcv.cnn import build_norm_layer

from mmhybrid.ops.padding import pad_if_needed


class PatchMerging(nn.Module):
    """(B, H*W, C_in) -> (B, ceil(H/2)*ceil(W/2), C_out): each 2x2 neighbourhood's
    4 C_in features, LayerNorm, a linear reduction. ``x, out_hw = merge(x, hw)``.

    The same module as mmcv's ``PatchMerging`` with ``kernel_size=2`` and
    ``padding='corner'`` (its parameter names ``norm`` and ``reduction``, its
    feature order (c, row, col), zero padding of an odd last row/column), but the
    neighbourhoods are gathered from the tokens in one copy, where mmcv's
    ``nn.Unfold`` transposes to a channel-first map, unfolds and transposes back
    (three passes; 1.5x slower at 256^2 tokens of 96 channels, one CPU thread).
    Under a tracer the padding is size arithmetic, so one graph serves both
    parities of H and W.
    """

    def __init__(self, in_channels, out_channels, norm_cfg=dict(type='LN')):
        super().__init__()
        self.norm = build_norm_layer(norm_cfg, 4 * in_channels)[1]
        self.reduction = nn.Linear(4 * in_channels, out_channels, bias=False)

    def forward(self, x, hw_shape):
        B, N, C = x.shape
        H, W = hw_shape
        if N != H * W:
            raise ValueError(f'{N} tokens do not make a {H}x{W} map')
        x = x.view(B, H, W, C)
        x = pad_if_needed(x, (0, 0, 0, W % 2, 0, H % 2))
        h, w = (H + H % 2) // 2, (W + W % 2) // 2
        x = x.reshape(B, h, 2, w, 2, C).permute(0, 1, 3, 5, 2, 4).reshape(B, h * w, 4 * C)
        return self.reduction(self.norm(x)), (h, w)
