"""CSWin's merge block: a 3x3 stride-2 convolution then LayerNorm."""
import torch.nn as nn
from mmcv.cnn import build_norm_layer

from mmhybrid.ops.streaming import map_to_tokens, tokens_to_map


class ConvMerging(nn.Module):
    """(B, H*W, C_in) -> (B, ceil(H/2)*ceil(W/2), C_out); same call as
    :class:`~mmhybrid.layers.PatchMerging`: ``x, out_hw = merge(x, hw_shape)``."""

    def __init__(self, in_channels, out_channels, norm_cfg=dict(type='LN')):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1)
        self.norm = build_norm_layer(norm_cfg, out_channels)[1]

    def forward(self, x, hw_shape):
        x = self.conv(tokens_to_map(x, hw_shape))
        return self.norm(map_to_tokens(x)), tuple(x.shape[2:])
