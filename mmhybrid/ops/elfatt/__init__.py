"""ELFATT's two attention heads (Eq. 8) as functional ops on (B, heads, N, d).

``effatt`` is the global linear head; the local blockify head is
``block_attention`` (contiguous blocks of the token sequence, the 1D layout) or
``window_block_attention`` (windows of the token grid, the 2D layout);
``naive_*`` are O(N^2) references for tests. LePE and the head split live in
:class:`mmhybrid.layers.ELFATTAttention`.
"""
from .block import (block_attention, block_window, map_windows, window_block_attention,
                    window_regions)
from .effatt import effatt
from .naive import naive_block_attention, naive_effatt, naive_window_block_attention

__all__ = [
    'block_attention', 'effatt', 'window_block_attention', 'block_window',
    'map_windows', 'window_regions', 'naive_block_attention', 'naive_effatt',
    'naive_window_block_attention'
]
