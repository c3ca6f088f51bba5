"""ELFATT's local head on square windows of the token grid (the 2D block layout).

The blockify function ``f`` of Eq. 8 cuts the token matrix into row blocks; with
the tokens listed window by window (window-major order) those blocks are square
``w x w`` windows of the image, as the paper's block sizes (49 = 7^2, 196 = 14^2)
and its per-block LePE ``L(f(V))`` (Eq. 10, Fig. 1) imply. A grid whose sides are
not multiples of ``w`` keeps full windows from the top-left corner; the last
window row / column is shorter (``H mod w`` / ``W mod w``). Windows of one shape
form one region of the grid (at most four: full, right edge, bottom edge, corner),
so every region is a single batched call with no padding and no mask.
"""
import torch

from .block import block_attention


def window_regions(hw_shape, window):
    """Regions of equal windows: ``[(rows, cols, (wh, ww)), ...]`` with slices.

    ``rows x cols`` is tiled exactly by ``wh x ww`` windows, row-major.
    """
    if window < 1:
        raise ValueError(f'window must be >= 1, got {window}')
    H, W = hw_shape
    splits = []
    for size in (H, W):
        full = size // window * window
        parts = [(slice(0, full), window)] if full else []
        if full < size:
            parts.append((slice(full, size), size - full))
        splits.append(parts)
    return [(rows, cols, (wh, ww)) for rows, wh in splits[0] for cols, ww in splits[1]]


def map_windows(fn, tensors, hw_shape, window):
    """Apply ``fn`` window by window to (B, heads, H*W, d) raster-order tokens.

    For every region of :func:`window_regions`, ``fn(*windowed, (wh, ww))`` gets
    the region's tokens in window-major order, (B, heads, n * wh * ww, d), each
    window's tokens row-major, and returns (B, heads, n * wh * ww, d_out) in the
    same order; the results go back to raster order.

    Returns:
        (B, heads, H*W, d_out).
    """
    H, W = hw_shape
    B, heads, N = tensors[0].shape[:3]
    if N != H * W:
        raise ValueError(f'{N} tokens do not form a {H}x{W} grid')
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
    r"""``g(softmax(f(Q) f(K)^T / sqrt(d)) f(V))`` with ``f`` = square windows.

    Every token attends exactly to the tokens of its ``window x window`` window
    of the ``hw_shape`` grid (shorter windows at the bottom/right edge). Each
    region of equal windows is one :func:`block_attention` call (one unmasked
    ``scaled_dot_product_attention``), so FlashAttention kernels apply on GPU.
    Cost O(N * window^2 * d).

    Args:
        q, k: (B, heads, H*W, d) in raster order; v: (B, heads, H*W, dv).
        hw_shape (tuple[int]): (H, W).
        window (int): window side; ``>= max(H, W)`` gives global attention.
        scale (float, optional): logit scale; ``d ** -0.5`` when None.
    Returns:
        (B, heads, H*W, dv) in raster order.
    """
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(f'q, k must be (B, heads, N, d) and v (B, heads, N, dv); '
                         f'got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}')

    def attend(q, k, v, size):
        return block_attention(q, k, v, size[0] * size[1], scale=scale)

    return map_windows(attend, (q, k, v), hw_shape, window)
