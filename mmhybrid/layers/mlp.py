"""The MLPs (channel mixers) of the blocks; each is called as ``mlp(x, hw_shape)``."""
import torch.nn as nn
from mmcv.cnn import build_activation_layer

from mmhybrid.ops.streaming import conv_in_bands, in_token_slices
from .inherit import Inherited, copy_linear, identity_dwconv


class Mlp(nn.Module):
    """The ViT feed-forward block ``fc2(GELU(fc1(x)))``, in token slices whose
    hidden activation holds about 2^21 values (:func:`in_token_slices`)."""

    def __init__(self, dims, mlp_ratio=4.):
        super().__init__()
        hidden = int(dims * mlp_ratio)
        self.fc1 = nn.Linear(dims, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dims)
        self.slice_tokens = max(2**21 // hidden, 1)

    def inherit_mlp(self, mlp):
        """Start from a Transformer MLP (:class:`MlpWeights`): a copy."""
        result = Inherited({}, 'fc1, fc2')
        copy_linear(result, 'fc1', self.fc1, mlp.fc1)
        copy_linear(result, 'fc2', self.fc2, mlp.fc2)
        return result

    def forward(self, x, hw_shape=None):
        return in_token_slices(lambda h: self.fc2(self.act(self.fc1(h))), x,
                               tokens=self.slice_tokens)


class ConvMlp(Mlp):
    """SoLA-Vision's MLP: fc1, a 3x3 depth-wise conv on the hidden map, GELU, fc2
    (in bands of rows, :func:`conv_in_bands`)."""

    def __init__(self, dims, mlp_ratio=4.):
        super().__init__(dims, mlp_ratio)
        hidden = self.fc1.out_features
        self.dwconv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)

    def inherit_mlp(self, mlp):
        """fc1 and fc2 copied, the depth-wise conv as the identity (centre tap
        1): the teacher's function."""
        result = super().inherit_mlp(mlp)
        result.tensors.update({f'dwconv.{k}': v
                               for k, v in identity_dwconv(self.dwconv).items()})
        result.new['dwconv'] = 'identity (centre tap 1)'
        return result

    def forward(self, x, hw_shape):
        return conv_in_bands(x, hw_shape, self.fc1, self.dwconv,
                             lambda h: self.fc2(self.act(h)))


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

    def inherit_mlp(self, mlp):
        """Start from a Transformer MLP: ``layers.0.0 <- fc1``, ``layers.1 <-
        fc2``."""
        result = Inherited({}, 'fc1, fc2')
        copy_linear(result, 'layers.0.0', self.layers[0][0], mlp.fc1, 'fc1')
        copy_linear(result, 'layers.1', self.layers[1], mlp.fc2, 'fc2')
        return result

    def forward(self, x, hw_shape=None):
        return self.layers(x)
