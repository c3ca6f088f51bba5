"""Local window attentions of the LOCAL baselines: Swin's shifted windows and
CSWin's cross-shaped stripes. Both cut the (padded) token grid into rectangular
windows and run softmax attention inside each window.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model.weight_init import trunc_normal_

from mmhybrid.ops.attention import softmax_attention
from .image_attention import ImageAttention


def window_partition(x, hw_shape, window, shift=(0, 0)):
    """(B, H*W, C) -> (B, nW, wh*ww, C) windows of the zero-padded, rolled grid.

    The grid is padded at the bottom/right to multiples of ``window`` and then
    rolled by ``-shift`` (Swin's cyclic shift). Windows are numbered row-major,
    tokens inside a window row-major.
    """
    B, _, C = x.shape
    (H, W), (wh, ww) = hw_shape, window
    Hp, Wp = -(-H // wh) * wh, -(-W // ww) * ww
    x = F.pad(x.view(B, H, W, C), (0, 0, 0, Wp - W, 0, Hp - H))
    if any(shift):
        x = torch.roll(x, (-shift[0], -shift[1]), dims=(1, 2))
    x = x.view(B, Hp // wh, wh, Wp // ww, ww, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(B, -1, wh * ww, C)


def window_reverse(windows, hw_shape, window, shift=(0, 0)):
    """Inverse of :func:`window_partition`: (B, nW, wh*ww, C) -> (B, H*W, C)."""
    B, _, _, C = windows.shape
    (H, W), (wh, ww) = hw_shape, window
    Hp, Wp = -(-H // wh) * wh, -(-W // ww) * ww
    x = windows.view(B, Hp // wh, Wp // ww, wh, ww, C).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(B, Hp, Wp, C)
    if any(shift):
        x = torch.roll(x, shift, dims=(1, 2))
    return x[:, :H, :W].reshape(B, H * W, C)


def window_mask(hw_shape, window, shift, device):
    """(nW, L, L) bool: which keys a query of each window may attend to.

    Keys in the bottom/right padding are excluded; with a shift, so are keys that
    the cyclic roll brought from another image region (Swin's SW-MSA mask, built
    in the rolled frame). Every token may attend to itself, so no row is empty.
    """
    (H, W), (wh, ww) = hw_shape, window
    Hp, Wp = -(-H // wh) * wh, -(-W // ww) * ww
    valid = torch.zeros(Hp, Wp, device=device)
    valid[:H, :W] = 1
    region = torch.zeros(Hp, Wp, device=device)
    if any(shift):
        valid = torch.roll(valid, (-shift[0], -shift[1]), dims=(0, 1))
        label = 0
        for hs in (slice(0, Hp - wh), slice(Hp - wh, Hp - shift[0]),
                   slice(Hp - shift[0], Hp)):
            for ws in (slice(0, Wp - ww), slice(Wp - ww, Wp - shift[1]),
                       slice(Wp - shift[1], Wp)):
                region[hs, ws] = label
                label += 1

    def windows(t):
        return window_partition(t.view(1, -1, 1), (Hp, Wp), window)[0, ..., 0]

    region, valid = windows(region), windows(valid).bool()  # (nW, L)
    mask = (region[:, :, None] == region[:, None, :]) & valid[:, None, :]
    return mask | torch.eye(wh * ww, dtype=torch.bool, device=device)


def _window_attention(q, k, v, num_heads, mask, bias=None, dropout_p=0., scale=None):
    """Softmax attention inside windows. q, k, v: (B, nW, L, C); mask (nW, L, L) or
    None (all keys allowed; with no bias, FlashAttention applies)."""
    B, nW, L, C = q.shape

    def heads(t):
        return t.view(B, nW, L, num_heads, -1).transpose(2, 3)  # (B, nW, h, L, d)

    if mask is None and bias is None:
        out = softmax_attention(heads(q), heads(k), heads(v), dropout_p, scale)
        return out.transpose(2, 3).reshape(B, nW, L, C)
    attn_mask = mask[:, None]  # (nW, 1, L, L)
    if bias is not None:  # (heads, L, L) -> (nW, heads, L, L)
        attn_mask = torch.where(attn_mask, bias, float('-inf'))
    out = F.scaled_dot_product_attention(heads(q), heads(k), heads(v),
                                         attn_mask=attn_mask, dropout_p=dropout_p,
                                         scale=scale)
    return out.transpose(2, 3).reshape(B, nW, L, C)


class ShiftedWindowAttention(ImageAttention):
    """Swin's (S)W-MSA (Liu et al. 2021): attention in ``window_size`` windows
    with a relative position bias; odd blocks shift the windows by half a window.

    Padding to a multiple of the window is masked out. When the whole map fits in
    one window there is nothing to shift across and the shift is skipped (as the
    official Swin does for its last stage at 224^2). No LePE by default.
    """

    def __init__(self, dims, num_heads, window_size=7, shift=False, lepe=False,
                 **kwargs):
        super().__init__(dims, num_heads, lepe=lepe, **kwargs)
        self.window_size = window_size
        self.shift_size = window_size // 2 if shift else 0
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1)**2, num_heads))
        coords = torch.stack(torch.meshgrid(
            torch.arange(window_size), torch.arange(window_size),
            indexing='ij')).flatten(1)  # (2, L)
        rel = (coords[:, :, None] - coords[:, None, :]) + window_size - 1
        self.register_buffer('relative_position_index',
                             rel[0] * (2 * window_size - 1) + rel[1], persistent=False)
        trunc_normal_(self.relative_position_bias_table, std=.02)

    def attend(self, q, k, v, hw_shape):
        ws = self.window_size
        window = (ws, ws)
        fits = hw_shape[0] <= ws and hw_shape[1] <= ws
        shift = (0, 0) if fits else (self.shift_size, self.shift_size)
        L = ws * ws
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        bias = bias.view(L, L, -1).permute(2, 0, 1)  # (heads, L, L)
        mask = window_mask(hw_shape, window, shift, q.device)
        q, k, v = (window_partition(t, hw_shape, window, shift) for t in (q, k, v))
        out = _window_attention(q, k, v, self.num_heads, mask, bias.to(q.dtype),
                                self.dropout_p, self.scale)
        return window_reverse(out, hw_shape, window, shift)


class CrossShapedWindowAttention(ImageAttention):
    """CSWin's cross-shaped window attention (Dong et al. 2022).

    The first half of the channels and heads attends inside vertical stripes
    (full height, ``split_size`` wide), the second half inside horizontal stripes
    (``split_size`` high, full width). LePE is applied inside each stripe, as in
    CSWin. Padding to a multiple of ``split_size`` is masked out.
    """

    def __init__(self, dims, num_heads, split_size=7, **kwargs):
        super().__init__(dims, num_heads, **kwargs)
        if num_heads % 2 or dims % 2:
            raise ValueError('cross-shaped attention needs an even number of heads')
        self.split_size = split_size

    def _stripes(self, hw_shape):
        H, W = hw_shape
        s = self.split_size
        return ((H, s), (s, W))  # (vertical, horizontal) stripe windows

    def attend(self, q, k, v, hw_shape):
        half = self.dims // 2
        outs = []
        for branch, window in enumerate(self._stripes(hw_shape)):
            part = slice(branch * half, (branch + 1) * half)
            padded = hw_shape[0] % window[0] or hw_shape[1] % window[1]
            mask = window_mask(hw_shape, window, (0, 0), q.device) if padded else None
            windows = [window_partition(t[..., part], hw_shape, window)
                       for t in (q, k, v)]
            out = _window_attention(*windows, self.num_heads // 2, mask,
                                    dropout_p=self.dropout_p, scale=self.scale)
            outs.append(window_reverse(out, hw_shape, window))
        return torch.cat(outs, dim=-1)

    def positional(self, v, hw_shape):
        half = self.dims // 2
        outs = []
        for branch, window in enumerate(self._stripes(hw_shape)):
            part = slice(branch * half, (branch + 1) * half)
            w = window_partition(v[..., part], hw_shape, window)  # (B, nW, L, C/2)
            B, nW, L, C = w.shape
            w = w.reshape(B * nW, *window, C).permute(0, 3, 1, 2)
            w = F.conv2d(w, self.lepe.weight[part], self.lepe.bias[part],
                         padding=1, groups=C)
            w = w.permute(0, 2, 3, 1).reshape(B, nW, L, C)
            outs.append(window_reverse(w, hw_shape, window))
        return torch.cat(outs, dim=-1)
