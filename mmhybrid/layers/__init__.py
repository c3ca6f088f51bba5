"""Modules (with parameters) shared by the backbones: the one :class:`Block`, its
token mixers (``mixers/``) and MLPs, the Hidden State Bridge and merges."""
from .attention_plan import PRESET_PLANS, parse_attention_plan
from .block import Block, MixerState
from .conv_merging import ConvMerging
from .hidden_state_bridge import HiddenStateBridge, equidistant_sample
from .historical_attention import HistoricalAttention, link_history
from .layer_norm_2d import LayerNorm2d
from .layer_scale import LayerScale
from .mixers import (AttentionMixer, BidirectionalGatedDeltaNet, ChannelMix,
                     CrossShapedWindowAttention, ELFATTAttention, InfSAttention,
                     ShiftedWindowAttention, SlidingWindowAttention,
                     SoftmaxAttention, SpatialMix, split_elfatt_heads)
from .mlp import FFN, ConvMlp, Mlp
from .patch_merging import PatchMerging

__all__ = [
    'Block', 'MixerState', 'Mlp', 'ConvMlp', 'FFN', 'HiddenStateBridge',
    'equidistant_sample', 'HistoricalAttention', 'link_history', 'LayerScale',
    'LayerNorm2d', 'ConvMerging', 'PatchMerging', 'PRESET_PLANS', 'parse_attention_plan',
    'AttentionMixer', 'SoftmaxAttention', 'SlidingWindowAttention',
    'ShiftedWindowAttention', 'CrossShapedWindowAttention', 'ELFATTAttention',
    'split_elfatt_heads', 'SpatialMix', 'ChannelMix', 'BidirectionalGatedDeltaNet',
    'InfSAttention'
]
