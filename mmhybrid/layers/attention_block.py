"""Pre-norm transformer block around any :class:`ImageAttention` (Swin/CSWin style)."""
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import DropPath
from mmcv.cnn.bricks.transformer import FFN

from .historical_attention import is_historical


class AttentionBlock(nn.Module):
    """``x + DropPath(attn(norm1(x)))`` then ``x + DropPath(ffn(norm2(x)))``.

    Module names follow mmdet's ``SwinBlock`` (``norm1``, ``attn``, ``norm2``,
    ``ffn.layers.0.0``, ``ffn.layers.1``) so that ``paramwise_cfg`` keys and
    converted checkpoints carry over. A historical attention (HAViT) makes the
    block take and return the history: ``x, history = block(x, hw, history)``.
    """

    def __init__(self, dims, attn, mlp_ratio=4., drop_rate=0., drop_path=0.,
                 act_cfg=dict(type='GELU'), norm_cfg=dict(type='LN')):
        super().__init__()
        self.norm1 = build_norm_layer(norm_cfg, dims)[1]
        self.attn = attn
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = build_norm_layer(norm_cfg, dims)[1]
        self.ffn = FFN(
            embed_dims=dims, feedforward_channels=int(dims * mlp_ratio),
            num_fcs=2, ffn_drop=drop_rate, act_cfg=act_cfg, add_identity=True,
            dropout_layer=dict(type='DropPath', drop_prob=drop_path))

    def forward(self, x, hw_shape, history=None):
        if not is_historical(self):
            x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
            return self.ffn(self.norm2(x), identity=x)
        out, history = self.attn(self.norm1(x), hw_shape, history)
        x = x + self.drop_path(out)
        return self.ffn(self.norm2(x), identity=x), history
