"""Bidirectional WKV (SoLA-Vision Eq. 9 / Vision-RWKV).

``bi_wkv`` dispatches to a backend by name: ``naive`` is the O(T^2) reference,
``chunk`` (alias ``torch``) the O(T C) pure-PyTorch path for every device, ``triton``
the fused kernels (registered when triton imports; the default for CUDA tensors).
``MMHYBRID_WKV_BACKEND=torch|triton|<name>`` forces one for every call; an explicit
``backend=`` argument wins over both. Other kernels register with
:func:`register_wkv_backend`.
"""
from ..dispatch import BackendRegistry
from .chunk import chunk_bi_wkv
from .naive import naive_bi_wkv

ENV_VAR = 'MMHYBRID_WKV_BACKEND'
BACKENDS = BackendRegistry('WKV', {'naive': naive_bi_wkv, 'chunk': chunk_bi_wkv,
                                   'torch': chunk_bi_wkv}, env_var=ENV_VAR)
register_wkv_backend = BACKENDS.register
available_wkv_backends = BACKENDS.names

try:
    from .fused import fused_bi_wkv
except ImportError:  # no triton: the chunk path serves every device
    fused_bi_wkv = None
else:
    register_wkv_backend('triton', fused_bi_wkv, default_for=('cuda', ))


def bi_wkv(w, u, k, v, backend=None):
    r"""Bidirectional WKV attention, Eq. 9 of SoLA-Vision.

    .. math::
        wkv_t = \frac{\sum_{i \ne t} e^{-(|t-i|-1) w + k_i} v_i + e^{u + k_t} v_t}
                     {\sum_{i \ne t} e^{-(|t-i|-1) w + k_i} + e^{u + k_t}}

    Args:
        w (Tensor): (C,) per-channel decay, used as is (the SoLA/Vision-RWKV layer
            passes ``decay / T``).
        u (Tensor): (C,) per-channel bonus for the token itself (``first / T``).
        k, v (Tensor): (B, T, C) keys and values.
        backend (str, optional): ``'chunk'``/``'torch'``, ``'triton'``, ``'naive'`` or
            a registered name; default: ``$MMHYBRID_WKV_BACKEND``, else the default of
            the tensors' device type.
    Returns:
        Tensor: (B, T, C) in the dtype of ``v``.
    """
    if k.dim() != 3 or k.shape != v.shape:
        raise ValueError(f'k and v must both be (B, T, C); got {tuple(k.shape)} '
                         f'and {tuple(v.shape)}')
    C = k.shape[-1]
    if w.shape != (C, ) or u.shape != (C, ):
        raise ValueError(f'w and u must be ({C},); got {tuple(w.shape)} and '
                         f'{tuple(u.shape)}')
    return BACKENDS.lookup(k.device.type, backend)(w, u, k, v)


__all__ = [
    'bi_wkv', 'chunk_bi_wkv', 'naive_bi_wkv', 'fused_bi_wkv', 'register_wkv_backend',
    'available_wkv_backends'
]
