"""Rectangular windows of a token grid, as Swin and CSWin attend inside them.

The grid is zero-padded at the bottom/right to multiples of the window (or to a
given ``grid``) and may be rolled (Swin's cyclic shift); windows are numbered
row-major, tokens inside a window row-major.
"""
import torch
import torch.nn.functional as F

from .attention import softmax_attention
from .tracing import is_tracing


def window_pair(value, name='window'):
    """``value``, a side or (height, width), as a pair of positive ints."""
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or any(not isinstance(x, int) or x < 1 for x in pair):
        raise ValueError(f'{name} must be a positive int or a pair, got {value!r}')
    return pair


def padded_size(size, window):
    """``size`` rounded up to a multiple of ``window``."""
    return (size + window - 1) // window * window


def roll(x, shifts, dims):
    """``torch.roll`` as an index gather, so that shifts computed from sizes stay
    computations in an exported graph (``torch.roll`` freezes them).

    The wrap is size arithmetic plus a ``where`` on the index: the dynamo ONNX
    exporter takes no tensor ``%`` by a symbolic size, and torch.export guards
    on the lengths of an index concatenation (``arange(split, size)``).
    """
    for shift, dim in zip(shifts, dims):
        size = x.shape[dim]
        index = torch.arange(size, device=x.device) - shift % size
        x = x.index_select(dim, torch.where(index < 0, index + size, index))
    return x


def _grid(hw_shape, window, grid):
    return grid or tuple(padded_size(s, w) for s, w in zip(hw_shape, window))


def window_partition(x, hw_shape, window, shift=None, grid=None):
    """(B, H*W, C) -> (B, nW, wh*ww, C) windows of the padded grid, rolled by
    ``-shift`` (None: no roll; a shift may be 0 or computed from sizes); ``grid``
    (Hp, Wp): pad to it, default the next multiples of the window."""
    B, _, C = x.shape
    (H, W), (wh, ww) = hw_shape, window
    Hp, Wp = _grid(hw_shape, window, grid)
    x = F.pad(x.view(B, H, W, C), (0, 0, 0, Wp - W, 0, Hp - H))
    if shift is not None:
        x = roll(x, (-shift[0], -shift[1]), dims=(1, 2))
    x = x.view(B, Hp // wh, wh, Wp // ww, ww, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(B, -1, wh * ww, C)


def window_reverse(windows, hw_shape, window, shift=None, grid=None):
    """Inverse of :func:`window_partition`: (B, nW, wh*ww, C) -> (B, H*W, C)."""
    B, _, _, C = windows.shape
    (H, W), (wh, ww) = hw_shape, window
    Hp, Wp = _grid(hw_shape, window, grid)
    x = windows.view(B, Hp // wh, Wp // ww, wh, ww, C).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(B, Hp, Wp, C)
    if shift is not None:
        x = roll(x, shift, dims=(1, 2))
    if is_tracing():  # crop by index: torch.export would guard Hp == H (a view)
        return x.flatten(1, 2).index_select(1, (torch.arange(
            H, device=x.device)[:, None] * Wp + torch.arange(W, device=x.device)).flatten())
    return x[:, :H, :W].reshape(B, H * W, C)


def window_mask(hw_shape, window, shift, device, grid=None):
    """(nW, L, L) bool: which keys a query of each window may attend to.

    Keys in the bottom/right padding are excluded; with a shift, so are keys that
    the cyclic roll brought from another image region (Swin's SW-MSA mask, built
    in the rolled frame). Every token may attend to itself, so no row is empty.
    """
    (H, W), (wh, ww) = hw_shape, window
    Hp, Wp = _grid(hw_shape, window, grid)
    rows = torch.arange(Hp, device=device)[:, None]
    cols = torch.arange(Wp, device=device)[None, :]
    valid = ((rows < H) & (cols < W)).float()
    region = torch.zeros(Hp, Wp, device=device)
    if shift is not None:
        valid = roll(valid, (-shift[0], -shift[1]), dims=(0, 1))
        # Swin's nine regions: 0 | 1 | 2 in each direction
        row_region = (rows >= Hp - wh).long() + (rows >= Hp - shift[0]).long()
        col_region = (cols >= Wp - ww).long() + (cols >= Wp - shift[1]).long()
        region = (3 * row_region + col_region).float()

    def windows(t):
        return window_partition(t.view(1, -1, 1), (Hp, Wp), window)[0, ..., 0]

    region, valid = windows(region), windows(valid) > 0  # (nW, L)
    mask = (region[:, :, None] == region[:, None, :]) & valid[:, None, :]
    index = torch.arange(wh * ww, device=device)
    return mask | (index[:, None] == index[None, :])


def padding_mask(hw_shape, window, device):
    """:func:`window_mask` of the bottom/right padding alone, or None in eager
    calls where the map is a whole number of windows (the mask would be all
    True); under a tracer always the mask, so the graph serves every size."""
    (H, W), (wh, ww) = hw_shape, window
    if is_tracing() or H % wh or W % ww:  # the tracer test first: no guard
        return window_mask(hw_shape, window, None, device)
    return None


def window_attention(q, k, v, num_heads, mask=None, bias=None, dropout_p=0.,
                     scale=None):
    """Softmax attention inside windows.

    Windows are batched into the first dimension, so attention is the 4-D
    (batch x windows, heads, L, d) call that every SDPA kernel and the ONNX
    exporters take (CPU SDPA runs 5-D inputs on its slow unfused path).

    Args:
        q, k, v: (B, nW, L, C) windows of tokens.
        mask: (nW, L, L) bool, or None (all keys allowed; with no ``bias``,
            :func:`softmax_attention` may use FlashAttention).
        bias: (heads, L, L) additive logit bias (Swin's relative position bias).
    Returns:
        (B, nW, L, C).
    """
    B, nW, L, C = q.shape

    def heads(t):  # (B * nW, heads, L, d), a view
        return t.reshape(B * nW, L, num_heads, -1).transpose(1, 2)

    if mask is None and bias is None:
        out = softmax_attention(heads(q), heads(k), heads(v), dropout_p, scale)
    else:
        attn_mask = mask[:, None]  # (nW, 1, L, L)
        if bias is not None:  # (heads, L, L) -> (nW, heads, L, L)
            attn_mask = torch.where(attn_mask, bias, float('-inf'))
        attn_mask = attn_mask.expand(B, *attn_mask.shape).reshape(
            B * nW, *attn_mask.shape[1:])
        out = F.scaled_dot_product_attention(heads(q), heads(k), heads(v),
                                             attn_mask=attn_mask,
                                             dropout_p=dropout_p, scale=scale)
    out = out.transpose(1, 2)
    if is_tracing():  # a copy the graph keeps: the dynamo ONNX exporter's SDPA
        out = out.clone(memory_format=torch.contiguous_format)  # decomposition
        # returns other strides than eager's
    return out.reshape(B, nW, L, C)
