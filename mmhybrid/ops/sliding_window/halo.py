"""2D sliding-window attention by query tiles with a halo of keys.

The token grid is cut into ``tile x tile`` query tiles. The neighbourhoods of a
tile's queries all lie inside one ``(tile + window - 1)^2`` key region (the tile
plus a halo of ``window // 2`` on each side, shifted inwards at the borders), so
every tile is one small dense attention over its region with an additive mask
that keeps each query to its own ``window x window`` neighbourhood. The regions
are gathered with one ``index_select`` of flat token indices, and all tiles go to
a single ``F.scaled_dot_product_attention`` call (fused kernels on CPU and GPU,
no N x N matrix anywhere): memory is ``O(N (tile + window - 1)^2 / tile^2)`` per
channel instead of ``O(N^2)``. On a map so small that the tiles' regions hold more
query-key pairs than N^2, the whole map is one tile (the masked dense attention).

The indices and the mask are arithmetic on ``arange``s of the map's sizes (no
cache keyed on sizes, nothing read back from tensors), so compilers and exporters
trace them; the mask is float (0 / -inf) and broadcast over batch and heads,
which CPU SDPA's fused kernel takes as it is. Eager shrinks the window and the
tile to a smaller map; under a tracer they stay fixed (one graph for every size)
and a region reaching past the map repeats its last key, masked.
"""
import torch
import torch.nn.functional as F

from ..tracing import is_tracing


def _axis_tiles(size, window, tile, device):
    """Tiles along one axis: key indices per tile (n, span), the additive mask
    (n, tile, span), and the tile size used."""
    span = tile + window - 1
    if not is_tracing():
        window, tile = min(window, size), min(tile, size)
        span = min(tile + window - 1, size)
    # under dynamo a tile more: two at least, so that torch.export keeps the count
    # symbolic (it specialises sizes of 1)
    n = (size + tile - 1) // tile + int(torch.compiler.is_compiling())
    index = torch.arange(n, device=device)
    first = (index * tile - window // 2).clamp(max=size - span).clamp(min=0)
    keys = first[:, None] + torch.arange(span, device=device)
    # queries past the end (padding) clamp like the last real query
    query = (index[:, None] * tile + torch.arange(tile, device=device)).clamp(
        max=size - 1)
    start = (query - window // 2).clamp(max=size - window).clamp(min=0)
    offset = keys[:, None, :] - start[:, :, None]
    outside = (offset < 0) | (offset >= window) | (keys >= size)[:, None]
    mask = torch.zeros(outside.shape, device=device).masked_fill(outside,
                                                                 -torch.inf)
    return keys.clamp(max=size - 1), mask, tile


def tile_plan(hw_shape, window_size, tile_size, device, dtype=torch.float32):
    """The flat key indices of every tile's region, (tiles * region,) row-major,
    and the additive (1, tiles, th * tw, region) mask; with the tile size used
    and the number of tiles per column and row."""
    (H, W), (wh, ww), (th, tw) = hw_shape, window_size, tile_size
    rows, row_mask, th = _axis_tiles(H, wh, th, device)
    cols, col_mask, tw = _axis_tiles(W, ww, tw, device)
    nh, nw = rows.shape[0], cols.shape[0]
    index = (rows[:, None, :, None] * W + cols[None, :, None, :]).reshape(-1)
    mask = row_mask[:, None, :, None, :, None] + col_mask[None, :, None, :, None, :]
    mask = mask.reshape(1, nh * nw, th * tw, rows.shape[1] * cols.shape[1])
    return index, mask.to(dtype), (th, tw), (nh, nw)


def pairs_per_tiling(hw_shape, window_size, tile_size):
    """Query-key pairs the tiles attend to (dense ones included)."""
    total = 1
    for size, window, tile in zip(hw_shape, window_size, tile_size):
        window, tile = min(window, size), min(tile, size)
        total *= (size + tile - 1) // tile * tile * min(tile + window - 1, size)
    return total


def halo_sliding_window_attention(q, k, v, hw_shape, window_size, scale=None,
                                  tile_size=None):
    """Exact neighbourhood attention by halo tiles (see the module docstring).

    Args: see :func:`mmhybrid.ops.sliding_window_attention`; ``window_size`` and
    ``tile_size`` are (height, width) pairs; ``tile_size=None`` takes the window
    size plus one, or the whole map where that attends to fewer pairs. (For a
    7 x 7 window, 8 x 8 tiles were 10-40% faster than 7, 10, 12 and 16 on one
    CPU thread at 56^2 and 128^2 tokens.)
    """
    B, heads, N, d = q.shape
    H, W = hw_shape
    if tile_size is None:
        tile_size = tuple(w + 1 for w in window_size)
        if not is_tracing() and pairs_per_tiling(hw_shape, window_size,
                                                 tile_size) >= N * N:
            tile_size = (H, W)
    index, mask, (th, tw), (nh, nw) = tile_plan(
        hw_shape, window_size, tile_size, q.device, q.dtype)
    tiles = nh * nw

    # queries: pad the grid to whole tiles -> (B * heads, tiles, th * tw, d)
    q = F.pad(q.reshape(B * heads, H, W, d), (0, 0, 0, nw * tw - W, 0, nh * th - H))
    q = q.view(B * heads, nh, th, nw, tw, d).transpose(2, 3)
    q = q.reshape(B * heads, tiles, th * tw, d)
    # keys and values: every tile's region, (B * heads, tiles, region, d)
    k, v = (x.reshape(B * heads, N, -1).index_select(1, index).view(
        B * heads, tiles, -1, x.shape[-1]) for x in (k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    out = out.view(B, heads, nh, nw, th, tw, -1).transpose(3, 4)
    out = out.reshape(B, heads, nh * th, nw * tw, -1)[:, :, :H, :W]
    return out.reshape(B, heads, N, -1)
