"""Four-stage attention pyramid of SwinELFATT and CSWin, which differ only in the
stem, the merge block and their ``'local'`` attention. A per-stage plan
(:func:`mmhybrid.layers.parse_attention_plan`) picks every block's attention, so
the paper's variants (LOCAL, GLOBAL, EFFATT, ELFATT, the Table 4-7 ablations) are
config changes of one model."""
import torch
import torch.nn as nn

from mmhybrid.layers import (FFN, Block, ELFATTAttention, SoftmaxAttention,
                             link_history, parse_attention_plan)
from .base_backbone import check_rates, resolve_arch
from .pyramid import PyramidBackbone


class HierarchicalAttentionBackbone(PyramidBackbone):
    """Stem, four stages of attention blocks, an output norm per out index.

    Subclasses define ``arch_zoo``, ``build_downsample(in_channels, out_channels,
    norm_cfg)`` and ``build_local_attention(stage, index, dims, num_heads,
    **kwargs)``.

    Args:
        arch (str | dict): a key of ``arch_zoo`` (or 'tiny', 'base') or a dict
            with ``embed_dims``, ``depths``, ``num_heads``; the arguments of
            those names override it.
        attn (str | list): attention plan (:func:`~mmhybrid.layers.
            parse_attention_plan`): ``'elfatt'``, ``'local'``, ``'global'``,
            ``'effatt'`` or e.g. ``'E,E,GE,G'``.
        block_sizes (tuple[int]): ELFATT/EFFATT local block size per stage.
        block_layout (str): ELFATT blocks as ``'2d'`` square windows (the
            default) or ``'1d'`` runs of the raster sequence.
        global_ratio (float): ELFATT's ``c1 / c`` (Table 7).
        lepe (bool): LePE in global / ELFATT / EFFATT attentions (Table 5).
        history (dict, optional): historical attention (HAViT) in the blocks
            the plan makes ``'global'``, carried between them within a stage
            (see :class:`~mmhybrid.layers.HistoricalAttention`); off by default.
        stem (dict): kwargs of mmcv ``PatchEmbed`` (kernel_size, stride, padding).
        use_abs_pos_embed (bool): learned absolute position embedding on the
            ``pretrain_img_size / stride`` grid, resized to the input.
        Others as in mmdet's ``SwinTransformer`` and :class:`BaseBackbone`.
    """
    arch_zoo = {}
    pos_embed_keys = ('absolute_pos_embed', )

    def __init__(self, arch, attn, stem, pretrain_img_size=224, in_channels=3,
                 embed_dims=None, depths=None, num_heads=None, mlp_ratio=4.,
                 out_indices=(0, 1, 2, 3), qkv_bias=True, qk_scale=None,
                 drop_rate=0., attn_drop_rate=0., drop_path_rate=0.1,
                 use_abs_pos_embed=False, block_sizes=(49, 49, 196, 49),
                 block_layout='2d', global_ratio=0.5, lepe=True, history=None,
                 act_cfg=dict(type='GELU'),
                 norm_cfg=dict(type='LN'), convert_weights=None, frozen_stages=-1,
                 norm_eval=False, with_cp=False, pretrained=None, init_cfg=None):
        name = type(self).__name__
        arch = resolve_arch(arch, self.arch_zoo, name, ('embed_dims', 'depths',
                                                        'num_heads'),
                            embed_dims=embed_dims, depths=depths, num_heads=num_heads)
        depths, num_heads = list(arch['depths']), list(arch['num_heads'])
        for key, value in (('depths', depths), ('num_heads', num_heads),
                           ('block_sizes', block_sizes)):
            if len(value) != 4:
                raise ValueError(f'{name}: {key} needs one entry per stage (4), '
                                 f'got {tuple(value)}')
        check_rates(name, drop_rate=drop_rate, attn_drop_rate=attn_drop_rate,
                    drop_path_rate=drop_path_rate)
        super().__init__(4, frozen_stages, norm_eval, with_cp, init_cfg, out_indices,
                         pretrained)
        self.convert_weights = convert_weights
        self.plan = parse_attention_plan(attn, depths)
        if history is not None and not any('global' in p for p in self.plan):
            raise ValueError(f'history (HAViT) needs global blocks; the attention '
                             f'plan {attn!r} has none')
        dims = [arch['embed_dims'] * 2**i for i in range(4)]

        self.build_stem(in_channels, dims[0], pretrain_img_size, norm_cfg,
                        drop_rate, pos_embed=use_abs_pos_embed, **stem)

        common = dict(qkv_bias=qkv_bias, qk_scale=qk_scale, lepe=lepe,
                      attn_drop=attn_drop_rate, proj_drop=drop_rate)
        dpr = iter(torch.linspace(0, drop_path_rate, sum(depths)).tolist())
        self.stages = nn.ModuleList()
        for i in range(4):
            blocks = []
            for j, kind in enumerate(self.plan[i]):
                if kind == 'local':
                    attention = self.build_local_attention(i, j, dims[i],
                                                           num_heads[i], **common)
                elif kind == 'global':
                    attention = SoftmaxAttention(dims[i], num_heads[i],
                                                 history=history, **common)
                else:
                    attention = ELFATTAttention(
                        dims[i], num_heads[i], block_size=block_sizes[i],
                        block_layout=block_layout, **common,
                        global_ratio=1. if kind == 'effatt' else global_ratio)
                blocks.append(Block(
                    dims[i], attention,
                    FFN(dims[i], mlp_ratio, drop=drop_rate, act_cfg=act_cfg),
                    drop_path=next(dpr), norm_cfg=norm_cfg))
            downsample = (self.build_downsample(dims[i], dims[i + 1], norm_cfg)
                          if i < 3 else None)
            # mmdet's SwinBlockSequence names: blocks, then the merge (if any)
            self.stages.append(nn.ModuleDict(dict(blocks=nn.ModuleList(blocks),
                                                  downsample=downsample)))
            link_history(blocks)
        self.num_features = dims
        self.build_outputs(dims, norm_cfg)

    def stage_modules(self, index):
        return [self.stages[index]]  # its blocks and the merge after them

    def stage_blocks(self, index):
        return self.stages[index].blocks

    def merge(self, index):
        return self.stages[index - 1].downsample if index else None
