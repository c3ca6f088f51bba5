"""ELFATT's two attention heads (Eq. 8) as functional ops on (B, heads, N, d).

``effatt`` is the global linear head, ``block_attention`` the local blockify head;
``naive_*`` are O(N^2) references for tests. LePE and the head split live in
:class:`mmhybrid.layers.ELFATTAttention`.
"""
from .block import block_attention
from .effatt import effatt
from .naive import naive_block_attention, naive_effatt

__all__ = ['block_attention', 'effatt', 'naive_block_attention', 'naive_effatt']
