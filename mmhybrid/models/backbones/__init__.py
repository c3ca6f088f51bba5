from .base_backbone import BaseBackbone
from .infvit import InfViT
from .sola_vision import SoLAVision

__all__ = ['BaseBackbone', 'SoLAVision', 'InfViT']
