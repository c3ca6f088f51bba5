"""Swin Transformer with a per-stage attention plan (Swin-T/B-ELFATT of the paper).

``attn='local'`` is plain Swin (shifted windows, relative position bias);
``'elfatt'`` replaces the window attention by ELFATT in stages 1-2, alternates
vanilla/ELFATT in stage 3 and uses vanilla attention in stage 4 (Appendix E).
Stem, names and arguments follow mmdet's ``SwinTransformer``. Models with ELFATT
layers merge patches with CSWin's 3x3 stride-2 convolution, the others with
Swin's linear merging, and ELFATT's blocks are 14x14 windows in stages 1-3: Table
1's parameter counts (30M / 91M for Swin-T/B-ELFATT, 28M / 88M for the LOCAL,
GLOBAL and EFFATT rows) and Tables 1-3's FLOPs imply exactly that (docs/design.md,
"ELFATT").
"""

from mmhybrid.layers import ConvMerging, PatchMerging
from mmhybrid.registry import register_model
from .hierarchical_attention import HierarchicalAttentionBackbone


@register_model()
class SwinELFATT(HierarchicalAttentionBackbone):
    """Swin with ELFATT / LOCAL / GLOBAL / EFFATT attention per stage.

    Args:
        block_sizes (tuple[int]): ELFATT block per stage; 14x14 windows in
            stages 1-3 (what Table 1-3's FLOPs of Swin-T/B-ELFATT imply).
        downsample (str, optional): patch merging between stages: ``'conv'``
            (3x3 stride-2 conv + LayerNorm, CSWin's merge block) or ``'linear'``
            (Swin's 2x2 concatenation + LayerNorm + linear, mmdet-compatible, the
            layout of official Swin checkpoints). None: ``'conv'`` when the plan
            has ELFATT layers (Swin-T/B-ELFATT of Table 1), else ``'linear'``;
            ``'linear'`` whenever ``convert_weights=True``.
        patch_size (int): stem patch size; ``strides[0]`` must equal it.
        window_size (int): Swin window of the ``'local'`` blocks.
        strides (tuple[int]): (patch, 2, 2, 2) as in mmdet.
        patch_norm (bool): LayerNorm after the stem.
        convert_weights (bool, optional): True: the model is built to load a
            Swin checkpoint (linear merges); the checkpoint's layout itself is
            detected from its keys (docs/weights.md).
        arch, mixers, attn, **kwargs: see :class:`HierarchicalAttentionBackbone`
            (``attn``'s local blocks are ``'shifted_window'``).
    """
    arch_zoo = {
        't': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
        'b': dict(embed_dims=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)),
    }
    local_mixers = ('shifted_window', ) * 4

    def __init__(self, arch='t', block_sizes=(196, 196, 196, 49),
                 downsample=None, patch_size=4, window_size=7, strides=(4, 2, 2, 2),
                 patch_norm=True, **kwargs):
        if tuple(strides[1:]) != (2, 2, 2) or strides[0] != patch_size:
            raise ValueError(f'strides must be ({patch_size}, 2, 2, 2), got {strides}')
        self.window_size = window_size
        if downsample not in (None, 'conv', 'linear'):
            raise ValueError(f"downsample must be 'conv', 'linear' or None, got "
                             f'{downsample!r}')
        if downsample == 'conv' and kwargs.get('convert_weights'):
            raise ValueError("convert_weights=True loads an official Swin checkpoint, "
                             "whose patch merging is linear: use downsample='linear'")
        # None: decided in build_downsample, once the attention plan is parsed
        self.downsample = downsample
        stem = dict(kernel_size=patch_size, stride=patch_size, padding='corner')
        super().__init__(arch, stem, block_sizes=block_sizes, **kwargs)
        if not patch_norm:
            self.patch_embed.norm = None

    def build_downsample(self, in_channels, out_channels, norm_cfg):
        if self.downsample is None:  # see the class docstring
            elfatt = any('elfatt' in stage for stage in self.mixers)
            self.downsample = ('conv' if elfatt and not self.convert_weights
                               else 'linear')
        if self.downsample == 'conv':
            return ConvMerging(in_channels, out_channels, norm_cfg=norm_cfg)
        return PatchMerging(in_channels, out_channels, norm_cfg=norm_cfg)

    def stage_context(self, stage):
        return dict(window_size=self.window_size)
