"""Reference InfSA: the paper's formulas with explicit N x N matrices.

O(N^2) memory; meant for tests (works in float64).
"""
import torch


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
