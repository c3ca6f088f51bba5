"""Reference 2D sliding-window (neighbourhood) attention: explicit N x N mask.

O(N^2) time and memory; meant for tests (works in float64).
"""
import torch


def window_pairs(size, window):
    """Which index of an axis of ``size`` sees which: ``(size, size)`` bool.

    Query ``i`` sees the ``min(window, size)`` indices starting at
    ``clamp(i - window // 2, 0, size - window)``: centred on ``i`` and shifted
    inwards at the borders (NATTEN's rule), so every query sees the same number
    of keys and no padding enters the softmax.
    """
    index = torch.arange(size)
    start = (index - window // 2).clamp(0, max(size - window, 0))
    offset = index[None, :] - start[:, None]
    return (offset >= 0) & (offset < window)


def neighbourhood_mask(hw_shape, window_size):
    """``(H W, H W)`` bool mask of the 2D neighbourhoods, tokens row-major."""
    (H, W), (wh, ww) = hw_shape, window_size
    rows, cols = window_pairs(H, wh), window_pairs(W, ww)
    return (rows[:, None, :, None] & cols[None, :, None, :]).reshape(H * W, H * W)


def naive_sliding_window_attention(q, k, v, hw_shape, window_size, scale=None):
    """``softmax(Q K^T s + mask) V`` with :func:`neighbourhood_mask`.

    Args: see :func:`mmhybrid.ops.sliding_window_attention`.
    """
    scale = q.shape[-1]**-0.5 if scale is None else scale
    mask = neighbourhood_mask(hw_shape, window_size).to(q.device)
    logits = (q @ k.transpose(-1, -2) * scale).masked_fill(~mask, float('-inf'))
    return torch.softmax(logits, dim=-1) @ v
