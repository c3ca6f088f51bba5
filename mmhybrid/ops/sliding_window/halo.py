"""2D sliding-window attention by query tiles with a halo of keys.

The token grid is cut into ``tile x tile`` query tiles. The neighbourhoods of a
tile's queries all lie inside one ``(tile + window - 1)^2`` key region (the tile
plus a halo of ``window // 2`` on each side, shifted inwards at the borders), so
every tile is one small dense attention over its region with a fixed mask that
keeps each query to its own ``window x window`` neighbourhood. All tiles go to a
single ``F.scaled_dot_product_attention`` call (fused kernels on GPU, no N x N
matrix anywhere): memory is ``O(N (tile + window - 1)^2 / tile^2)`` per channel
instead of ``O(N^2)``. On a map so small that the tiles' regions hold more
query-key pairs than N^2, the whole map is one tile (the masked dense attention).
"""
import functools
import math

import torch
import torch.nn.functional as F


def _axis_tiles(size, window, tile, device):
    """Tiles along one axis: key indices per tile (n, R) and mask (n, tile, R)."""
    window, tile = min(window, size), min(tile, size)
    n = math.ceil(size / tile)
    span = min(tile + window - 1, size)
    # queries past the end (padding) clamp like the last real query
    query = torch.arange(n * tile, device=device)
    start = (query - window // 2).clamp(0, size - window)
    first = (torch.arange(n, device=device) * tile - window // 2).clamp(
        0, size - span)
    keys = first[:, None] + torch.arange(span, device=device)
    offset = keys.repeat_interleave(tile, dim=0) - start[:, None]
    mask = (offset >= 0) & (offset < window)
    return keys, mask.view(n, tile, span), tile


@functools.lru_cache(maxsize=64)
def tile_plan(hw_shape, window_size, tile_size, device):
    """Key indices per row/column tile and the (tiles, 1, tq, tk) mask."""
    (H, W), (wh, ww), (th, tw) = hw_shape, window_size, tile_size
    rows, row_mask, th = _axis_tiles(H, wh, th, device)
    cols, col_mask, tw = _axis_tiles(W, ww, tw, device)
    nh, nw = rows.shape[0], cols.shape[0]
    mask = row_mask[:, None, :, None, :, None] & col_mask[None, :, None, :, None, :]
    mask = mask.reshape(nh * nw, 1, th * tw, rows.shape[1] * cols.shape[1])
    return rows, cols, mask, (th, tw)


def pairs_per_tiling(hw_shape, window_size, tile_size):
    """Query-key pairs the tiles attend to (dense ones included)."""
    total = 1
    for size, window, tile in zip(hw_shape, window_size, tile_size):
        window, tile = min(window, size), min(tile, size)
        total *= math.ceil(size / tile) * tile * min(tile + window - 1, size)
    return total


def halo_sliding_window_attention(q, k, v, hw_shape, window_size, scale=None,
                                  tile_size=None):
    """Exact neighbourhood attention by halo tiles (see the module docstring).

    Args: see :func:`mmhybrid.ops.sliding_window_attention`; ``window_size`` and
    ``tile_size`` are (height, width) pairs; ``tile_size=None`` takes the window
    size, or the whole map where that attends to fewer pairs.
    """
    B, heads, N, d = q.shape
    H, W = hw_shape
    if tile_size is None:
        tile_size = window_size
        if pairs_per_tiling(hw_shape, window_size, tile_size) >= N * N:
            tile_size = (H, W)
    rows, cols, mask, (th, tw) = tile_plan(
        tuple(hw_shape), tuple(window_size), tuple(tile_size), q.device)
    nh, nw = rows.shape[0], cols.shape[0]

    # queries: pad the grid to whole tiles -> (B, tiles * heads, th * tw, d)
    q = q.reshape(B, heads, H, W, d)
    q = F.pad(q, (0, 0, 0, nw * tw - W, 0, nh * th - H))
    q = q.view(B, heads, nh, th, nw, tw, d).permute(0, 2, 4, 1, 3, 5, 6)
    q = q.reshape(B, nh * nw * heads, th * tw, d)

    def regions(x):  # (B, heads, N, d) -> (B, tiles * heads, span_h * span_w, d)
        x = x.reshape(B, heads, H, W, -1)[:, :, rows][:, :, :, :, cols]
        x = x.permute(0, 2, 4, 1, 3, 5, 6)  # (B, nh, nw, heads, Rh, Rw, d)
        return x.reshape(B, nh * nw * heads, -1, x.shape[-1])

    # the mask depends on the tile only: repeat it over heads, broadcast over B
    tile_mask = mask.expand(-1, heads, -1, -1).reshape(1, nh * nw * heads,
                                                       *mask.shape[-2:])
    out = F.scaled_dot_product_attention(q, regions(k), regions(v),
                                         attn_mask=tile_mask, scale=scale)
    out = out.view(B, nh, nw, heads, th, tw, -1).permute(0, 3, 1, 4, 2, 5, 6)
    out = out.reshape(B, heads, nh * th, nw * tw, -1)[:, :, :H, :W]
    return out.reshape(B, heads, N, -1)
