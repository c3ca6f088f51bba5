from .base_backbone import BaseBackbone
from .cswin import CSWin
from .havit import HAViT
from .hierarchical_attention import HierarchicalAttentionBackbone
from .infinitevl_vision import InfiniteVLVision
from .infvit import InfViT
from .pyramid import PyramidBackbone
from .sola_vision import SoLAVision
from .swin_elfatt import SwinELFATT

BACKBONES = (SoLAVision, InfiniteVLVision, SwinELFATT, CSWin, InfViT, HAViT)


def list_archs(model=None):
    """The named archs, as timm's ``list_models``: ``['CSWin/b', 'CSWin/t', ...]``
    for every backbone, or the arch names of ``model`` (a class name)."""
    if model is not None:
        by_name = {cls.__name__: cls for cls in BACKBONES}
        if model not in by_name:
            raise KeyError(f'unknown backbone {model!r}; use one of {sorted(by_name)}')
        return sorted(by_name[model].arch_zoo)
    return sorted(f'{cls.__name__}/{arch}' for cls in BACKBONES
                  for arch in cls.arch_zoo)


__all__ = ['BaseBackbone', 'PyramidBackbone', 'SoLAVision', 'CSWin',
           'HierarchicalAttentionBackbone', 'SwinELFATT', 'InfViT',
           'InfiniteVLVision', 'HAViT', 'list_archs']
