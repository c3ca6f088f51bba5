import torch
import torch.nn as nn


class LayerScale(nn.Module):
    """Per-channel residual scale ``gamma * x`` (CaiT); identity when disabled."""

    def __init__(self, dims, init_value=None):
        super().__init__()
        self.gamma = (nn.Parameter(torch.full((dims, ), float(init_value)))
                      if init_value else None)

    def forward(self, x):
        return x if self.gamma is None else x * self.gamma
