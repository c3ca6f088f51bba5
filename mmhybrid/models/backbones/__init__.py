from .base_backbone import BaseBackbone
from .cswin import CSWin
from .havit import HAViT
from .hierarchical_attention import HierarchicalAttentionBackbone
from .infinitevl_vision import InfiniteVLVision
from .infvit import InfViT
from .sola_vision import SoLAVision
from .swin_elfatt import SwinELFATT

__all__ = ['BaseBackbone', 'SoLAVision', 'CSWin', 'HierarchicalAttentionBackbone',
           'SwinELFATT', 'InfViT', 'InfiniteVLVision', 'HAViT']
