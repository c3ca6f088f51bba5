"""Agent attention (Han et al., 2024) as used by ELFATT-SD's global head, with
agent tokens by average pooling the token grid (ELFATT-SD: A = Pooling(Q))."""
import math

import torch.nn.functional as F

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
    agent_v = softmax_attention(agents, k, v, scale=scale)
    out = softmax_attention(q, agents, agent_v,
                            scale=scale if broadcast_scale is None else broadcast_scale)
    return out + shortcut * v if shortcut else out


def agent_grid(hw_shape, num_agents=None):
    """(gh, gw) agent grid for an (H, W) token grid.

    ``num_agents=None`` gives one agent per 4x4 window (rounded up), N/16 agents:
    the count Agent-SD uses in its agent steps (tokens merged onto its stride-4
    dst grid, 256 agents for the 4096 tokens of a 512^2 image); an int gives a
    grid of about that many agents with the aspect ratio of the tokens.
    """
    H, W = hw_shape
    if num_agents is None:
        return math.ceil(H / 4), math.ceil(W / 4)
    if num_agents < 1:
        raise ValueError(f'num_agents must be >= 1, got {num_agents}')
    gh = min(H, max(1, round(math.sqrt(num_agents * H / W))))
    gw = min(W, max(1, round(num_agents / gh)))
    return gh, gw


def pool_agent_tokens(x, hw_shape, grid):
    """Adaptive average pooling of raster tokens: (B, H*W, C) -> (B, gh*gw, C)."""
    x = x.transpose(1, 2).unflatten(2, hw_shape)
    return F.adaptive_avg_pool2d(x, grid).flatten(2).transpose(1, 2)
