"""2D sliding-window (neighbourhood) softmax attention on a token grid.

``sliding_window_attention`` dispatches to ``torch`` (alias ``halo``: query tiles +
a halo of keys, one ``F.scaled_dot_product_attention`` call; the default
everywhere) or ``naive`` (an explicit N x N mask; the reference for tests) by the
rule of :mod:`mmhybrid.ops.dispatch`.
"""
from ..dispatch import choose_backend
from ..heads import check_heads
from ..windows import window_pair
from .halo import halo_sliding_window_attention
from .naive import (naive_sliding_window_attention, neighbourhood_mask,
                    window_pairs)

BACKENDS = ('torch', 'halo', 'naive')


def sliding_window_attention(q, k, v, hw_shape, window_size, scale=None,
                             tile_size=None, backend=None):
    r"""Each token attends to the ``window x window`` tokens around it.

    .. math::
        o_i = \sum_{j \in \mathcal{N}(i)} \mathrm{softmax}_j(s\, q_i^T k_j)\, v_j

    ``N(i)`` is the window centred on token i's grid position, shifted inwards
    where it would cross the border (NATTEN's rule): every token sees exactly
    ``min(window, H) x min(window, W)`` keys, none of them padding. A map smaller
    than the window along an axis is seen whole along that axis.

    Args:
        q, k, v (Tensor): (B, heads, H * W, d), tokens row-major (``v`` may have
            its own last dim).
        hw_shape (tuple[int]): (H, W) of the token grid, any sizes.
        window_size (int | tuple[int]): odd window (height, width).
        scale (float, optional): logit scale ``s``, default ``d ** -0.5``.
        tile_size (int | tuple[int], optional): query tile of the ``'halo'``
            backend; default the window size, or the whole map when that is
            cheaper (small maps).
        backend (str, optional): ``'torch'``/``'halo'`` (automatic) or ``'naive'``.
    Returns:
        Tensor: (B, heads, H * W, d_v).
    """
    window_size = window_pair(window_size, 'window_size')
    if any(w % 2 == 0 for w in window_size):
        raise ValueError(f'window_size must be odd (a window centred on its '
                         f'token), got {window_size}')
    H, W = hw_shape
    check_heads(q, k, v)
    if q.shape[2] != H * W:
        raise ValueError(f'q, k, v must have H*W = {H * W} tokens; got {q.shape[2]}')
    if choose_backend('sliding_window_attention', BACKENDS, lambda: 'torch',
                      backend) == 'naive':
        return naive_sliding_window_attention(q, k, v, (H, W), window_size,
                                              scale=scale)
    if tile_size is not None:
        tile_size = window_pair(tile_size, 'tile_size')
    return halo_sliding_window_attention(q, k, v, (H, W), window_size,
                                         scale=scale, tile_size=tile_size)


def sliding_window_macs(batch, heads, hw_shape, window_size, key_dim, value_dim):
    """2D sliding-window attention: ``Q K^T`` and ``A V`` over each query's window.

    Every query scores exactly ``min(wh, H) x min(ww, W)`` keys (the window is
    shifted inwards at the borders, never padded: :func:`mmhybrid.ops.
    sliding_window_attention`), so ``B heads H W min(wh, H) min(ww, W) (d + d_v)``:
    ``2 w^2 d`` per query and head for a map at least as large as the window. The
    halo tiles the op runs score every query against its whole tile region
    (169 keys for a 7x7 window with 7x7 tiles) under a mask; that masked work is
    the implementation's, not the method's, and is not counted.
    """
    (H, W), (wh, ww) = hw_shape, window_size
    return batch * heads * H * W * min(wh, H) * min(ww, W) * (key_dim + value_dim)


__all__ = ['sliding_window_attention', 'halo_sliding_window_attention',
           'naive_sliding_window_attention', 'neighbourhood_mask', 'window_pairs',
           'sliding_window_macs']
