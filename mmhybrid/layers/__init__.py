"""Modules (with parameters) shared by the backbones: the one :class:`Block`, the
token mixers (``mixers/``, built by name from :data:`mmhybrid.registry.MIXERS`),
the grammar that lays them out (``mixer_layout``), MLPs, the Hidden State Bridge
and merges."""
from .block import Block, MixerState
from .conv_merging import ConvMerging
from .hidden_state_bridge import HiddenStateBridge, equidistant_sample
from .historical_attention import HistoricalAttention, link_history
from .layer_norm_2d import LayerNorm2d
from .layer_scale import LayerScale
from .mixer_layout import mixer_letters, parse_mixers, registered_mixers
from .mixers import build_mixer, check_mixer_cfg
from .mlp import FFN, ConvMlp, Mlp
from .patch_merging import PatchMerging

__all__ = [
    'Block', 'MixerState', 'Mlp', 'ConvMlp', 'FFN', 'HiddenStateBridge',
    'equidistant_sample', 'HistoricalAttention', 'link_history', 'LayerScale',
    'LayerNorm2d', 'ConvMerging', 'PatchMerging', 'mixer_letters', 'parse_mixers',
    'registered_mixers', 'build_mixer', 'check_mixer_cfg'
]
