"""Quad-directional token shift (Vision-RWKV's Q-Shift)."""
import torch
import torch.nn.functional as F


def quad_token_shift(x, hw_shape, shift=1):
    """Shift four channel groups of a token map by ``shift`` pixels, one per direction.

    Group 0 moves right, 1 left, 2 down, 3 up; vacated positions are zero. Every
    token then sees its 4-neighbourhood before the key/value/receptance projections.

    Args:
        x: (B, N, C) tokens of an ``hw_shape`` = (H, W) map, N = H * W.
    Returns:
        (B, N, C).
    """
    B, N, C = x.shape
    H, W = hw_shape
    x = x.transpose(1, 2).reshape(B, C, H, W)
    g = C // 4
    s = shift
    groups = (
        F.pad(x[:, :g], (s, 0, 0, 0))[..., :, :W],            # right
        F.pad(x[:, g:2 * g], (0, s, 0, 0))[..., :, s:],       # left
        F.pad(x[:, 2 * g:3 * g], (0, 0, s, 0))[..., :H, :],   # down
        F.pad(x[:, 3 * g:], (0, 0, 0, s))[..., s:, :],        # up
    )
    out = torch.cat(groups, dim=1)
    return out.flatten(2).transpose(1, 2)
