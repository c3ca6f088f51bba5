"""Agent attention (Han et al., 2024) as used by ELFATT-SD's global head."""
from ..attention import softmax_attention


def agent_attention(q, k, v, agents, scale=None, broadcast_scale=None, shortcut=0.):
    r"""``softmax(Q A^T s2) softmax(A K^T s) V + shortcut V``: ELFATT Eq. 18's
    first term, with Agent-SD's two optional extras.

    The agents first attend to all keys (agent aggregation), then every query
    attends to the agents (agent broadcast). Eq. 18 has ``s2 = s`` and no
    shortcut; Agent-SD's code uses ``s2 = s ** k_scale2`` (``k_scale2 = 0.3``)
    and adds ``k_shortcut * V`` (0.075). Two :func:`softmax_attention`
    calls, so fused kernels apply; cost O(N * n * d) for n agents.

    Args:
        q, k: (B, heads, N, d); v: (B, heads, N, dv).
        agents: (B, heads, n, d) agent tokens (ELFATT-SD: pooled queries).
        scale (float, optional): logit scale ``s`` of the aggregation;
            ``d ** -0.5`` when None.
        broadcast_scale (float, optional): logit scale ``s2`` of the broadcast;
            ``scale`` when None.
        shortcut (float): weight of the added ``V`` term.
    Returns:
        (B, heads, N, dv).
    """
    if q.shape[:2] != agents.shape[:2] or q.shape[-1] != agents.shape[-1]:
        raise ValueError(f'agents must be (B, heads, n, d) like q {tuple(q.shape)}; '
                         f'got {tuple(agents.shape)}')
    if broadcast_scale is None:
        broadcast_scale = scale
    agent_v = softmax_attention(agents, k, v, scale=scale)
    out = softmax_attention(q, agents, agent_v, scale=broadcast_scale)
    return out + shortcut * v if shortcut else out
