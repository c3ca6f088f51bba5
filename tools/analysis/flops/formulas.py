"""Multiply-add formulas of mmhybrid modules whose code does not show their arithmetic
(a scan, a fused kernel, or work that is not the method's cost: chunked
recurrences, masked tiles). Each counts the math of the method's equation,
whatever backend runs it; everything else is counted from the ops that run.
"""
from mmhybrid.layers import HistoricalAttention
from mmhybrid.layers.mixers import (BidirectionalGatedDeltaNet, SlidingWindowAttention,
                                    SpatialMix)
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


def delta_rule_macs(batch, tokens, heads, key_dim, value_dim):
    r"""Gated delta rule (InfiniteVL Eq. 2) as its per-token recurrence.

    Per token and head, with the K x V state ``M``: the decay ``alpha_t M`` (K V),
    the read-out ``M^T k_t`` of the delta (K V), ``beta_t k_t`` (K) and the
    rank-1 write ``(beta_t k_t) delta_t^T`` (K V), the output ``M_t^T q_t`` (K V):
    ``4 K V + K`` multiply-adds, the multiplications of the naive recurrence
    (:func:`mmhybrid.ops.delta_rule.naive_gated_delta_rule`). Not counted, as
    fvcore counts no element-wise op: the L2 norms of q and k, exponentials, the
    output scale. The chunked (WY/UT) form the CPU runs does about twice this
    at chunk 32 and depends on the chunk size; fla's kernels are invisible to a
    counter: neither is the method's cost.
    """
    return batch * tokens * heads * (4 * key_dim * value_dim + key_dim)


@register_flops(BidirectionalGatedDeltaNet)
def bidirectional_gated_deltanet(module, inputs, output):
    """Both scans of a 'G' layer (2B sequences of N tokens); projections and the
    depth-wise conv are child modules; the gate and the per-head RMSNorm are
    element-wise (fvcore and mmengine have no rule for RMSNorm either)."""
    B, N, C = inputs[0].shape
    H = module.num_heads
    return {'delta_rule': delta_rule_macs(2 * B, N, H, C // H, module.hidden_dims // H)}


def sliding_window_macs(batch, heads, hw_shape, window_size, key_dim, value_dim):
    """2D sliding-window attention: ``Q K^T`` and ``A V`` over each query's window.

    Every query scores exactly ``min(wh, H) x min(ww, W)`` keys (the window is
    shifted inwards at the borders, never padded: :func:`mmhybrid.ops.
    sliding_window_attention`), so ``B heads H W min(wh, H) min(ww, W) (d + d_v)``:
    ``2 w^2 d`` per query and head for a map at least as large as the window. The
    halo tiles the op runs score every query against its whole tile region
    (169 keys for a 7x7 window with 7x7 tiles) under a mask; that masked work is
    the implementation's, not the method's, and is not counted.
    """
    (H, W), (wh, ww) = hw_shape, window_size
    return batch * heads * H * W * min(wh, H) * min(ww, W) * (key_dim + value_dim)


@register_flops(SlidingWindowAttention)
def sliding_window(module, inputs, output):
    """The window attention of a 'W' layer; ``qkv`` and ``proj`` are children."""
    x, hw_shape = inputs[:2]
    B, N, C = x.shape
    d = C // module.num_heads
    return {'attention': sliding_window_macs(B, module.num_heads, hw_shape,
                                             module.window_size, d, d)}


def historical_attention_macs(batch, heads, tokens, key_dim, value_dim,
                              mixed=True):
    r"""HAViT Eq. 5-7: ``Q K^T`` and ``A V`` (``N^2 (d + d_v)`` per head, as
    softmax attention counts them) and, where a history is mixed in, one
    multiply-add per logit for ``A = alpha Q K^T s + (1 - alpha) H`` (the scale
    ``alpha s`` is folded into Q, like attention's own scale, and not counted).

    Returns:
        dict: ``{'attention': ..., 'history': ...}`` (no ``'history'`` if not mixed).
    """
    pairs = batch * heads * tokens * tokens
    macs = {'attention': pairs * (key_dim + value_dim)}
    if mixed:
        macs['history'] = pairs
    return macs


@register_flops(HistoricalAttention)
def historical_attention(module, inputs, output):
    """The op of a historical layer, whichever backend runs it. The history
    mixed in is the incoming one, else ``H_0`` (none for ``init='zero'``); with
    ``alpha = 1`` nothing is mixed (the blocked op skips it)."""
    q, k, v, history = inputs[:4]
    B, H, N, d = q.shape
    starts = history is None or history.shape[1:] != (H, N, N)
    mixed = module.alpha < 1 and not (starts and module.init == 'zero')
    return historical_attention_macs(B, H, N, d, v.shape[-1], mixed)
