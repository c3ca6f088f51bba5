"""Reference InfSA: the paper's formulas with explicit N x N matrices (O(N^2)
memory; for tests, in float64), and the spectral analysis of Supplement Sec. 7-8.
"""
import torch
import torch.nn.functional as F

from .linear import linear_infsa_weights


def naive_pure_infsa(q, k, v, scale=None, eps=1e-6):
    r"""Eq. 11-12: :math:`Z = \frac{[Q K^T s]_+}{\|[Q K^T s]_+\|_F + \epsilon} V`.

    Args:
        q, k, v: (B, heads, N, d). ``scale`` defaults to d^-0.5; the Frobenius norm
            is taken per (batch, head).
    """
    scale = q.shape[-1]**-0.5 if scale is None else scale
    attn = torch.relu(q @ k.transpose(-2, -1) * scale)
    norm = attn.flatten(-2).norm(dim=-1)[..., None, None]
    return (attn / (norm + eps)) @ v


def naive_linear_infsa(q, k, v, eps=1e-6):
    r"""Eq. 16-21 written as the rank-1 attention matrix :math:`\mathbf{1} a^T`.

    :math:`e_i = \|Q_i\|`, :math:`\alpha = e / (\sum e + \epsilon)`,
    :math:`\bar q = \sum_i \alpha_i Q_i`, :math:`s_j = [\bar q^T K_j]_+`,
    :math:`a = s / (\sum s + \epsilon)`; every token receives :math:`\sum_t a_t V_t`.
    """
    energy = q.norm(dim=-1)
    alpha = energy / (energy.sum(-1, keepdim=True) + eps)
    central = (alpha[..., :, None] * q).sum(-2)
    scores = torch.relu((central[..., None, :] * k).sum(-1))
    weights = scores / (scores.sum(-1, keepdim=True) + eps)
    attn = torch.ones_like(weights)[..., :, None] * weights[..., None, :]
    return attn @ v


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
