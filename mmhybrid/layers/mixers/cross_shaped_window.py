"""CSWin's cross-shaped window attention, the 'local' attention of CSWin."""
import torch

from mmhybrid.ops.windows import (padding_mask, window_attention, window_partition,
                                  window_reverse)
from mmhybrid.registry import MIXERS
from .base import AttentionMixer, conv_in_windows


@MIXERS.register_module(name='cross_shaped_window')
class CrossShapedWindowAttention(AttentionMixer):
    """CSWin's cross-shaped window attention (Dong et al. 2022).

    The first half of the channels and heads attends inside vertical stripes
    (full height, ``split_size`` wide), the second half inside horizontal stripes
    (``split_size`` high, full width). LePE is applied inside each stripe, as in
    CSWin. Padding to a multiple of ``split_size`` is masked out.
    """
    letter = 'X'
    test_options = dict(split_size=2)

    def __init__(self, dims, num_heads, split_size=7, lepe=True, **kwargs):
        super().__init__(dims, num_heads, lepe=lepe, **kwargs)
        if num_heads % 2 or dims % 2:
            raise ValueError('cross-shaped attention needs an even number of heads')
        self.split_size = split_size

    def _branches(self, hw_shape):
        """(channels, window) of the vertical and of the horizontal stripes."""
        (H, W), s, half = hw_shape, self.split_size, self.dims // 2
        return ((slice(0, half), (H, s)), (slice(half, None), (s, W)))

    def attend(self, q, k, v, hw_shape, state):
        outs = []
        for part, window in self._branches(hw_shape):
            mask = padding_mask(hw_shape, window, q.device)
            windows = [window_partition(t[..., part], hw_shape, window)
                       for t in (q, k, v)]
            out = window_attention(*windows, self.num_heads // 2, mask,
                                   dropout_p=self.dropout_p, scale=self.scale)
            outs.append(window_reverse(out, hw_shape, window))
        return torch.cat(outs, dim=-1), state

    def positional(self, v, hw_shape):
        outs = []
        for part, window in self._branches(hw_shape):
            w = conv_in_windows(window_partition(v[..., part], hw_shape, window),
                                window, self.lepe.weight[part], self.lepe.bias[part])
            outs.append(window_reverse(w, hw_shape, window))
        return torch.cat(outs, dim=-1)
