"""Multiply-add formulas of mmhybrid modules whose code does not show their arithmetic.

Everything else (linear layers, convolutions, explicit matmuls such as EFFATT's and
linear InfSA's, softmax attention through ``F.scaled_dot_product_attention`` as in
the block, window and global attentions, ToMe's similarity matrix) is counted from
the ops that run, see :mod:`mmhybrid.analysis.flop_counter`. A layer whose op is a
scan or a fused kernel registers its formula here with :func:`register_flops`.
"""
from mmhybrid.layers import SpatialMix
from .flop_counter import register_flops

# a_t = e^{-w} a_{t-1} + e^{k} v and b_t = e^{-w} b_{t-1} + e^{k} in each direction
# (4), e^{k} v once (1), the bonus e^{u} e^{k} v and e^{u} e^{k} (2), the ratio (1)
WKV_MACS_PER_TOKEN_CHANNEL = 8


def wkv_macs(batch, tokens, channels):
    """Bidirectional WKV (SoLA-Vision Eq. 9) in its linear-time form.

    Each direction keeps a numerator and a denominator state per channel,
    updated once per token; the token's own bonus term and the final ratio complete
    Eq. 9: 8 multiply-adds per token and channel (exponentials, like every
    element-wise op, are not counted). The O(N^2) sum of Eq. 9 as written would be
    N multiply-adds per token and channel; no implementation computes it that way.
    """
    return WKV_MACS_PER_TOKEN_CHANNEL * batch * tokens * channels


@register_flops(SpatialMix)
def spatial_mix(module, inputs, output):
    """The WKV of a SoLA 'L' layer; its projections and norms are child modules."""
    B, N, C = inputs[0].shape
    return {'wkv': wkv_macs(B, N, C)}
