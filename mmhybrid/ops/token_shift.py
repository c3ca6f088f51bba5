"""Quad-directional token shift (Vision-RWKV's Q-Shift)."""
import torch
import torch.nn.functional as F

from .tracing import is_tracing


def quad_token_shift(x, hw_shape, shift=1):
    """Shift four channel groups of a token map by ``shift`` pixels, one per direction.

    Group 0 moves right, 1 left, 2 down, 3 up (the last group takes the remainder
    channels); vacated positions are zero. Every token then sees its 4-neighbourhood
    before the key/value/receptance projections. Works on the channels-last map
    directly (four slice copies, no transposes), so the result is contiguous. Under
    a tracer it pads each group and concatenates (:func:`shift_by_padding`): the
    in-place slice writes would be exported as eight full-size ONNX ``ScatterND``
    copies (0.28 s of SoLA-T's 1.45 s in onnxruntime at 512^2).

    Args:
        x: (B, N, C) tokens of an ``hw_shape`` = (H, W) map, N = H * W.
    Returns:
        (B, N, C).
    """
    B, N, C = x.shape
    H, W = hw_shape
    x = x.reshape(B, H, W, C)
    if is_tracing():
        return shift_by_padding(x, shift).view(B, N, C)
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


def shift_by_padding(x, shift):
    """:func:`quad_token_shift` of a (B, H, W, C) map as four zero-padded, cropped
    groups and one concatenation (ONNX Pad, Slice and Concat)."""
    H, W, C = x.shape[1:]
    g, s = C // 4, shift
    right = F.pad(x[..., :g], (0, 0, s, 0))[:, :, :W]
    left = F.pad(x[..., g:2 * g], (0, 0, 0, s))[:, :, s:]
    down = F.pad(x[..., 2 * g:3 * g], (0, 0, 0, 0, s, 0))[:, :H]
    up = F.pad(x[..., 3 * g:], (0, 0, 0, 0, 0, s))[:, s:]
    return torch.cat((right, left, down, up), dim=-1)
