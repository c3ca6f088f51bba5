"""Bidirectional WKV (SoLA-Vision Eq. 9 / Vision-RWKV).

Backends of :func:`bi_wkv`: ``torch`` (alias ``chunk``: the O(T C) pure-PyTorch
path, exact for any w, u, every device), ``triton`` (the fused kernels of
:mod:`.fused`, the automatic choice for CUDA tensors when Triton imports) and
``naive`` (the O(T^2) reference). The choice follows :mod:`mmhybrid.ops.dispatch`.
"""
from ..dispatch import choose_backend, fused_module
from .chunk import chunk_bi_wkv
from .naive import naive_bi_wkv


def _triton(w, u, k, v):
    return fused_module(__name__, 'bi_wkv').fused_bi_wkv(w, u, k, v)


BACKENDS = {'torch': chunk_bi_wkv, 'chunk': chunk_bi_wkv, 'triton': _triton,
            'naive': naive_bi_wkv}


def _auto(k):
    try:
        return 'triton' if k.is_cuda and fused_module(__name__, 'bi_wkv') else 'torch'
    except RuntimeError:  # no Triton
        return 'torch'


def bi_wkv(w, u, k, v, backend=None):
    r"""Bidirectional WKV attention, Eq. 9 of SoLA-Vision.

    .. math::
        wkv_t = \frac{\sum_{i \ne t} e^{-(|t-i|-1) w + k_i} v_i + e^{u + k_t} v_t}
                     {\sum_{i \ne t} e^{-(|t-i|-1) w + k_i} + e^{u + k_t}}

    Args:
        w (Tensor): (C,) per-channel decay, used as is (the SoLA/Vision-RWKV layer
            passes ``decay / T``).
        u (Tensor): (C,) per-channel bonus for the token itself, used as is (the
            layer passes ``first`` unscaled: docs/design.md).
        k, v (Tensor): (B, T, C) keys and values.
        backend (str, optional): ``'torch'``/``'chunk'``, ``'triton'`` or
            ``'naive'``; default :mod:`mmhybrid.ops.dispatch`'s rule (automatic:
            ``'triton'`` for CUDA tensors when Triton imports, else ``'torch'``).
            ``'triton'`` computes channels with T |w| <= 30 and u in [-20, 30] and
            returns NaN for the others (no host sync); ``'torch'`` is exact for any.
    Returns:
        Tensor: (B, T, C) in the dtype of ``v``; the torch path returns a
        channel-major view (and takes channel-major k, v without a copy).
    """
    if k.dim() != 3 or k.shape != v.shape:
        raise ValueError(f'k and v must both be (B, T, C); got {tuple(k.shape)} '
                         f'and {tuple(v.shape)}')
    C = k.shape[-1]
    if w.shape != (C, ) or u.shape != (C, ):
        raise ValueError(f'w and u must be ({C},); got {tuple(w.shape)} and '
                         f'{tuple(u.shape)}')
    name = choose_backend('bi_wkv', BACKENDS, lambda: _auto(k), backend)
    return BACKENDS[name](w, u, k, v)


# a_t = e^{-w} a_{t-1} + e^{k} v and b_t = e^{-w} b_{t-1} + e^{k} in each direction
# (4), e^{k} v once (1), the bonus e^{u} e^{k} v and e^{u} e^{k} (2), the ratio (1)
WKV_MACS_PER_TOKEN_CHANNEL = 8


def wkv_macs(batch, tokens, channels):
    """Bidirectional WKV (SoLA-Vision Eq. 9) in its linear-time form.

    Each direction keeps a numerator and a denominator state per channel,
    updated once per token; the token's own bonus term and the final ratio complete
    Eq. 9: 8 multiply-adds per token and channel (exponentials, like every
    element-wise op, are not counted). The O(N^2) sum of Eq. 9 as written would be
    N multiply-adds per token and channel; no implementation computes it that way.
    """
    return WKV_MACS_PER_TOKEN_CHANNEL * batch * tokens * channels


__all__ = ['bi_wkv', 'chunk_bi_wkv', 'naive_bi_wkv', 'wkv_macs']
