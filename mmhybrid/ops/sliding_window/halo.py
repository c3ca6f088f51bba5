"""2D sliding-window attention by query tiles with a halo of keys.

The token grid is cut into ``tile x tile`` query tiles. The neighbourhoods of a
tile's queries all lie inside one ``(tile + window - 1)^2`` key region (the tile
plus a halo of ``window // 2`` on each side, shifted inwards at the borders), so
every tile is one small dense attention over its region with an additive mask
that keeps each query to its own ``window x window`` neighbourhood. The regions
are gathered with one ``index_select`` of flat token indices, and the tiles of a
band of tile rows go to one ``F.scaled_dot_product_attention`` call (fused kernels
on CPU and GPU, no N x N matrix anywhere): memory is ``O(N (tile + window - 1)^2 /
tile^2)`` per channel instead of ``O(N^2)``, and in inference only a band's worth
at a time. On a map so small that the tiles' regions hold more query-key pairs
than N^2, the whole map is one tile (the masked dense attention).

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

# inference: query tokens (times batch) per band of tile rows. At 256^2 tokens,
# 3 heads of 32, a 7x7 window, one CPU thread, bands of 4096 queries took 0.61-0.75x
# the time of one call over the map (min of 5 calls, 6 alternating rounds; 2-core
# Intel Xeon VM, 2026-11-25).
BAND_QUERIES = 4096


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


def band_plan(rows, row_mask, cols, col_mask, width, dtype=torch.float32):
    """The flat key indices of the regions of some tile rows' tiles, (tiles *
    region,) row-major, and their additive (1, tiles, th * tw, region) mask, from
    the per-axis plans of :func:`_axis_tiles`."""
    index = (rows[:, None, :, None] * width + cols[None, :, None, :]).reshape(-1)
    mask = row_mask[:, None, :, None, :, None] + col_mask[None, :, None, :, None, :]
    nh, nw, th, tw = mask.shape[:4]
    return index, mask.reshape(1, nh * nw, th * tw, -1).to(dtype)


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
    rows, row_mask, th = _axis_tiles(H, window_size[0], tile_size[0], q.device)
    cols, col_mask, tw = _axis_tiles(W, window_size[1], tile_size[1], q.device)
    nh, nw = rows.shape[0], cols.shape[0]
    q = q.view(B, heads, H, W, d)
    # inference: bands of tile rows, so that every temporary stays small (in
    # cache, below the allocator's mmap threshold); one band under a tracer (a
    # loop over a symbolic count pins the size) and under autograd (backward keeps
    # every band's regions anyway, and each band's gather fills a full-size
    # gradient: bands took 1.00x / 1.07x the time at 256^2 / 128^2 tokens)
    whole = is_tracing() or (torch.is_grad_enabled() and any(
        x.requires_grad for x in (q, k, v)))
    band = nh if whole else max(1, BAND_QUERIES // (B * nw * th * tw))
    # keys and values token-major, (B * N, heads * d): a view of a mixer's fused
    # qkv (a copy otherwise), whose rows index_select takes in place (a strided
    # per-head view it would copy whole at every call)
    k, v = (x.transpose(1, 2).reshape(B * N, -1) for x in (k, v))
    first_token = torch.arange(B, device=q.device)[:, None] * N
    out, bands = None, [0] if whole else range(0, nh, band)
    for first in bands:
        part = slice(first, first + band)
        index, mask = band_plan(rows[part], row_mask[part], cols, col_mask, W,
                                q.dtype)
        nb, tiles = rows[part].shape[0], mask.shape[1]
        # queries: the band's rows padded to whole tiles -> (B * heads, tiles,
        # th * tw, d)
        qb = q[:, :, first * th:(first + nb) * th]
        qb = F.pad(qb, (0, 0, 0, nw * tw - W, 0, nb * th - qb.shape[2]))
        qb = qb.reshape(B * heads, nb, th, nw, tw, d).transpose(2, 3)
        qb = qb.reshape(B * heads, tiles, th * tw, d)
        # keys and values: every tile's region, (B * heads, tiles, region, d)
        index = (first_token + index).view(-1)
        kb, vb = (x.index_select(0, index).view(B, tiles, -1, heads, x.shape[1] // heads)
                  .permute(0, 3, 1, 2, 4).flatten(0, 1) for x in (k, v))
        ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale)
        # -> token-major rows (B, band rows, padded width, heads, d_v)
        ob = ob.view(B, heads, nb, nw, th, tw, -1).permute(0, 2, 4, 3, 5, 1, 6)
        ob = ob.reshape(B, nb * th, nw * tw, heads, -1)
        if len(bands) == 1:
            out = ob
        else:  # the bands' rows written in place, never all held at once
            out = ob.new_empty(B, nh * th, nw * tw, heads, ob.shape[-1]) \
                if out is None else out
            out[:, first * th:(first + nb) * th] = ob
    # (B, heads, N, d_v) as a view of token-major memory
    return out[:, :H, :W].reshape(B, N, heads, -1).transpose(1, 2)
