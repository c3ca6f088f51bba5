"""Spectral helpers for analysing InfSA (Supplement Sec. 7-8)."""
import torch
import torch.nn.functional as F

from .linear import linear_infsa_weights


def perron_vector(matrix, num_iters=200):
    r"""Perron eigenvector of non-negative (..., N, N) matrices by power iteration.

    Eq. 26: :math:`v^{(t+1)} = A v^{(t)} / \|A v^{(t)}\|_1`, :math:`v^{(0)} \propto 1`.
    Returns (..., N) with unit L1 norm.
    """
    vec = matrix.new_full(matrix.shape[:-1], 1.0 / matrix.shape[-1])
    for _ in range(num_iters):
        vec = (matrix @ vec[..., None]).squeeze(-1)
        vec = vec / vec.sum(-1, keepdim=True).clamp_min(1e-30)
    return vec


def eigen_alignment(q, eps=1e-6, num_iters=200):
    """Cosine similarity between Linear InfSA weights and the Perron vector.

    Supplement Sec. 8: ``A = ReLU(Q Q^T) / ||ReLU(Q Q^T)||_F`` (tied Q = K) against
    the weights of Eq. 27, per (batch, head). Returns (B, heads) cosines.
    """
    q = q.double()
    attn = torch.relu(q @ q.transpose(-2, -1))
    attn = attn / attn.flatten(-2).norm(dim=-1)[..., None, None]
    perron = perron_vector(attn, num_iters)
    weights = linear_infsa_weights(q, q, eps).double()
    return F.cosine_similarity(weights, perron, dim=-1)
