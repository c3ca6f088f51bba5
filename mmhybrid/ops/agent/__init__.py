"""Agent attention: ``agent_attention`` (two fused SDPA calls), agent tokens by
average pooling (``agent_grid``, ``pool_agent_tokens``), and the O(N n)
reference ``naive_agent_attention``."""
from .attention import agent_attention, agent_grid, pool_agent_tokens
from .naive import naive_agent_attention

__all__ = ['agent_attention', 'naive_agent_attention', 'agent_grid', 'pool_agent_tokens']
