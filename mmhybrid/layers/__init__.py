"""Modules (with parameters) shared by the backbones."""
from .hidden_state_bridge import HiddenStateBridge, equidistant_sample
from .layer_scale import LayerScale
from .softmax_layer import ConvMlp, MultiheadSelfAttention, SoftmaxLayer
from .wkv_layer import ChannelMix, SpatialMix, WKVLayer

__all__ = [
    'HiddenStateBridge', 'equidistant_sample', 'LayerScale', 'ConvMlp',
    'MultiheadSelfAttention', 'SoftmaxLayer', 'ChannelMix', 'SpatialMix',
    'WKVLayer'
]
