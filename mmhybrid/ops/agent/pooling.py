"""Agent tokens by average pooling a token grid (ELFATT-SD: A = Pooling(Q))."""
import math

import torch.nn.functional as F


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
    B, N, C = x.shape
    H, W = hw_shape
    x = x.transpose(1, 2).reshape(B, C, H, W)
    return F.adaptive_avg_pool2d(x, grid).flatten(2).transpose(1, 2)
