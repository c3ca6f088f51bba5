"""Modules (with parameters) shared by the backbones."""
from .attention_block import AttentionBlock
from .attention_plan import PRESET_PLANS, parse_attention_plan
from .conv_merging import ConvMerging
from .elfatt_attention import ELFATTAttention, split_elfatt_heads
from .gated_deltanet import BidirectionalGatedDeltaNet, GatedDeltaNetLayer
from .hidden_state_bridge import HiddenStateBridge, equidistant_sample
from .historical_attention import HistoricalAttention
from .image_attention import GlobalAttention, ImageAttention
from .infsa_attention import InfSAttention
from .infvit_layer import InfViTLayer
from .layer_norm_2d import LayerNorm2d
from .layer_scale import LayerScale
from .mixer_layer import MixerLayer
from .mlp import Mlp
from .sliding_window_attention import SlidingWindowAttention, SlidingWindowLayer
from .softmax_layer import ConvMlp, MultiheadSelfAttention, SoftmaxLayer
from .window_attention import CrossShapedWindowAttention, ShiftedWindowAttention
from .wkv_layer import ChannelMix, SpatialMix, WKVLayer

__all__ = [
    'HiddenStateBridge', 'equidistant_sample', 'LayerScale', 'ConvMlp',
    'MultiheadSelfAttention', 'SoftmaxLayer', 'ChannelMix', 'SpatialMix',
    'WKVLayer', 'AttentionBlock', 'PRESET_PLANS', 'parse_attention_plan',
    'ConvMerging', 'ELFATTAttention', 'split_elfatt_heads', 'GlobalAttention',
    'ImageAttention', 'CrossShapedWindowAttention', 'ShiftedWindowAttention',
    'InfSAttention', 'InfViTLayer', 'LayerNorm2d', 'Mlp', 'MixerLayer',
    'BidirectionalGatedDeltaNet', 'GatedDeltaNetLayer', 'SlidingWindowAttention',
    'SlidingWindowLayer', 'HistoricalAttention'
]
