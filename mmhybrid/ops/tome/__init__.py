"""Token merging (ToMe / ToMe-SD): bipartite soft matching on a 2D token grid;
``naive_tome_merge`` is the loop reference for tests."""
from .merge import bipartite_soft_matching, merge_tokens, random_dst_mask, unmerge_tokens
from .naive import naive_tome_merge

__all__ = [
    'bipartite_soft_matching', 'random_dst_mask', 'merge_tokens', 'unmerge_tokens',
    'naive_tome_merge'
]
