"""The MLPs (channel mixers) of the blocks; each is called as ``mlp(x, hw_shape)``."""
import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer

from ..ops.tracing import is_tracing


def tokens_to_map(x, hw_shape):
    """(B, H*W, C) tokens -> (B, C, H, W), a channels-last view (no copy)."""
    B, _, C = x.shape
    return x.view(B, *hw_shape, C).permute(0, 3, 1, 2)


def map_to_tokens(x):
    """(B, C, H, W) -> (B, H*W, C); no copy for a channels-last map."""
    B, C = x.shape[:2]
    return x.permute(0, 2, 3, 1).reshape(B, -1, C)


class Mlp(nn.Module):
    """The ViT feed-forward block ``fc2(GELU(fc1(x)))``."""

    def __init__(self, dims, mlp_ratio=4.):
        super().__init__()
        hidden = int(dims * mlp_ratio)
        self.fc1 = nn.Linear(dims, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dims)

    def forward(self, x, hw_shape=None):
        return self.fc2(self.act(self.fc1(x)))


class ConvMlp(Mlp):
    """SoLA-Vision's MLP: fc1, a 3x3 depth-wise conv on the hidden map, GELU, fc2.

    Eager, it runs in bands of about ``band_tokens`` tokens (whole rows, plus a
    recomputed halo row each side for the conv): the hidden activations, 4x the
    input, stay a band's, in cache and below the allocator's mmap threshold
    (1.3x / 1.6x faster at 256^2 / 128^2 tokens, one CPU thread, loaded machine).
    """
    band_tokens = 8192

    def __init__(self, dims, mlp_ratio=4.):
        super().__init__(dims, mlp_ratio)
        hidden = self.fc1.out_features
        self.dwconv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)

    def forward(self, x, hw_shape):
        H, W = hw_shape
        if is_tracing() or self.band_tokens >= H * W:
            x = self.dwconv(tokens_to_map(self.fc1(x), hw_shape))
            return self.fc2(self.act(map_to_tokens(x)))
        rows, outs = max(self.band_tokens // W, 1), []
        for top in range(0, H, rows):
            a, b = max(top - 1, 0), min(top + rows + 1, H)
            h = self.dwconv(tokens_to_map(self.fc1(x[:, a * W:b * W]), (b - a, W)))
            h = h[:, :, top - a:min(top + rows, H) - a]
            outs.append(self.fc2(self.act(map_to_tokens(h))))
        return torch.cat(outs, 1)


class FFN(nn.Module):
    """``Linear, act, Dropout, Linear, Dropout`` with mmcv ``FFN``'s module names
    (``layers.0.0``, ``layers.1``), the names of Swin checkpoints and mmdet's
    ``paramwise_cfg`` keys."""

    def __init__(self, dims, mlp_ratio=4., drop=0., act_cfg=dict(type='GELU')):
        super().__init__()
        hidden = int(dims * mlp_ratio)
        self.layers = nn.Sequential(
            nn.Sequential(nn.Linear(dims, hidden), build_activation_layer(act_cfg),
                          nn.Dropout(drop)),
            nn.Linear(hidden, dims), nn.Dropout(drop))

    def forward(self, x, hw_shape=None):
        return self.layers(x)
