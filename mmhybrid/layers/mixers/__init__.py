"""Token mixers, ``mixer(x, hw_shape, state) -> (out, state)``, one per file, each
registered by name in :data:`mmhybrid.registry.MIXERS` (the registry's location:
importing this package registers them). WKV, Gated DeltaNet and InfSA keep their
own projections (their checkpoints' key names); the attention mixers write only
``attend`` on :class:`AttentionMixer`. The contract: docs/contributing.md."""
from .base import AttentionMixer, from_heads, to_heads
from .build import build_mixer, check_mixer_cfg, mixer_options
from .cross_shaped_window import CrossShapedWindowAttention
from .elfatt import EFFATTAttention, ELFATTAttention, split_elfatt_heads
from .gated_deltanet import BidirectionalGatedDeltaNet
from .infsa import InfSAttention, LinearInfSA, PureInfSA
from .shifted_window import ShiftedWindowAttention
from .sliding_window import SlidingWindowAttention
from .softmax import SoftmaxAttention
from .wkv import ChannelMix, SpatialMix

__all__ = [
    'AttentionMixer', 'to_heads', 'from_heads', 'build_mixer', 'check_mixer_cfg',
    'mixer_options', 'CrossShapedWindowAttention', 'ELFATTAttention',
    'EFFATTAttention', 'split_elfatt_heads', 'BidirectionalGatedDeltaNet',
    'InfSAttention', 'PureInfSA', 'LinearInfSA', 'ShiftedWindowAttention',
    'SlidingWindowAttention', 'SoftmaxAttention', 'ChannelMix', 'SpatialMix'
]
