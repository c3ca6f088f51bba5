"""A simple feature pyramid for plain (single-scale) ViT backbones.

The idea of ViTDet (Li et al., "Exploring Plain Vision Transformer Backbones for
Object Detection", 2022, Sec. 3): build every pyramid level from the last
stride-16 map alone, by 2x2 transposed convolutions (up), identity, or 2x2
max-pooling (down), each followed by a 1x1 and a 3x3 conv. mmdet 3.3.0 keeps its
``SimpleFPN`` in ``projects/ViTDet``, outside the installed package, hence this one.
"""
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import ConvModule, build_norm_layer
from mmengine.model import BaseModule

from mmhybrid.registry import register_model


def _resampler(c, scale, norm_cfg):
    """The module taking a stride-s, c-channel map to stride s/scale (c/scale
    channels when upsampling)."""
    if scale == 4.0:
        return nn.Sequential(nn.ConvTranspose2d(c, c // 2, 2, stride=2),
                             build_norm_layer(norm_cfg, c // 2)[1], nn.GELU(),
                             nn.ConvTranspose2d(c // 2, c // 4, 2, stride=2))
    if scale in (2.0, 1.0, 0.5):
        return (nn.ConvTranspose2d(c, c // 2, 2, stride=2) if scale == 2.0 else
                nn.Identity() if scale == 1.0 else nn.MaxPool2d(2, stride=2))
    raise ValueError(f'scale {scale} not supported; use 4, 2, 1 or 0.5')


@register_model()
class SimpleFeaturePyramid(BaseModule):
    """Pyramid maps from the last backbone output.

    Args:
        in_channels (int): channels of the backbone map (a list is accepted; its
            last entry is used, matching ``inputs[-1]``).
        out_channels (int): channels of every level.
        scales (sequence[float]): resampling factors, from fine to coarse.
        num_outs (int, optional): with ``num_outs > len(scales)`` extra levels are
            taken by stride-2 subsampling of the last one (mmdet FPN's ``'pool'``),
            e.g. 5 levels for Mask R-CNN's RPN.
        norm_cfg (dict): norm after the convs (default channel LayerNorm).
    """

    def __init__(self, in_channels, out_channels, scales=(4.0, 2.0, 1.0, 0.5),
                 num_outs=None, norm_cfg=dict(type='LayerNorm2d'),
                 init_cfg=None):
        super().__init__(init_cfg)
        if not isinstance(in_channels, int):
            in_channels = list(in_channels)[-1]
        self.num_outs = num_outs or len(scales)
        if self.num_outs < len(scales):
            raise ValueError(f'num_outs {num_outs} < number of scales {scales}')
        self.resamplers = nn.ModuleList()
        self.lateral_convs = nn.ModuleList()
        self.output_convs = nn.ModuleList()
        for scale in map(float, scales):
            self.resamplers.append(_resampler(in_channels, scale, norm_cfg))
            channels = int(in_channels // max(scale, 1))
            self.lateral_convs.append(ConvModule(
                channels, out_channels, 1, norm_cfg=norm_cfg, act_cfg=None,
                bias=False))
            self.output_convs.append(ConvModule(
                out_channels, out_channels, 3, padding=1, norm_cfg=norm_cfg,
                act_cfg=None, bias=False))

    def forward(self, inputs):
        x = inputs[-1]
        outs = [out_conv(lateral(resample(x))) for resample, lateral, out_conv
                in zip(self.resamplers, self.lateral_convs, self.output_convs)]
        while len(outs) < self.num_outs:
            outs.append(F.max_pool2d(outs[-1], 1, stride=2))
        return tuple(outs)
