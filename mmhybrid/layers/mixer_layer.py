"""The pre-norm residual layer of the 'G' and 'W' layers of a hybrid schedule."""
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import DropPath

from .layer_scale import LayerScale
from .softmax_layer import ConvMlp


class MixerLayer(nn.Module):
    """``x + DropPath(LS(mixer(LN(x))))``, then the same around SoLA's conv MLP.

    The structure of :class:`SoftmaxLayer` with the token mixer passed in, so a
    schedule's 'S', 'G' and 'W' layers differ only in how tokens are mixed.
    ``mixer(x, hw_shape)`` returns ``(out, hidden)``; the layer returns
    ``(x, hidden)`` like the other SoLA layers (``hidden`` feeds the Hidden State
    Bridge, None for mixers without one).
    """

    def __init__(self, dims, mixer, mlp_ratio=4., drop_path=0.,
                 layer_scale_init_value=None, norm_cfg=dict(type='LN')):
        super().__init__()
        self.norm1 = build_norm_layer(norm_cfg, dims)[1]
        self.attn = mixer
        self.ls1 = LayerScale(dims, layer_scale_init_value)
        self.norm2 = build_norm_layer(norm_cfg, dims)[1]
        self.ffn = ConvMlp(dims, mlp_ratio)
        self.ls2 = LayerScale(dims, layer_scale_init_value)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x, hw_shape):
        out, hidden = self.attn(self.norm1(x), hw_shape)
        x = x + self.drop_path(self.ls1(out))
        x = x + self.drop_path(self.ls2(self.ffn(self.norm2(x), hw_shape)))
        return x, hidden
