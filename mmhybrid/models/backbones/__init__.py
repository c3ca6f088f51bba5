from .base_backbone import BaseBackbone
from .sola_vision import SoLAVision

__all__ = ['BaseBackbone', 'SoLAVision']
