"""Four-stage attention pyramid shared by SwinELFATT and CSWin.

One class builds both: they differ only in the stem, the merge block between
stages and what their ``'local'`` attention is. Which attention every block uses
comes from a per-stage plan (:func:`mmhybrid.layers.parse_attention_plan`), so
the paper's variants (LOCAL, GLOBAL, EFFATT, ELFATT and the Table 4-7 ablations)
are config changes of one model.
"""
import torch
import torch.nn as nn
from mmcv.cnn.bricks.transformer import PatchEmbed
from mmengine.model.weight_init import trunc_normal_

from mmhybrid.layers import (FFN, Block, ELFATTAttention, ShiftedWindowAttention,
                             SoftmaxAttention, link_history, parse_attention_plan)
from ..utils import resize_pos_embed
from .base_backbone import check_rates, require_keys, resolve_arch
from .pyramid import PyramidBackbone


class AttentionStage(nn.Module):
    """``blocks`` then an optional ``downsample`` (mmdet's SwinBlockSequence names)."""

    def __init__(self, blocks, downsample=None):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.downsample = downsample


class HierarchicalAttentionBackbone(PyramidBackbone):
    """Stem, four stages of attention blocks, an output norm per out index.

    Subclasses define ``arch_zoo``, :meth:`build_downsample` and
    :meth:`build_local_attention`.

    Args:
        arch (str | dict): key of ``arch_zoo`` or a dict with ``embed_dims``,
            ``depths``, ``num_heads`` (and subclass-specific keys).
        attn (str | list): attention plan, see
            :func:`mmhybrid.layers.parse_attention_plan`; ``'elfatt'``,
            ``'local'``, ``'global'``, ``'effatt'`` or e.g. ``'E,E,GE,G'``.
        block_sizes (tuple[int]): ELFATT/EFFATT local block size per stage.
        block_layout (str): ELFATT blocks as ``'2d'`` square windows (the
            default) or ``'1d'`` runs of the raster sequence.
        global_ratio (float): ELFATT's ``c1 / c`` (Table 7).
        lepe (bool): LePE in global / ELFATT / EFFATT attentions (Table 5).
        history (dict, optional): historical attention (HAViT) in the blocks
            the plan makes ``'global'``, carried between them within a stage
            (see :class:`~mmhybrid.layers.HistoricalAttention`); off by default.
        stem (dict): kwargs of mmcv ``PatchEmbed`` (kernel_size, stride, padding).
        out_indices (int | sequence[int]): stages whose (normed) maps are
            returned.
        use_abs_pos_embed (bool): learned absolute position embedding on the
            ``pretrain_img_size / stride`` grid, resized to the input.
        Others as in mmdet's ``SwinTransformer``.
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
        name, required = type(self).__name__, ('embed_dims', 'depths', 'num_heads')
        arch = resolve_arch(arch, self.arch_zoo, name, required)
        arch.update({k: v for k, v in dict(embed_dims=embed_dims, depths=depths,
                                           num_heads=num_heads).items()
                     if v is not None})
        require_keys(arch, required, name)
        depths, num_heads = list(arch['depths']), list(arch['num_heads'])
        for key, value in (('depths', depths), ('num_heads', num_heads),
                           ('block_sizes', block_sizes)):
            if len(value) != 4:
                raise ValueError(f'{name}: {key} needs one entry per stage (4), '
                                 f'got {tuple(value)}')
        check_rates(name, drop_rate=drop_rate, attn_drop_rate=attn_drop_rate,
                    drop_path_rate=drop_path_rate)
        super().__init__(4, frozen_stages=frozen_stages, norm_eval=norm_eval,
                         with_cp=with_cp, init_cfg=init_cfg,
                         out_indices=out_indices, pretrained=pretrained)
        self.arch = arch
        self.convert_weights = convert_weights
        self.plan = parse_attention_plan(attn, depths)
        if history is not None and not any('global' in p for p in self.plan):
            raise ValueError(f'history (HAViT) needs global blocks; the attention '
                             f'plan {attn!r} has none')
        dims = [arch['embed_dims'] * 2**i for i in range(4)]

        self.patch_embed = PatchEmbed(
            in_channels=in_channels, embed_dims=dims[0], conv_type='Conv2d',
            norm_cfg=norm_cfg, **stem)
        if use_abs_pos_embed:
            stride = stem['stride']
            self.pos_grid = (pretrain_img_size // stride, ) * 2
            self.absolute_pos_embed = nn.Parameter(
                torch.zeros(1, self.pos_grid[0] * self.pos_grid[1], dims[0]))
        else:
            self.absolute_pos_embed = None
        self.drop_after_pos = nn.Dropout(drop_rate)

        common = dict(qkv_bias=qkv_bias, qk_scale=qk_scale,
                      attn_drop=attn_drop_rate, proj_drop=drop_rate)
        drop_paths = torch.linspace(0, drop_path_rate, sum(depths)).tolist()
        self.stages = nn.ModuleList()
        for i in range(4):
            blocks = []
            for j, kind in enumerate(self.plan[i]):
                if kind == 'local':
                    attention = self.build_local_attention(
                        i, j, dims[i], num_heads[i], lepe=lepe, **common)
                elif kind == 'global':
                    attention = SoftmaxAttention(dims[i], num_heads[i], lepe=lepe,
                                                 history=history, **common)
                else:
                    ratio = 1. if kind == 'effatt' else global_ratio
                    attention = ELFATTAttention(
                        dims[i], num_heads[i], block_size=block_sizes[i],
                        block_layout=block_layout, global_ratio=ratio, lepe=lepe,
                        **common)
                blocks.append(Block(
                    dims[i], attention,
                    FFN(dims[i], mlp_ratio, drop=drop_rate, act_cfg=act_cfg),
                    drop_path=drop_paths[sum(depths[:i]) + j], norm_cfg=norm_cfg))
            downsample = (self.build_downsample(dims[i], dims[i + 1], norm_cfg)
                          if i < 3 else None)
            self.stages.append(AttentionStage(blocks, downsample))
            link_history(blocks)
        self.num_features = dims
        self.build_outputs(dims, norm_cfg)

    def build_downsample(self, in_channels, out_channels, norm_cfg):
        raise NotImplementedError

    def build_local_attention(self, stage, index, dims, num_heads, **kwargs):
        raise NotImplementedError

    def stem_parts(self):
        return [p for p in (self.patch_embed, self.absolute_pos_embed)
                if p is not None]

    def stage_modules(self, index):
        return [self.stages[index]]  # its blocks and the merge after them

    def stage_blocks(self, index):
        return self.stages[index].blocks

    def merge(self, index):
        return self.stages[index - 1].downsample if index else None

    def init_scratch(self):
        super().init_scratch()
        for m in self.modules():
            if isinstance(m, ShiftedWindowAttention):
                trunc_normal_(m.relative_position_bias_table, std=.02)

    def embed(self, x):
        x, hw = self.patch_embed(x)
        if self.absolute_pos_embed is not None:
            x = x + resize_pos_embed(self.absolute_pos_embed, self.pos_grid, hw)
        return self.drop_after_pos(x), hw
