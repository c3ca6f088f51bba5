"""Reference ELFATT heads written out term by term (O(N^2) memory; for tests).

All build the full N x N attention matrix, so they check the fast paths'
re-association (EFFATT) and their block / window handling independently.
"""
import torch


def _softmax(x, dim):
    x = x - x.amax(dim=dim, keepdim=True)
    e = x.exp()
    return e / e.sum(dim=dim, keepdim=True)


def naive_effatt(q, k, v):
    r"""EFFATT as an explicit N x N matrix: ``(softmax_c(Q) softmax_N(K)^T) V``.

    Args:
        q, k: (B, heads, N, d); v: (B, heads, N, dv).
    """
    attn = _softmax(q, -1) @ _softmax(k, -2).transpose(-2, -1)  # (B, h, N, N)
    return attn @ v


def naive_block_attention(q, k, v, block_size, scale=None):
    """Block-diagonal softmax attention: pad N to a multiple of ``block_size``,
    mask the padded keys, one exact softmax per block, drop the padded queries.
    """
    N, d = q.shape[-2:]
    scale = d ** -0.5 if scale is None else scale
    block = torch.arange(N, device=q.device) // block_size
    same_block = block[:, None] == block[None, :]  # the mask Z = I_b (x) U of App. A
    logits = (q @ k.transpose(-2, -1)) * scale
    logits = logits.masked_fill(~same_block, float('-inf'))
    return _softmax(logits, -1) @ v


def naive_window_block_attention(q, k, v, hw_shape, window, scale=None):
    """Softmax attention masked to ``wh x ww`` windows of the raster-order grid:
    (r, c) may attend to (r2, c2) iff ``r // wh == r2 // wh and c // ww == c2 // ww``.
    """
    H, W = hw_shape
    wh, ww = (window, window) if isinstance(window, int) else window
    d = q.shape[-1]
    scale = d ** -0.5 if scale is None else scale
    rows = torch.arange(H, device=q.device).repeat_interleave(W) // wh
    cols = torch.arange(W, device=q.device).repeat(H) // ww
    same_window = (rows[:, None] == rows[None, :]) & (cols[:, None] == cols[None, :])
    logits = (q @ k.transpose(-2, -1)) * scale
    logits = logits.masked_fill(~same_window, float('-inf'))
    return _softmax(logits, -1) @ v
