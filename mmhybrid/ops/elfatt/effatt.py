"""The global linear head of ELFATT: efficient attention (EFFATT, Shen et al. 2021)."""
import torch


def effatt(q, k, v):
    r"""``softmax(Q) (softmax(K)^T V)``: the first term of ELFATT Eq. 8, O(N d^2).

    ``softmax(Q)`` normalises every query over its d features and ``softmax(K)``
    every key feature over the N tokens, so each output token is a convex
    combination of d "global context" vectors ``softmax(K)[:, i]^T V``. No scale is
    applied (a per-row softmax of Q already fixes the magnitude); LePE is added by
    the layer, not here.

    Args:
        q, k: (B, heads, N, d); v: (B, heads, N, dv), any float dtype. The two
            softmaxes run in at least float32; the products in the input dtype.
    Returns:
        (B, heads, N, dv) in the dtype of ``v``.
    """
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(f'q, k must be (B, heads, N, d) and v (B, heads, N, dv); '
                         f'got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}')
    acc = torch.promote_types(q.dtype, torch.float32)
    q = q.softmax(dim=-1, dtype=acc).to(v.dtype)
    k = k.softmax(dim=-2, dtype=acc).to(v.dtype)
    context = k.transpose(-2, -1) @ v  # (B, heads, d, dv)
    return q @ context
