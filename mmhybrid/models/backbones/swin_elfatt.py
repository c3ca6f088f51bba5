"""Swin Transformer with a per-stage attention plan (Swin-T/B-ELFATT of the paper).

``attn='local'`` is plain Swin (shifted windows, relative position bias);
``'elfatt'`` replaces the window attention by ELFATT in stages 1-2, alternates
vanilla/ELFATT in stage 3 and uses vanilla attention in stage 4 (Appendix E).
Stem, patch merging, names and arguments follow mmdet's ``SwinTransformer``.
"""
from mmcv.cnn.bricks.transformer import PatchMerging

from mmhybrid.layers import ShiftedWindowAttention
from mmhybrid.registry import register_model
from ..utils.official_checkpoints import convert_swin, is_official_swin
from .hierarchical_attention import HierarchicalAttentionBackbone


@register_model()
class SwinELFATT(HierarchicalAttentionBackbone):
    """Swin with ELFATT / LOCAL / GLOBAL / EFFATT attention per stage.

    Args:
        arch (str | dict): ``'t'``/``'tiny'`` (96, [2, 2, 6, 2], [3, 6, 12, 24]),
            ``'b'``/``'base'`` (128, [2, 2, 18, 2], [4, 8, 16, 32]) or a dict
            with ``embed_dims``, ``depths``, ``num_heads``; explicit
            ``embed_dims`` / ``depths`` / ``num_heads`` arguments override it.
        attn (str | list): attention plan (default ``'elfatt'``).
        patch_size (int): stem patch size; ``strides[0]`` must equal it.
        window_size (int): Swin window of the ``'local'`` blocks.
        strides (tuple[int]): (patch, 2, 2, 2) as in mmdet.
        patch_norm (bool): LayerNorm after the stem.
        convert_weights (bool, optional): the Pretrained checkpoint is an
            official Swin one; None detects it from its keys.
        **kwargs: see :class:`HierarchicalAttentionBackbone`.
    """
    arch_zoo = {
        't': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
        'b': dict(embed_dims=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)),
    }

    def __init__(self, arch='t', attn='elfatt', patch_size=4, window_size=7,
                 strides=(4, 2, 2, 2), patch_norm=True, norm_cfg=dict(type='LN'),
                 **kwargs):
        if tuple(strides[1:]) != (2, 2, 2) or strides[0] != patch_size:
            raise ValueError(f'strides must be ({patch_size}, 2, 2, 2), got {strides}')
        self.window_size = window_size
        stem = dict(kernel_size=patch_size, stride=patch_size, padding='corner')
        super().__init__(arch, attn, stem, norm_cfg=norm_cfg, **kwargs)
        if not patch_norm:
            self.patch_embed.norm = None

    def build_downsample(self, in_channels, out_channels, norm_cfg):
        return PatchMerging(in_channels, out_channels, norm_cfg=norm_cfg)

    def build_local_attention(self, stage, index, dims, num_heads, lepe, **kwargs):
        return ShiftedWindowAttention(dims, num_heads, window_size=self.window_size,
                                      shift=index % 2 == 1, **kwargs)

    def convert_checkpoint(self, state_dict):
        if self.convert_weights or (self.convert_weights is None
                                    and is_official_swin(state_dict)):
            return convert_swin(state_dict)
        return state_dict
