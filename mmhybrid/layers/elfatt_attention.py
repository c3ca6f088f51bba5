"""ELFATT attention (Eq. 8-11): a global linear head beside a local blockify head."""
import torch

from mmhybrid.ops import block_attention, effatt
from .image_attention import ImageAttention, from_heads, to_heads


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


class ELFATTAttention(ImageAttention):
    r"""Efficient linear fast attention (Eq. 10-11).

    .. math::
        [\mathrm{softmax}(\bar Q)\mathrm{softmax}(\bar K)^\top \bar V + L(\bar V),\;
         g(\mathrm{softmax}(f(\tilde Q) f(\tilde K)^\top/\sqrt d) f(\tilde V))
         + L(\tilde V)]

    The global head is :func:`mmhybrid.ops.effatt`, the local head
    :func:`mmhybrid.ops.block_attention` over contiguous blocks of the row-major
    token sequence. ``global_ratio`` is ``c1 / c`` (Table 7): 1 gives EFFATT,
    0 a pure blockify attention.

    Args:
        block_size (int): tokens per block of the local head (Table 4).
        global_ratio (float): share of channels in the global head.
        **kwargs: see :class:`ImageAttention`.
    """

    def __init__(self, dims, num_heads, block_size=49, global_ratio=0.5, **kwargs):
        super().__init__(dims, num_heads, **kwargs)
        self.block_size = block_size
        self.global_ratio = global_ratio
        (self.global_heads, global_dims), (self.local_heads, _) = split_elfatt_heads(
            dims, num_heads, global_ratio)
        self.global_channels = self.global_heads * global_dims

    def attend(self, q, k, v, hw_shape):
        c1 = self.global_channels
        outs = []
        if self.global_heads:
            outs.append(from_heads(effatt(
                *(to_heads(t[..., :c1], self.global_heads) for t in (q, k, v)))))
        if self.local_heads:
            outs.append(from_heads(block_attention(
                *(to_heads(t[..., c1:], self.local_heads) for t in (q, k, v)),
                self.block_size, scale=self.scale)))
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)

    def extra_repr(self):
        return (f'global_heads={self.global_heads}, local_heads={self.local_heads}, '
                f'global_channels={self.global_channels}, block_size={self.block_size}')
