"""ELFATT's local blockify head: exact softmax attention inside blocks of tokens.

The blockify function ``f`` of Eq. 8 cuts the token matrix into row blocks: runs
of the token sequence (:func:`block_attention`, the 1D layout) or, with the tokens
listed window by window, windows of the image (:func:`window_block_attention`, the
2D layout): square ``w x w`` ones for the paper's block sizes (49 = 7^2, 196 =
14^2), as its per-block LePE ``L(f(V))`` (Eq. 10, Fig. 1) and its FLOPs imply. A
grid whose sides are not multiples of the window keeps full windows from the
top-left corner; the last window row / column is shorter. Windows of one shape
form one region of the grid (at most four: full, right edge, bottom edge, corner),
so every region is a single batched call with no padding and no mask, and
FlashAttention applies on GPU.

The regions depend on the sizes modulo the block, which a traced graph (ONNX
export, torch.compile, torch.export) cannot: there the grid (a sequence is a
1 x N grid) is zero-padded at the bottom/right to whole windows, one call covers
all of them and the padded keys are masked out, which gives the same result for
every size.
"""
import math

import torch

from ..attention import softmax_attention
from ..heads import check_heads
from ..tracing import is_tracing
from ..windows import window_mask, window_pair, window_partition, window_reverse


def block_window(block_size):
    """(wh, ww): the most square window of ``block_size`` tokens, ``wh <= ww``
    (49 -> 7x7, 196 -> 14x14, 8 -> 2x4, a prime p -> 1xp)."""
    if block_size < 1:
        raise ValueError(f'block_size must be >= 1, got {block_size}')
    wh = max(d for d in range(1, math.isqrt(block_size) + 1) if block_size % d == 0)
    return wh, block_size // wh


def window_regions(hw_shape, window):
    """Regions of equal windows: ``[(rows, cols, (wh, ww)), ...]`` with slices.

    ``window`` is a side or (height, width); ``rows x cols`` is tiled exactly by
    ``wh x ww`` windows, row-major.
    """
    splits = []
    for size, side in zip(hw_shape, window_pair(window)):
        full = size // side * side
        splits.append([(slice(0, full), side)] * bool(full) +
                      [(slice(full, size), size - full)] * (full < size))
    return [(rows, cols, (wh, ww)) for rows, wh in splits[0] for cols, ww in splits[1]]


def _padded_windows(t, hw_shape, window):
    """(B, heads, H*W, d) -> (B, heads, nW, wh * ww, d): every head's
    :func:`~mmhybrid.ops.windows.window_partition`, the grid zero-padded to whole
    ``window``s."""
    B, heads, N, d = t.shape
    windows = window_partition(t.reshape(B * heads, N, d), hw_shape, window)
    return windows.reshape(B, heads, *windows.shape[1:])


def _from_padded_windows(x, hw_shape, window):
    """Inverse of :func:`_padded_windows` (windows flattened or not), the padding
    dropped: (B, heads, H*W, d)."""
    (H, W), (wh, ww), (B, heads, d) = hw_shape, window, (*x.shape[:2], x.shape[-1])
    nW = (H + wh - 1) // wh * ((W + ww - 1) // ww)
    out = window_reverse(x.reshape(B * heads, nW, wh * ww, d), hw_shape, window)
    return out.reshape(B, heads, H * W, d)


def map_windows(fn, tensors, hw_shape, window):
    """Apply ``fn`` window by window to (B, heads, H*W, d) raster-order tokens.

    For every region of :func:`window_regions`, ``fn(*windowed, (wh, ww))`` gets
    the region's tokens in window-major order, (B, heads, n * wh * ww, d), each
    window's tokens row-major, and returns (B, heads, n * wh * ww, d_out) in the
    same order; the results go back to raster order. Traced (see the module doc),
    ``fn`` gets every window whole, the bottom/right ones zero-padded: right for
    functions that treat zeros beyond the edge as padding (a zero-padded conv).

    Returns:
        (B, heads, H*W, d_out).
    """
    H, W = hw_shape
    B, heads, N = tensors[0].shape[:3]
    if N != H * W:
        raise ValueError(f'{N} tokens do not form a {H}x{W} grid')
    if is_tracing():
        window = window_pair(window)
        out = fn(*(_padded_windows(t, hw_shape, window).flatten(2, 3) for t in tensors),
                 window)
        return _from_padded_windows(out, hw_shape, window)
    grids = [t.reshape(B, heads, H, W, t.shape[-1]) for t in tensors]
    regions = window_regions(hw_shape, window)
    for rows, cols, (wh, ww) in regions:
        nh, nw = (rows.stop - rows.start) // wh, (cols.stop - cols.start) // ww

        def to_windows(g):
            g = g[:, :, rows, cols].reshape(B, heads, nh, wh, nw, ww, -1)
            return g.transpose(3, 4).reshape(B, heads, nh * nw * wh * ww, -1)

        part = fn(*(to_windows(g) for g in grids), (wh, ww))
        part = part.reshape(B, heads, nh, nw, wh, ww, -1).transpose(3, 4).reshape(
            B, heads, nh * wh, nw * ww, -1)
        if len(regions) == 1:
            return part.reshape(B, heads, H * W, -1)
        if rows.start == cols.start == 0:
            out = part.new_empty(B, heads, H, W, part.shape[-1])
        out[:, :, rows, cols] = part
    return out.reshape(B, heads, H * W, -1)


def _traced_window_attention(q, k, v, hw_shape, window, scale):
    """One masked attention over the grid zero-padded to whole windows."""
    (q, k, v) = (_padded_windows(t, hw_shape, window) for t in (q, k, v))
    B, heads, nW, L, _ = q.shape
    # 4-D for the ONNX exporters: (B * heads, nW, L, d); softmax attention written
    # out (the decomposed SDPA reshapes, on which torch.export adds size guards)
    q, k, v = (t.reshape(B * heads, nW, L, t.shape[-1]) for t in (q, k, v))
    logits = torch.matmul(q, k.transpose(-2, -1)) * (
        q.shape[-1]**-0.5 if scale is None else scale)
    # keys inside the grid (and, for a padded query, itself: dropped with it)
    logits = logits.masked_fill(~window_mask(hw_shape, window, None, q.device),
                                float('-inf'))
    out = torch.matmul(torch.softmax(logits, dim=-1), v)
    return _from_padded_windows(out.reshape(B, heads, nW, L, v.shape[-1]), hw_shape, window)


def block_attention(q, k, v, block_size, scale=None):
    r"""``g(softmax(f(Q) f(K)^T / sqrt(d)) f(V))``: the second term of ELFATT Eq. 8.

    ``f`` cuts the token sequence into contiguous blocks of ``block_size`` tokens
    (the last block may be shorter) and ``g`` puts them back in order; every token
    attends exactly to the tokens of its own block: :func:`window_block_attention`
    on the 1 x N grid. Cost O(N * block_size * d).

    Args:
        q, k: (B, heads, N, d); v: (B, heads, N, dv).
        block_size (int): tokens per block; ``>= N`` gives plain global attention.
        scale (float, optional): logit scale; ``d ** -0.5`` when None.
    Returns:
        (B, heads, N, dv).
    """
    return window_block_attention(q, k, v, (1, q.shape[-2]), (1, block_size), scale)


def window_block_attention(q, k, v, hw_shape, window, scale=None):
    r"""``g(softmax(f(Q) f(K)^T / sqrt(d)) f(V))`` with ``f`` = windows of the grid.

    Every token attends exactly to the tokens of its window of the ``hw_shape``
    grid (shorter windows at the bottom/right edge). The windows of a region are
    one batched :func:`~mmhybrid.ops.attention.softmax_attention` call with no
    mask. That equals padding the edge windows and masking the padding (the
    references :func:`naive_window_block_attention`, :func:`naive_block_attention`),
    without a mask that would rule out FlashAttention. Cost O(N * window^2 * d).

    Args:
        q, k: (B, heads, H*W, d) in raster order; v: (B, heads, H*W, dv).
        hw_shape (tuple[int]): (H, W).
        window (int | tuple[int]): window side or (height, width); covering the
            grid gives global attention.
        scale (float, optional): logit scale; ``d ** -0.5`` when None.
    Returns:
        (B, heads, H*W, dv) in raster order.
    """
    check_heads(q, k, v)
    if is_tracing():
        return _traced_window_attention(q, k, v, hw_shape, window_pair(window), scale)

    def attend(q, k, v, size):  # (B, heads, n * L, d) -> n windows of L tokens
        (B, heads, N), L = q.shape[:3], size[0] * size[1]
        out = softmax_attention(*(t.reshape(B * heads, N // L, L, t.shape[-1])
                                  for t in (q, k, v)), scale=scale)
        return out.reshape(B, heads, N, -1)

    return map_windows(attend, (q, k, v), hw_shape, window)
