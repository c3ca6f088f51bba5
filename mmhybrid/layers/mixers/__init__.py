"""Token mixers, ``mixer(x, hw_shape, state) -> (out, state)``, one per file;
WKV, Gated DeltaNet and InfSA keep their own projections (their checkpoints' key
names), the others write only ``attend`` on :class:`AttentionMixer`."""
from .base import AttentionMixer, from_heads, to_heads
from .cross_shaped_window import CrossShapedWindowAttention
from .elfatt import ELFATTAttention, split_elfatt_heads
from .gated_deltanet import BidirectionalGatedDeltaNet
from .infsa import InfSAttention
from .shifted_window import ShiftedWindowAttention
from .sliding_window import SlidingWindowAttention
from .softmax import SoftmaxAttention
from .wkv import ChannelMix, SpatialMix

__all__ = [
    'AttentionMixer', 'to_heads', 'from_heads', 'CrossShapedWindowAttention',
    'ELFATTAttention', 'split_elfatt_heads', 'BidirectionalGatedDeltaNet',
    'InfSAttention', 'ShiftedWindowAttention', 'SlidingWindowAttention',
    'SoftmaxAttention', 'ChannelMix', 'SpatialMix'
]
