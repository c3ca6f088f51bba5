"""Agent tokens by average pooling a token grid (ELFATT-SD: A = Pooling(Q))."""
import math

import torch.nn.functional as F


def agent_grid(hw_shape, num_agents=None):
    """(gh, gw) agent grid for an (H, W) token grid.

    ``num_agents=None`` gives one agent per 2x2 window (rounded up), the agent
    count Agent-SD obtains by merging tokens onto its stride-2 dst grid; an int
    gives a grid of about that many agents with the aspect ratio of the tokens.
    """
    H, W = hw_shape
    if num_agents is None:
        return math.ceil(H / 2), math.ceil(W / 2)
    if num_agents < 1:
        raise ValueError(f'num_agents must be >= 1, got {num_agents}')
    gh = min(H, max(1, round(math.sqrt(num_agents * H / W))))
    gw = min(W, max(1, round(num_agents / gh)))
    return gh, gw


def pool_agent_tokens(x, hw_shape, grid):
    """Adaptive average pooling of raster tokens: (B, H*W, C) -> (B, gh*gw, C)."""
    B, N, C = x.shape
    H, W = hw_shape
    x = x.transpose(1, 2).reshape(B, C, H, W)
    return F.adaptive_avg_pool2d(x, grid).flatten(2).transpose(1, 2)
