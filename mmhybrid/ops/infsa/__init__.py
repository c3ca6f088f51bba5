"""Infinite Self-Attention (InfSA, Roffo & Palmer) as functional ops.

* :func:`pure_infsa`: one layer of Pure InfSA (Eq. 11-12), ``O(N^2)`` compute.
  ``naive`` forms the N x N matrix (tests); ``chunk`` (default) sweeps query-row
  blocks with a recomputing backward so 16k tokens fit without an N x N buffer.
  A GPU kernel registers itself with :func:`register_pure_infsa_backend`.
* :func:`linear_infsa`: Linear InfSA (Eq. 16-21), ``O(N d)`` time and an ``O(d)``
  state per head.

The discount gamma and the cross-layer accumulation (Eq. 9/23) live in the layer
(:class:`mmhybrid.layers.InfSAttention`), not in these parameter-free ops.
"""
from .chunk import chunk_pure_infsa
from .linear import linear_infsa, linear_infsa_context, linear_infsa_weights
from .naive import naive_linear_infsa, naive_pure_infsa
from .spectral import eigen_alignment, perron_vector

_BACKENDS = {'naive': naive_pure_infsa, 'chunk': chunk_pure_infsa}
_DEFAULT = {'cpu': 'chunk', 'cuda': 'chunk'}


def register_pure_infsa_backend(name, fn, default_for=()):
    """Add a backend ``fn(q, k, v, scale, eps)``; default for the device types given."""
    _BACKENDS[name] = fn
    for device_type in default_for:
        _DEFAULT[device_type] = name


def pure_infsa(q, k, v, scale=None, eps=1e-6, backend=None):
    r"""One Pure InfSA layer, :math:`\frac{[Q K^T s]_+}{\|[Q K^T s]_+\|_F+\epsilon} V`.

    Args:
        q, k, v (Tensor): (B, heads, N, d) (``v`` may have its own last dim).
        scale (float, optional): score scale ``s``, default ``d ** -0.5``.
        eps (float): added to the Frobenius norm taken per (batch, head).
        backend (str, optional): ``'chunk'``, ``'naive'`` or a registered name.
    Returns:
        Tensor: (B, heads, N, d_v) in the dtype of ``v``.
    """
    if q.dim() != 4 or q.shape != k.shape or q.shape[:3] != v.shape[:3]:
        raise ValueError(f'q, k, v must be (B, heads, N, d) with equal leading '
                         f'dims; got {tuple(q.shape)}, {tuple(k.shape)}, '
                         f'{tuple(v.shape)}')
    name = backend or _DEFAULT.get(q.device.type, 'chunk')
    if name not in _BACKENDS:
        raise KeyError(f'unknown pure InfSA backend {name!r}; have '
                       f'{sorted(_BACKENDS)}')
    return _BACKENDS[name](q, k, v, scale=scale, eps=eps)


__all__ = [
    'pure_infsa', 'linear_infsa', 'linear_infsa_context', 'linear_infsa_weights',
    'chunk_pure_infsa', 'naive_pure_infsa', 'naive_linear_infsa',
    'perron_vector', 'eigen_alignment', 'register_pure_infsa_backend'
]
