"""CSWin Transformer with a per-stage attention plan (CSWin-T/B-ELFATT of the paper).

``attn='local'`` is CSWin (Dong et al. 2022): a 7x7/4 conv stem (padding 2 on the
top and left as CSWin's, and at the bottom and right as ceil(H/4) outputs need: the
official outputs where H and W are multiples of 4), cross-shaped
stripe attention with LePE, 3x3/2 conv merge blocks and whole-map attention in the
last stage. The paper's CSWin-T and CSWin-B are the 24181 / 36292 depth variants
of Han et al. 2023 (FLatten).
"""
from mmhybrid.layers import ConvMerging
from mmhybrid.registry import register_model
from .base_backbone import resolve_arch
from .hierarchical_attention import HierarchicalAttentionBackbone


@register_model()
class CSWin(HierarchicalAttentionBackbone):
    """CSWin with ELFATT / LOCAL / GLOBAL / EFFATT attention per stage.

    Args:
        arch (str | dict): see :class:`HierarchicalAttentionBackbone`; a dict
            may also give ``split_sizes`` and ``block_sizes``.
        split_sizes (tuple[int], optional): stripe width per stage of the
            ``'local'`` blocks (overrides the arch). Stage 4 attends over the
            whole map, as CSWin's last stage does.
        block_sizes (tuple[int], optional): ELFATT block per stage (overrides
            the arch): ``'t'`` 49-49-196-49, ``'b'`` 196-196-196-49, the sizes
            Table 1's FLOPs of CSWin-T/B-ELFATT imply (docs/design.md).
        mixers, attn, **kwargs: see :class:`HierarchicalAttentionBackbone`
            (``attn``'s local blocks are ``'cross_shaped_window'``, and
            ``'softmax'`` over the whole map in the last stage).
    """
    arch_zoo = {
        't': dict(embed_dims=64, depths=(2, 4, 18, 1), num_heads=(2, 4, 8, 16),
                  split_sizes=(1, 2, 7, 7), block_sizes=(49, 49, 196, 49)),
        'b': dict(embed_dims=96, depths=(3, 6, 29, 2), num_heads=(4, 8, 16, 32),
                  split_sizes=(1, 2, 7, 7), block_sizes=(196, 196, 196, 49)),
    }

    local_mixers = ('cross_shaped_window', ) * 3 + ('softmax', )

    def __init__(self, arch='t', split_sizes=None, block_sizes=None, **kwargs):
        arch = resolve_arch(arch, self.arch_zoo, 'CSWin',
                            ('embed_dims', 'depths', 'num_heads'),
                            split_sizes=split_sizes, block_sizes=block_sizes)
        self.split_sizes = tuple(arch.get('split_sizes', (1, 2, 7, 7)))
        block_sizes = tuple(arch.get('block_sizes', (49, 49, 196, 49)))
        super().__init__(arch, dict(kernel_size=7, stride=4, padding=2),
                         block_sizes=block_sizes, **kwargs)

    def build_downsample(self, in_channels, out_channels, norm_cfg):
        return ConvMerging(in_channels, out_channels, norm_cfg=norm_cfg)

    def stage_context(self, stage):
        return dict(split_size=self.split_sizes[stage])
