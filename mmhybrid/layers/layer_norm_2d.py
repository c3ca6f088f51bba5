"""LayerNorm over the channels of (B, C, H, W) maps (ViTDet's neck norm)."""
import torch.nn as nn

from mmhybrid.registry import register_model


@register_model()
class LayerNorm2d(nn.LayerNorm):
    """``nn.LayerNorm(C)`` applied at every pixel of a (B, C, H, W) map.

    Registered so that ``norm_cfg=dict(type='LayerNorm2d')`` works in mmcv bricks.
    """

    def __init__(self, num_channels, eps=1e-6, **kwargs):
        super().__init__(num_channels, eps=eps, **kwargs)

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
