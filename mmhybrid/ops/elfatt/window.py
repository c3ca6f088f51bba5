"""ELFATT's local head on windows of the token grid (the 2D block layout).

The blockify function ``f`` of Eq. 8 cuts the token matrix into row blocks; with
the tokens listed window by window (window-major order) those blocks are windows
of the image: square ``w x w`` ones for the paper's block sizes (49 = 7^2,
196 = 14^2), as its per-block LePE ``L(f(V))`` (Eq. 10, Fig. 1) and its FLOPs
imply. A grid whose sides are not multiples of the window keeps full windows from
the top-left corner; the last window row / column is shorter. Windows of one shape
form one region of the grid (at most four: full, right edge, bottom edge, corner),
so every region is a single batched call with no padding and no mask.

The regions depend on the grid size modulo the window, which a traced graph (ONNX
export, torch.compile, torch.export) cannot: there the grid is zero-padded at the
bottom/right to whole windows, one call covers all of them and the padded keys are
masked out, which gives the same result for every size.
"""
import math

import torch
import torch.nn.functional as F

from ..tracing import is_tracing
from .block import block_attention, masked_attention


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
    window = _window_tuple(window)
    splits = []
    for size, side in zip(hw_shape, window):
        full = size // side * side
        parts = [(slice(0, full), side)] if full else []
        if full < size:
            parts.append((slice(full, size), size - full))
        splits.append(parts)
    return [(rows, cols, (wh, ww)) for rows, wh in splits[0] for cols, ww in splits[1]]


def _padded_windows(tensors, hw_shape, window):
    """(B, heads, H*W, d) tensors -> their grids zero-padded to whole ``window``s, in
    window-major order (B, heads, nh * nw, wh * ww, d), and (nh, nw). Sizes are
    explicit (no -1) for torch.export."""
    (H, W), (wh, ww) = hw_shape, window
    nh, nw = (H + wh - 1) // wh, (W + ww - 1) // ww
    windowed = []
    for t in tensors:
        B, heads, _, d = t.shape
        g = F.pad(t.reshape(B, heads, H, W, d), (0, 0, 0, nw * ww - W, 0, nh * wh - H))
        g = g.reshape(B, heads, nh, wh, nw, ww, d).transpose(3, 4)
        windowed.append(g.reshape(B, heads, nh * nw, wh * ww, d))
    return windowed, (nh, nw)


def _from_padded_windows(x, hw_shape, counts, window):
    """Inverse of :func:`_padded_windows` for one tensor, the padding dropped (by
    index_select: no size guard for torch.export): (B, heads, H*W, d)."""
    (H, W), (nh, nw), (wh, ww) = hw_shape, counts, window
    B, heads, d = x.shape[0], x.shape[1], x.shape[-1]
    x = x.reshape(B, heads, nh, nw, wh, ww, d).transpose(3, 4)
    x = x.reshape(B, heads, nh * wh, nw * ww, d)
    x = x.index_select(2, torch.arange(H, device=x.device))
    return x.index_select(3, torch.arange(W, device=x.device)).reshape(B, heads, H * W, d)


def _window_tuple(window):
    window = (window, window) if isinstance(window, int) else tuple(window)
    if min(window) < 1:
        raise ValueError(f'window sides must be >= 1, got {window}')
    return window


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
        window = _window_tuple(window)
        windowed, counts = _padded_windows(tensors, hw_shape, window)
        out = fn(*(t.flatten(2, 3) for t in windowed), window)
        return _from_padded_windows(out, hw_shape, counts, window)
    grids = [t.reshape(B, heads, H, W, t.shape[-1]) for t in tensors]
    region_rows = {}
    for rows, cols, (wh, ww) in window_regions(hw_shape, window):
        nh, nw = (rows.stop - rows.start) // wh, (cols.stop - cols.start) // ww

        def to_windows(g):
            g = g[:, :, rows, cols].reshape(B, heads, nh, wh, nw, ww, -1)
            return g.transpose(3, 4).reshape(B, heads, nh * nw * wh * ww, -1)

        out = fn(*(to_windows(g) for g in grids), (wh, ww))
        out = out.reshape(B, heads, nh, nw, wh, ww, -1).transpose(3, 4)
        region_rows.setdefault(rows.start, []).append(
            out.reshape(B, heads, nh * wh, nw * ww, -1))
    parts = [torch.cat(cols, dim=3) if len(cols) > 1 else cols[0]
             for _, cols in sorted(region_rows.items())]
    out = torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]
    return out.reshape(B, heads, H * W, -1)


def window_block_attention(q, k, v, hw_shape, window, scale=None):
    r"""``g(softmax(f(Q) f(K)^T / sqrt(d)) f(V))`` with ``f`` = windows of the grid.

    Every token attends exactly to the tokens of its window of the ``hw_shape``
    grid (shorter windows at the bottom/right edge). Each
    region of equal windows is one :func:`block_attention` call (one unmasked
    ``scaled_dot_product_attention``), so FlashAttention kernels apply on GPU.
    Cost O(N * window^2 * d).

    Args:
        q, k: (B, heads, H*W, d) in raster order; v: (B, heads, H*W, dv).
        hw_shape (tuple[int]): (H, W).
        window (int | tuple[int]): window side or (height, width); covering the
            grid gives global attention.
        scale (float, optional): logit scale; ``d ** -0.5`` when None.
    Returns:
        (B, heads, H*W, dv) in raster order.
    """
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(f'q, k must be (B, heads, N, d) and v (B, heads, N, dv); '
                         f'got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}')

    if is_tracing():
        window = _window_tuple(window)
        H, W = hw_shape
        (q, k, v), counts = _padded_windows((q, k, v), hw_shape, window)
        B, heads, nW, L, _ = q.shape
        # keys inside the grid, per window: (nW, 1, L)
        rows = torch.arange(counts[0] * window[0], device=q.device) < H
        cols = torch.arange(counts[1] * window[1], device=q.device) < W
        inside = (rows[:, None] & cols).reshape(1, 1, -1, 1)
        valid = _padded_windows([inside], (counts[0] * window[0], counts[1] * window[1]),
                                window)[0][0]

        def blocks(t):  # 4-D for the ONNX exporters: (B * heads, nW, L, d)
            return t.reshape(B * heads, nW, L, t.shape[-1])

        out = masked_attention(blocks(q), blocks(k), blocks(v),
                               valid.reshape(nW, 1, L), scale)
        return _from_padded_windows(out.reshape(B, heads, nW, L, v.shape[-1]),
                                    hw_shape, counts, window)

    def attend(q, k, v, size):
        return block_attention(q, k, v, size[0] * size[1], scale=scale)

    return map_windows(attend, (q, k, v), hw_shape, window)
