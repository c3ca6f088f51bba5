"""Reference historical attention (HAViT Eq. 4-7) with explicit N x N matrices.

O(N^2) memory per op and autograd through every intermediate; meant for tests
(works in float64).
"""
import torch
import torch.nn.functional as F


def naive_historical_attention(q, k, v, history=None, alpha=0.45, scale=None,
                               dropout_p=0., return_history=True):
    r"""Eq. 5-7: :math:`A = \alpha\,Q K^T s + (1 - \alpha) H`, ``softmax(A) V``;
    arguments and outputs as :func:`mmhybrid.ops.historical_attention` (``history``
    only needs to broadcast to (B, heads, N, N))."""
    scale = q.shape[-1]**-0.5 if scale is None else scale
    mixed = alpha * (q @ k.transpose(-2, -1) * scale)
    if history is not None:
        mixed = mixed + (1 - alpha) * history
    attn = F.dropout(torch.softmax(mixed, dim=-1), dropout_p)
    return attn @ v, (mixed if return_history else None)
