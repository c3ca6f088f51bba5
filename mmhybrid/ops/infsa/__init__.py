"""Infinite Self-Attention (InfSA, Roffo & Palmer) as functional ops.

* :func:`pure_infsa`: one layer of Pure InfSA (Eq. 11-12), ``O(N^2)`` compute.
  ``torch`` (alias ``chunk``, the default) sweeps query-row blocks with a
  recomputing backward so 16k tokens fit without an N x N buffer; ``naive`` forms
  the N x N matrix (tests).
* :func:`linear_infsa`: Linear InfSA (Eq. 16-21), ``O(N d)`` time and an ``O(d)``
  state per head. ``torch`` (:mod:`.linear`, hand-written backward, no N x d
  temporaries) or ``triton`` (:mod:`.fused`, two fused passes each way; the
  automatic choice for CUDA tensors when Triton imports).

Both pick their backend by the rule of :mod:`mmhybrid.ops.dispatch`. The discount
gamma and the cross-layer accumulation (Eq. 9/23) live in the layer
(:class:`mmhybrid.layers.InfSAttention`), not in these parameter-free ops.
"""
from ..dispatch import choose_backend, fused_module, triton_or_torch
from ..heads import check_heads
from .chunk import chunk_pure_infsa
from .linear import linear_infsa_weights, torch_linear_infsa_context
from .naive import eigen_alignment, naive_linear_infsa, naive_pure_infsa, perron_vector

PURE_BACKENDS = {'torch': chunk_pure_infsa, 'chunk': chunk_pure_infsa,
                 'naive': naive_pure_infsa}


def pure_infsa(q, k, v, scale=None, eps=1e-6, backend=None):
    r"""One Pure InfSA layer, :math:`\frac{[Q K^T s]_+}{\|[Q K^T s]_+\|_F+\epsilon} V`.

    Args:
        q, k, v (Tensor): (B, heads, N, d) (``v`` may have its own last dim).
        scale (float, optional): score scale ``s``, default ``d ** -0.5``.
        eps (float): added to the Frobenius norm taken per (batch, head).
        backend (str, optional): ``'torch'``/``'chunk'`` (automatic) or ``'naive'``.
    Returns:
        Tensor: (B, heads, N, d_v) in the dtype of ``v``.
    """
    check_heads(q, k, v)
    backend = choose_backend('pure_infsa', PURE_BACKENDS, lambda: 'torch', backend)
    return PURE_BACKENDS[backend](q, k, v, scale=scale, eps=eps)


def linear_infsa_backend(q, k, v, backend=None):
    """``'torch'`` or ``'triton'`` (:mod:`.fused`) for the op ``linear_infsa``, by
    the rule of :mod:`mmhybrid.ops.dispatch`; automatic: triton for CUDA tensors."""
    return triton_or_torch('linear_infsa', __name__, (q, k, v), backend)


def linear_infsa_context(q, k, v, eps=1e-6, backend=None):
    r"""Pooled value context :math:`h = \sum_t a_t V_t` (Eq. 21): (B, heads, 1, dv).

    Args:
        q, k: (B, heads, N, d); ``k=None`` or ``k is q`` is the paper's tied form
            (its gradient is accumulated into that of ``q`` without a copy).
        v: (B, heads, N, dv).
        eps (float): the epsilon of Eq. 17 and 20.
        backend (str, optional): see :func:`linear_infsa_backend`.
    Returns:
        The context in the dtype of ``v``, accumulated in at least float32.
    """
    check_heads(q, k, v)
    if linear_infsa_backend(q, k, v, backend) == 'triton':
        return fused_module(__name__, 'linear_infsa').triton_linear_infsa_context(
            q, k, v, eps)
    return torch_linear_infsa_context(q, k, v, eps)


def linear_infsa(q, k, v, eps=1e-6, backend=None):
    """Linear InfSA output on (B, heads, N, d): the context broadcast to all tokens
    as an expanded view (no N x d copy). Arguments as :func:`linear_infsa_context`.
    """
    return linear_infsa_context(q, k, v, eps, backend).expand_as(v)


__all__ = [
    'pure_infsa', 'linear_infsa', 'linear_infsa_context', 'linear_infsa_weights',
    'linear_infsa_backend', 'torch_linear_infsa_context',
    'chunk_pure_infsa', 'naive_pure_infsa', 'naive_linear_infsa',
    'perron_vector', 'eigen_alignment'
]
