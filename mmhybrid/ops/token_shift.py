"""Quad-directional token shift (Vision-RWKV's Q-Shift)."""
import torch


def quad_token_shift(x, hw_shape, shift=1):
    """Shift four channel groups of a token map by ``shift`` pixels, one per direction.

    Group 0 moves right, 1 left, 2 down, 3 up (the last group takes the remainder
    channels); vacated positions are zero. Every token then sees its 4-neighbourhood
    before the key/value/receptance projections. Works on the channels-last map
    directly (four slice copies, no transposes), so the result is contiguous.

    Args:
        x: (B, N, C) tokens of an ``hw_shape`` = (H, W) map, N = H * W.
    Returns:
        (B, N, C).
    """
    B, N, C = x.shape
    H, W = hw_shape
    x = x.reshape(B, H, W, C)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    g, s = C // 4, shift
    ws, hs = max(W - s, 0), max(H - s, 0)
    right, left, down, up = (slice(0, g), slice(g, 2 * g), slice(2 * g, 3 * g),
                             slice(3 * g, C))
    out[:, :, s:, right] = x[:, :, :ws, right]
    out[:, :, :s, right] = 0
    out[:, :, :ws, left] = x[:, :, s:, left]
    out[:, :, ws:, left] = 0
    out[:, s:, :, down] = x[:, :hs, :, down]
    out[:, :s, :, down] = 0
    out[:, :hs, :, up] = x[:, s:, :, up]
    out[:, hs:, :, up] = 0
    return out.view(B, N, C)
