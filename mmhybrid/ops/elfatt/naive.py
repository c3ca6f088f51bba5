"""Reference ELFATT heads written out term by term (O(N^2) memory; for tests).

All build the full N x N attention matrix, so they check the fast paths'
re-association (EFFATT) and their block / window handling independently.
"""
import torch


def naive_effatt(q, k, v):
    r"""EFFATT as an explicit N x N matrix: ``(softmax_c(Q) softmax_N(K)^T) V``.

    Args:
        q, k: (B, heads, N, d); v: (B, heads, N, dv).
    """
    return (q.softmax(-1) @ k.softmax(-2).transpose(-2, -1)) @ v


def naive_window_block_attention(q, k, v, hw_shape, window, scale=None):
    """Softmax attention masked to ``wh x ww`` windows of the raster-order grid:
    (r, c) may attend to (r2, c2) iff ``r // wh == r2 // wh and c // ww == c2 // ww``.
    """
    H, W = hw_shape
    wh, ww = (window, window) if isinstance(window, int) else window
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    rows = torch.arange(H, device=q.device).repeat_interleave(W) // wh
    cols = torch.arange(W, device=q.device).repeat(H) // ww
    same_window = (rows[:, None] == rows[None, :]) & (cols[:, None] == cols[None, :])
    logits = (q @ k.transpose(-2, -1)) * scale
    return logits.masked_fill(~same_window, float('-inf')).softmax(-1) @ v


def naive_block_attention(q, k, v, block_size, scale=None):
    """Block-diagonal softmax attention (the mask Z = I_b (x) U of App. A): the
    1 x N grid cut into 1 x ``block_size`` windows."""
    return naive_window_block_attention(q, k, v, (1, q.shape[-2]), (1, block_size),
                                        scale)
