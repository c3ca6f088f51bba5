"""Agent attention (Han et al., 2024) as used by ELFATT-SD's global head."""
from ..attention import softmax_attention


def agent_attention(q, k, v, agents, scale=None):
    r"""``softmax(Q A^T s) softmax(A K^T s) V``: the first term of ELFATT Eq. 18.

    The agents first attend to all keys (agent aggregation), then every query
    attends to the agents (agent broadcast). Two :func:`softmax_attention` calls,
    so fused kernels apply; cost O(N * n * d) for n agents.

    Args:
        q, k: (B, heads, N, d); v: (B, heads, N, dv).
        agents: (B, heads, n, d) agent tokens (ELFATT-SD: pooled queries).
        scale (float, optional): logit scale of both softmaxes; ``d ** -0.5``
            when None.
    Returns:
        (B, heads, N, dv).
    """
    if q.shape[:2] != agents.shape[:2] or q.shape[-1] != agents.shape[-1]:
        raise ValueError(f'agents must be (B, heads, n, d) like q {tuple(q.shape)}; '
                         f'got {tuple(agents.shape)}')
    agent_v = softmax_attention(agents, k, v, scale=scale)
    return softmax_attention(q, agents, agent_v, scale=scale)
