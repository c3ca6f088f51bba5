import math

import torch
import torch.nn.functional as F


def resize_pos_embed(pos_embed, src_hw, dst_hw, num_extra_tokens=0):
    """Bicubically resize a (1, extra + Hs*Ws, C) position embedding to ``dst_hw``.

    Leading ``num_extra_tokens`` (e.g. a class token) are kept as they are.
    """
    if tuple(src_hw) == tuple(dst_hw):
        return pos_embed
    extra, grid = (pos_embed[:, :num_extra_tokens],
                   pos_embed[:, num_extra_tokens:])
    C = grid.shape[-1]
    grid = grid.reshape(1, *src_hw, C).permute(0, 3, 1, 2)
    grid = F.interpolate(grid.float(), size=tuple(dst_hw), mode='bicubic',
                         align_corners=False).to(pos_embed.dtype)
    grid = grid.flatten(2).transpose(1, 2)
    return torch.cat((extra, grid), dim=1)


def square_grid(num_tokens):
    """(s, s) for a square token count, else ValueError."""
    side = math.isqrt(num_tokens)
    if side * side != num_tokens:
        raise ValueError(f'cannot infer a square grid from {num_tokens} tokens')
    return side, side
