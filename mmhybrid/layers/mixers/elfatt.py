"""ELFATT attention (Eq. 8-11): a global linear head beside a local blockify head."""
import torch

from mmhybrid.ops import block_attention, effatt
from mmhybrid.ops.elfatt import block_window, map_windows, window_block_attention
from mmhybrid.registry import MIXERS
from .base import AttentionMixer, conv_in_windows, from_heads, to_heads


def split_elfatt_heads(dims, num_heads, global_ratio):
    """Channels and heads of the global (EFFATT) and local (blockify) parts.

    The global part takes the first ``c1 = round(global_ratio * dims)`` channels,
    the local part the other ``c2``. A part that owns a whole number of the
    layer's heads keeps them at the full head width (Eq. 9: ELFATT pairs heads);
    otherwise every head is split by channels into a global and a local sub-head
    (Eq. 8), so the part has ``num_heads`` narrower heads.

    Returns:
        ((global_heads, global_head_dims), (local_heads, local_head_dims)),
        with (0, 0) for an empty part.
    """
    if not 0. <= global_ratio <= 1.:
        raise ValueError(f'global_ratio must be in [0, 1], got {global_ratio}')
    c1 = round(dims * global_ratio)
    parts = []
    for channels, fraction in ((c1, global_ratio), (dims - c1, 1. - global_ratio)):
        if channels == 0:
            parts.append((0, 0))
            continue
        whole = num_heads * fraction
        heads = round(whole) if abs(whole - round(whole)) < 1e-6 else num_heads
        if channels % heads:
            raise ValueError(f'{channels} channels of a {dims}-channel, {num_heads}'
                             f'-head layer cannot form {heads} equal heads; '
                             f'choose another global_ratio')
        parts.append((heads, channels // heads))
    return tuple(parts)


@MIXERS.register_module(name='elfatt')
class ELFATTAttention(AttentionMixer):
    r"""Efficient linear fast attention (Eq. 10-11).

    .. math::
        [\mathrm{softmax}(\bar Q)\mathrm{softmax}(\bar K)^\top \bar V + L(\bar V),\;
         g(\mathrm{softmax}(f(\tilde Q) f(\tilde K)^\top/\sqrt d) f(\tilde V)
         + L(f(\tilde V)))]

    The global head is :func:`mmhybrid.ops.effatt`. The blocks ``f`` of the local
    head are, with ``block_layout='2d'``, windows of the token grid
    (:func:`mmhybrid.ops.elfatt.window_block_attention`; square for square block
    sizes, else the most square rectangle; shorter windows at the bottom/right
    edge) with the local channels' LePE inside each window, ``L(f(V))`` of Eq. 10;
    with ``'1d'``, runs of ``block_size`` tokens of the row-major sequence
    (:func:`mmhybrid.ops.block_attention`) with LePE on the whole image (a 3x3
    conv is undefined on a 1D run). ``global_ratio`` is ``c1 / c`` (Table 7): 1
    gives EFFATT, 0 a pure blockify attention.

    Args:
        block_size (int): tokens per block of the local head (Table 4): 49 = 7x7,
            196 = 14x14 windows in the 2D layout (8 = 2x4).
        global_ratio (float): share of channels in the global head.
        block_layout (str): ``'2d'`` windows or ``'1d'`` raster runs.
        lepe (bool): the LePE terms of Eq. 10-11.
        **kwargs: see :class:`AttentionMixer`.
    """
    letter = 'E'
    test_options = dict(block_size=8)

    def __init__(self, dims, num_heads, block_size=49, global_ratio=0.5,
                 block_layout='2d', lepe=True, **kwargs):
        super().__init__(dims, num_heads, lepe=lepe, **kwargs)
        if block_layout not in ('2d', '1d'):
            raise ValueError(f"block_layout must be '2d' or '1d', got {block_layout!r}")
        self.block_size = block_size
        self.global_ratio = global_ratio
        self.block_layout = block_layout
        (self.global_heads, global_dims), (self.local_heads, _) = split_elfatt_heads(
            dims, num_heads, global_ratio)
        self.global_channels = self.global_heads * global_dims
        self.window = block_window(block_size)  # (height, width) in the 2D layout

    def attend(self, q, k, v, hw_shape, state):
        c1 = self.global_channels
        outs = []
        if self.global_heads:
            outs.append(from_heads(effatt(
                *(to_heads(t[..., :c1], self.global_heads) for t in (q, k, v)))))
        if self.local_heads:
            local = [to_heads(t[..., c1:], self.local_heads) for t in (q, k, v)]
            if self.block_layout == '2d':
                out = window_block_attention(*local, hw_shape, self.window,
                                             scale=self.scale)
            else:
                out = block_attention(*local, self.block_size, scale=self.scale)
            outs.append(from_heads(out))
        return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)), state

    def positional(self, v, hw_shape):
        """LePE: on the image for the global channels, inside each window for the
        local ones (2D layout, ``L(f(V))`` of Eq. 10)."""
        c1 = self.global_channels
        if self.block_layout == '1d' or not self.local_heads:
            return super().positional(v, hw_shape)
        weight, bias = self.lepe.weight, self.lepe.bias
        local = map_windows(
            lambda x, size: conv_in_windows(x, size, weight[c1:], bias[c1:]),
            (v[..., c1:].unsqueeze(1), ), hw_shape, self.window).squeeze(1)
        if not c1:
            return local
        image = conv_in_windows(v[..., :c1], hw_shape, weight[:c1], bias[:c1])
        return torch.cat([image, local], dim=-1)

    def extra_repr(self):
        return (f'global_heads={self.global_heads}, local_heads={self.local_heads}, '
                f'global_channels={self.global_channels}, block_size={self.block_size}, '
                f'block_layout={self.block_layout!r}')


@MIXERS.register_module(name='effatt')
class EFFATTAttention(ELFATTAttention):
    """EFFATT: ELFATT with every channel in the global linear head (Table 7's
    ``c1 = c``, the Table 1 EFFATT rows); ELFATT's arguments but
    ``global_ratio``."""
    letter = 'F'

    def __init__(self, dims, num_heads, block_size=49, block_layout='2d', lepe=True,
                 qkv_bias=True, qk_scale=None, attn_drop=0., proj_drop=0.):
        super().__init__(dims, num_heads, block_size, 1., block_layout, lepe,
                         qkv_bias=qkv_bias, qk_scale=qk_scale, attn_drop=attn_drop,
                         proj_drop=proj_drop)
