"""Swin's shifted-window attention, the 'local' attention of SwinELFATT."""
import math

import torch
import torch.nn as nn
from mmengine.model.weight_init import trunc_normal_

from mmhybrid.ops.windows import (padded_size, window_attention, window_mask,
                                  window_partition, window_reverse)
from mmhybrid.registry import MIXERS
from ..inherit import take
from .base import AttentionMixer


@MIXERS.register_module(name='shifted_window')
class ShiftedWindowAttention(AttentionMixer):
    """Swin's (S)W-MSA (Liu et al. 2021): attention in ``window_size`` windows
    with a relative position bias; odd blocks shift the windows by half a window.

    Padding to a multiple of the window is masked out. When the whole map fits in
    one window there is nothing to shift across and the shift is skipped (as the
    official Swin does for its last stage at 224^2). No LePE (Swin has none).

    Args:
        window_size (int): window side.
        shift (bool): shift the windows (backbones shift their odd layers).
        qkv_bias, qk_scale, attn_drop, proj_drop: see :class:`AttentionMixer`.
    """
    letter = 'H'
    no_weight_decay = ('relative_position_bias_table', )
    test_options = dict(window_size=4)

    def __init__(self, dims, num_heads, window_size=7, shift=False, qkv_bias=True,
                 qk_scale=None, attn_drop=0., proj_drop=0.):
        super().__init__(dims, num_heads, qkv_bias=qkv_bias, qk_scale=qk_scale,
                         attn_drop=attn_drop, proj_drop=proj_drop)
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

    def inherit_softmax(self, attn):
        """:meth:`AttentionMixer.inherit_softmax`, and the teacher's
        relative-position-bias table, resized bicubically to this window if
        another (zero, plain window attention, from a teacher without one)."""
        from mmhybrid.ops.pos_embed import resize_rel_pos_bias_table
        result = super().inherit_softmax(attn)
        result.dropped.pop('bias_table', None)
        own, table = self.relative_position_bias_table, attn.bias_table
        if table is None:
            result.tensors['relative_position_bias_table'] = torch.zeros_like(own)
            result.new['relative_position_bias_table'] = 'zero (the teacher has none)'
            return result
        if table.shape[0] != own.shape[0]:
            src = (math.isqrt(table.shape[0]) + 1) // 2
            table = resize_rel_pos_bias_table(table, self.window_size)
            result.note = (f'relative_position_bias_table resized from window {src} '
                           f'to {self.window_size}')
        else:
            result.copied += ', relative_position_bias_table'
        result.tensors['relative_position_bias_table'] = take(
            own, table, 'relative_position_bias_table')
        return result

    def attend(self, q, k, v, hw_shape, state):
        ws = self.window_size
        window = (ws, ws)
        shift = None
        if self.shift_size:
            # no shift when the map fits one window: 1 // ceil(size / ws) is 1
            # then, 0 otherwise (arithmetic on sizes, no branch, so exported
            # graphs keep it)
            fit_h, fit_w = (1 // ((size - 1) // ws + 1) for size in hw_shape)
            shift = (self.shift_size * (1 - fit_h * fit_w), ) * 2
        # under dynamo a padded window more (masked; the same windows of tokens):
        # two at least, so that torch.export keeps the counts symbolic (it
        # specialises sizes of 1)
        grid = tuple(padded_size(s, ws) + ws * torch.compiler.is_compiling()
                     for s in hw_shape)
        L = ws * ws
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        bias = bias.view(L, L, -1).permute(2, 0, 1)  # (heads, L, L)
        mask = window_mask(hw_shape, window, shift, q.device, grid)
        q, k, v = (window_partition(t, hw_shape, window, shift, grid)
                   for t in (q, k, v))
        out = window_attention(q, k, v, self.num_heads, mask, bias.to(q.dtype),
                               self.dropout_p, self.scale)
        return window_reverse(out, hw_shape, window, shift, grid), state
