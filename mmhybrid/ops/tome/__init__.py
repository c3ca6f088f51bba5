"""Token merging (ToMe / ToMe-SD): bipartite soft matching on a 2D token grid.

``random_dst_mask`` picks the destination tokens, ``bipartite_soft_matching``
returns a slot map, ``merge_tokens`` / ``unmerge_tokens`` apply it;
``naive_tome_merge`` is the loop reference for tests.
"""
from .matching import bipartite_soft_matching, random_dst_mask
from .merge import merge_tokens, unmerge_tokens
from .naive import naive_tome_merge

__all__ = [
    'bipartite_soft_matching', 'random_dst_mask', 'merge_tokens', 'unmerge_tokens',
    'naive_tome_merge'
]
