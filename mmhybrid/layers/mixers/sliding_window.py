"""2D sliding-window (neighbourhood) attention ('W' in a schedule).

InfiniteVL's SWA layer (Sec. 3.2, Supplement 6) on the token grid of an image:
each token attends to the window x window tokens around it.
"""
from mmhybrid.ops import sliding_window_attention, sliding_window_macs
from mmhybrid.registry import MIXERS
from .base import AttentionMixer, from_heads, to_heads


@MIXERS.register_module(name='sliding_window')
class SlidingWindowAttention(AttentionMixer):
    """Multi-head neighbourhood attention via :func:`sliding_window_attention`.
    No position bias (like SoLA's global softmax layers, position comes from the
    stem's embedding and the conv MLP).

    Args:
        window_size (int | tuple[int]): odd window (height, width).
    """
    letter = 'W'
    test_options = dict(window_size=3)

    def __init__(self, dims, num_heads, window_size=7, qkv_bias=True):
        super().__init__(dims, num_heads, qkv_bias=qkv_bias)
        window = ((window_size, ) * 2 if isinstance(window_size, int) else
                  tuple(window_size))
        if len(window) != 2 or any(w < 1 or w % 2 == 0 for w in window):
            raise ValueError(f'window_size must be an odd int or a pair of odd '
                             f'ints, got {window_size!r}')
        self.window_size = window

    def macs(self, x, hw_shape, state=None):
        """Each query's own window (:func:`~mmhybrid.ops.sliding_window_macs`);
        ``qkv`` and ``proj`` are child modules."""
        B, N, C = x.shape
        d = C // self.num_heads
        return {'attention': sliding_window_macs(B, self.num_heads, hw_shape,
                                                 self.window_size, d, d)}

    def attend(self, q, k, v, hw_shape, state):
        q, k, v = (to_heads(t, self.num_heads) for t in (q, k, v))
        out = sliding_window_attention(q, k, v, hw_shape, self.window_size)
        return from_heads(out), state
