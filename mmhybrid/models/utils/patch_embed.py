"""The patch stem with its padding computed from the input size in the graph."""
import torch.nn as nn
from mmcv.cnn.bricks.transformer import PatchEmbed as MMCVPatchEmbed

from mmhybrid.ops.padding import pad_if_needed


class StemPadding(nn.Module):
    """Zero padding before a convolution of ``kernel_size``, ``stride`` and
    ``dilation`` such that it gives ceil(H / stride) x ceil(W / stride) outputs for
    any H, W: ``lead`` rows / columns on the top / left, the rest at the bottom /
    right.

    With ``lead=0`` and the kernel as large as the stride this is mmcv's
    ``AdaptivePadding(padding='corner')``; the amounts are integer arithmetic on
    the input's size (``(-H) % stride``, no ``math.ceil``), so under a tracer they
    stay in the graph (one ONNX / torch.export graph serves every H, W) instead of
    being frozen at the export size.
    """

    def __init__(self, kernel_size, stride, dilation=1, lead=0):
        super().__init__()
        # rows the conv reads past the last stride step: padded beyond the
        # multiple of the stride, after the lead ones
        self.extra = dilation * (kernel_size - 1) + 1 - stride - lead
        if lead < 0 or self.extra < 0:
            raise ValueError(f'a {kernel_size}x{kernel_size} stride-{stride} stem '
                             f'(dilation {dilation}) cannot pad {lead} in front: use '
                             f'0..{lead + self.extra}')
        self.stride, self.lead = stride, lead

    def forward(self, x):
        H, W = x.shape[-2:]
        bottom = (-H) % self.stride + self.extra
        right = (-W) % self.stride + self.extra
        return pad_if_needed(x, (self.lead, right, self.lead, bottom))


class PatchEmbed(MMCVPatchEmbed):
    """mmcv's ``PatchEmbed`` (same arguments, modules and state dict) whose
    padding is a :class:`StemPadding`: ceil(H / stride) x ceil(W / stride) tokens
    for every input size, in eager PyTorch and in exported graphs alike.

    ``padding``: ``'corner'`` (mmcv's default: zeros at the bottom and right as
    the last patch needs), or an int ``p``, the padding of an official stem's
    convolution (CSWin's 7x7 stride-4 stem pads 2): ``p`` zeros on the top and
    left, and at the bottom and right as many as ceil(H / stride) outputs need.
    Wherever the official convolution gives ceil(H / stride) outputs (CSWin: H a
    multiple of 4) the tokens are the official ones; elsewhere it gives fewer.
    """

    def __init__(self, *args, kernel_size=16, stride=None, padding='corner',
                 dilation=1, **kwargs):
        if padding != 'corner' and not isinstance(padding, int):
            raise ValueError(f"padding must be 'corner' or an int, got {padding!r}")
        stride = stride or kernel_size
        super().__init__(*args, kernel_size=kernel_size, stride=stride, padding=0,
                         dilation=dilation, **kwargs)
        self.adaptive_padding = StemPadding(  # mmcv's forward applies it first
            kernel_size, stride, dilation, lead=0 if padding == 'corner' else padding)
