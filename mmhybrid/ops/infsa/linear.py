"""Linear InfSA (Sec. 3.4, Eq. 16-21): O(N d) time, an O(d) state per head."""
import torch


def _acc_dtype(x):
    """fp32 for half types, the input dtype otherwise (float64 stays float64)."""
    return torch.promote_types(x.dtype, torch.float32)


def linear_infsa_weights(q, k, eps=1e-6):
    r"""The token weight vector :math:`a` of Eq. 16-20 (the Perron-vector surrogate).

    .. math::
        e_i = \|Q_i\|_2,\quad \alpha_i = \frac{e_i}{\sum_j e_j + \epsilon},\quad
        \bar q = \sum_i \alpha_i Q_i,\quad s_j = [\bar q^T K_j]_+,\quad
        a_j = \frac{s_j}{\sum_l s_l + \epsilon}

    Args:
        q, k: (B, heads, N, d); pass ``k=q`` for the paper's tied form.
    Returns:
        (B, heads, N), non-negative, each row sums to 1 (or 0 if all scores are 0).
    """
    acc = _acc_dtype(q)
    energy = torch.linalg.vector_norm(q, dim=-1, dtype=acc)
    alpha = energy / (energy.sum(-1, keepdim=True) + eps)
    central = (alpha[..., None, :] @ q.to(acc)).squeeze(-2)  # (B, H, d)
    scores = torch.relu((k.to(acc) @ central[..., None]).squeeze(-1))
    return scores / (scores.sum(-1, keepdim=True) + eps)


def linear_infsa_context(q, k, v, eps=1e-6):
    r"""Pooled value context :math:`h = \sum_t a_t V_t` (Eq. 21): (B, heads, 1, d).

    Half-precision inputs are accumulated in fp32; returned in the dtype of ``v``.
    """
    weights = linear_infsa_weights(q, k, eps)
    return (weights[..., None, :] @ v.to(weights.dtype)).to(v.dtype)


def linear_infsa(q, k, v, eps=1e-6):
    """Linear InfSA output on (B, heads, N, d): the context broadcast to all tokens.

    The result is an expanded view (no N x d copy); ``k=q`` gives the tied form.
    """
    return linear_infsa_context(q, k, v, eps).expand_as(v)
