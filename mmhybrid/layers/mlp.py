"""The ViT feed-forward block."""
import torch.nn as nn


class Mlp(nn.Module):
    """``fc2(GELU(fc1(x)))`` with ``int(dims * mlp_ratio)`` hidden channels."""

    def __init__(self, dims, mlp_ratio=4.):
        super().__init__()
        hidden = int(dims * mlp_ratio)
        self.fc1 = nn.Linear(dims, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dims)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))
