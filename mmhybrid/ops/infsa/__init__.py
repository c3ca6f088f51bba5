"""Infinite Self-Attention (InfSA, Roffo & Palmer) as functional ops.

* :func:`pure_infsa`: one layer of Pure InfSA (Eq. 11-12), ``O(N^2)`` compute.
  ``torch`` (alias ``chunk``, the default) sweeps query-row blocks with a
  recomputing backward so 16k tokens fit without an N x N buffer; ``naive`` forms
  the N x N matrix (tests).
* :func:`linear_infsa`: Linear InfSA (Eq. 16-21), ``O(N d)`` time and an ``O(d)``
  state per head. ``torch`` (:mod:`.linear`, hand-written backward, no N x d
  temporaries) or ``triton`` (:mod:`.fused`, two fused passes each way; the
  automatic choice for CUDA tensors when Triton imports).

Both pick their backend by the rule of :mod:`mmhybrid.ops.dispatch`.

The discount gamma and the cross-layer accumulation (Eq. 9/23) live in the layer
(:class:`mmhybrid.layers.InfSAttention`), not in these parameter-free ops.
"""
import importlib

from ..dispatch import choose_backend, triton_if_usable
from .chunk import chunk_pure_infsa
from .linear import linear_infsa_weights, torch_linear_infsa_context
from .naive import naive_linear_infsa, naive_pure_infsa
from .spectral import eigen_alignment, perron_vector

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
    if q.dim() != 4 or q.shape != k.shape or q.shape[:3] != v.shape[:3]:
        raise ValueError(f'q, k, v must be (B, heads, N, d) with equal leading '
                         f'dims; got {tuple(q.shape)}, {tuple(k.shape)}, '
                         f'{tuple(v.shape)}')
    fn = PURE_BACKENDS[choose_backend('pure_infsa', PURE_BACKENDS, lambda: 'torch',
                                      backend)]
    return fn(q, k, v, scale=scale, eps=eps)


LINEAR_BACKENDS = ('torch', 'triton')


def _fused():
    """:mod:`.fused`, imported on first use (Triton is optional and slow to import)."""
    return importlib.import_module('.fused', __name__)


def linear_infsa_backend(q, k, v, backend=None):
    """The Linear InfSA backend for these tensors (:mod:`mmhybrid.ops.dispatch`;
    the op's key is ``linear_infsa``); automatic: ``'triton'`` for CUDA tensors when
    Triton imports, else ``'torch'``. A forced ``'triton'`` that cannot run raises.
    """
    return choose_backend('linear_infsa', LINEAR_BACKENDS,
                          lambda: triton_if_usable(_fused, q, k, v), backend)


def linear_infsa_context(q, k, v, eps=1e-6, backend=None):
    r"""Pooled value context :math:`h = \sum_t a_t V_t` (Eq. 21): (B, heads, 1, dv).

    Args:
        q, k: (B, heads, N, d); ``k=None`` or ``k is q`` is the paper's tied form
            (its gradient is accumulated into that of ``q`` without a copy).
        v: (B, heads, N, dv).
        eps (float): the epsilon of Eq. 17 and 20.
        backend (str, optional): ``'torch'`` or ``'triton'``; see
            :func:`linear_infsa_backend`.
    Returns:
        The context in the dtype of ``v``, accumulated in at least float32.
    """
    if q.dim() != 4 or (k is not None and k.shape != q.shape) or \
            q.shape[:3] != v.shape[:3]:
        raise ValueError(f'q, k must be (B, heads, N, d) and v (B, heads, N, dv); '
                         f'got {tuple(q.shape)}, '
                         f'{None if k is None else tuple(k.shape)}, {tuple(v.shape)}')
    if linear_infsa_backend(q, k, v, backend) == 'triton':
        try:
            fused = _fused()
        except ImportError as err:
            raise RuntimeError(f'Linear InfSA triton backend: triton does not import '
                               f'({err})') from err
        return fused.triton_linear_infsa_context(q, k, v, eps)
    return torch_linear_infsa_context(q, k, v, eps)


def linear_infsa(q, k, v, eps=1e-6, backend=None):
    """Linear InfSA output on (B, heads, N, d): the context broadcast to all tokens.

    The result is an expanded view (no N x d copy); ``k=q`` gives the tied form.
    Arguments as :func:`linear_infsa_context`.
    """
    return linear_infsa_context(q, k, v, eps, backend).expand_as(v)


__all__ = [
    'pure_infsa', 'linear_infsa', 'linear_infsa_context', 'linear_infsa_weights',
    'linear_infsa_backend', 'torch_linear_infsa_context',
    'chunk_pure_infsa', 'naive_pure_infsa', 'naive_linear_infsa',
    'perron_vector', 'eigen_alignment'
]
