"""Functional ops (no parameters). Each op has a naive reference for tests; ops
with several backends pick one by the rule of :mod:`.dispatch` (``backend=``,
:func:`use_backend`, ``$MMHYBRID_BACKEND``, automatic)."""
from .agent import agent_attention
from .attention import softmax_attention
from .delta_rule import delta_rule_macs, gated_delta_rule
from .dispatch import use_backend
from .elfatt import block_attention, effatt, window_block_attention
from .historical_attention import historical_attention, historical_attention_macs
from .infsa import linear_infsa, pure_infsa
from .sliding_window import sliding_window_attention, sliding_window_macs
from .tome import bipartite_soft_matching, merge_tokens, unmerge_tokens
from .token_shift import quad_token_shift
from .wkv import bi_wkv, wkv_macs

__all__ = [
    'use_backend', 'bi_wkv', 'quad_token_shift', 'softmax_attention',
    'block_attention', 'window_block_attention',
    'effatt', 'agent_attention', 'bipartite_soft_matching', 'merge_tokens',
    'unmerge_tokens', 'pure_infsa', 'linear_infsa', 'gated_delta_rule',
    'sliding_window_attention', 'historical_attention', 'wkv_macs',
    'delta_rule_macs', 'sliding_window_macs', 'historical_attention_macs'
]
