"""Four-stage attention pyramid of SwinELFATT and CSWin, which differ in the stem,
the merge block and their local attention. Every layer's token mixer is named in
``mixers=`` (:mod:`mmhybrid.layers.mixer_layout`), so the paper's variants
(LOCAL, GLOBAL, EFFATT, ELFATT, the Table 4-7 ablations) are config changes of
one model; ``attn=`` keeps the ELFATT paper's plans."""
import torch
import torch.nn as nn

from mmhybrid.layers import (FFN, Block, build_mixer, check_mixer_cfg, link_history,
                             parse_mixers)
from .base_backbone import check_rates, resolve_arch
from .pyramid import PyramidBackbone


# the ELFATT paper's plans (Appendix E; Table 7: EFFATT models keep ELFATT's plan)
# in its letters: E ELFATT, F EFFATT, G global softmax, L the backbone's local one
ELFATT_PLANS = {'elfatt': 'E,E,GE,G', 'effatt': 'F,F,GF,G', 'global': 'G,G,G,G',
                'local': 'L,L,L,L'}


def elfatt_plan(attn, local_mixers, depths):
    """ELFATT's ``attn=`` as ``mixers=`` entries, a list of names per stage.

    ``attn`` is a preset of :data:`ELFATT_PLANS`, a plan in ELFATT's letters
    (``'E,E,GE,G'``) or a list with one entry per stage: a type name
    (``'elfatt'``, ``'effatt'``, ``'global'``, ``'local'``), a letter pattern or
    a list of type names. 'G' / ``'global'`` become ``'softmax'``, 'L' /
    ``'local'`` the stage's ``local_mixers[i]``. Each pattern repeats over the
    stage's ``depths[i]`` layers, cut where the stage ends (``'GE'`` in a
    one-layer stage is global).
    """
    plan = ELFATT_PLANS.get(attn, attn) if isinstance(attn, str) else attn
    entries = plan.replace(' ', '').split(',') if isinstance(plan, str) else list(plan)
    types = {'E': 'elfatt', 'F': 'effatt', 'G': 'softmax', 'elfatt': 'elfatt',
             'effatt': 'effatt', 'global': 'softmax'}
    stages = []
    for i, entry in enumerate(entries[:len(local_mixers)]):
        tokens = ([entry] if isinstance(entry, str) and entry in ELFATT_PLANS
                  else list(entry))
        if not tokens or not set(tokens) <= {*types, 'L', 'local'}:
            break
        pattern = [local_mixers[i] if t in ('L', 'local') else types[t]
                   for t in tokens]
        stages.append([pattern[j % len(pattern)] for j in range(depths[i])])
    if len(stages) != len(entries) or len(entries) != len(local_mixers):
        raise ValueError(
            f'unknown attention plan {attn!r}: attn= takes a preset '
            f'({", ".join(map(repr, ELFATT_PLANS))}) or ELFATT\'s letters, one '
            f'pattern per stage ({len(local_mixers)}) separated by commas, e.g. '
            f"'E,E,GE,G' (E ELFATT, F EFFATT, G global softmax, L local); any "
            f'registered mixer goes in mixers=')
    return stages


class HierarchicalAttentionBackbone(PyramidBackbone):
    """Stem, four stages of attention blocks, an output norm per out index.

    Subclasses define ``arch_zoo``, ``local_mixers`` (the mixer name of the
    ``'local'`` blocks per stage), ``build_downsample(in_channels,
    out_channels, norm_cfg)`` and :meth:`stage_context`.

    Args:
        arch (str | dict): a key of ``arch_zoo`` (or 'tiny', 'base') or a dict
            with ``embed_dims``, ``depths``, ``num_heads``; the arguments of
            those names override it.
        mixers (str | list, optional): every layer's token mixer, one entry per
            stage (:mod:`mmhybrid.layers.mixer_layout`), e.g. ``'E/E/SE/S'``;
            a shorter entry repeats over the stage. The resolved list is the
            ``mixers`` attribute.
        attn (str | list): the ELFATT paper's plan, used when ``mixers`` is
            None (:func:`elfatt_plan`): ``'elfatt'`` (the default),
            ``'local'``, ``'global'``, ``'effatt'`` or e.g. ``'E,E,GE,G'``.
        mixer_cfg (dict, optional): options per mixer name (or letter).
        block_sizes (tuple[int]): ELFATT/EFFATT local block size per stage.
        block_layout (str): ELFATT blocks as ``'2d'`` square windows (the
            default) or ``'1d'`` runs of the raster sequence.
        global_ratio (float): ELFATT's ``c1 / c`` (Table 7).
        lepe (bool): LePE in the softmax / ELFATT / EFFATT / cross-shaped
            attentions (Table 5).
        history (dict, optional): historical attention (HAViT) in the softmax
            blocks, carried between them within a stage (see
            :class:`~mmhybrid.layers.HistoricalAttention`); off by default.
        stem (dict): kwargs of mmcv ``PatchEmbed`` (kernel_size, stride, padding).
        use_abs_pos_embed (bool): learned absolute position embedding on the
            ``pretrain_img_size / stride`` grid, resized to the input.
        Others as in mmdet's ``SwinTransformer`` and :class:`BaseBackbone`.
    """
    arch_zoo = {}
    pos_embed_keys = ('absolute_pos_embed', )

    def __init__(self, arch, stem, mixers=None, attn='elfatt', mixer_cfg=None,
                 pretrain_img_size=224, in_channels=3,
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
        self.mixers = parse_mixers(
            elfatt_plan(attn, self.local_mixers, depths) if mixers is None else mixers,
            depths, name)
        if history is not None and not any('softmax' in s for s in self.mixers):
            raise ValueError(f'history (HAViT) needs softmax blocks; mixers '
                             f'{self.mixers} have none')
        mixer_cfg = check_mixer_cfg(mixer_cfg, name)
        dims = [arch['embed_dims'] * 2**i for i in range(4)]

        self.build_stem(in_channels, dims[0], pretrain_img_size, norm_cfg,
                        drop_rate, pos_embed=use_abs_pos_embed, **stem)

        common = dict(qkv_bias=qkv_bias, qk_scale=qk_scale, lepe=lepe,
                      attn_drop=attn_drop_rate, proj_drop=drop_rate, history=history,
                      block_layout=block_layout, global_ratio=global_ratio,
                      norm_cfg=norm_cfg)
        dpr = torch.linspace(0, drop_path_rate, sum(depths)).tolist()
        self.stages = nn.ModuleList()
        for i in range(4):
            blocks = []
            for j, mixer in enumerate(self.mixers[i]):
                depth = sum(depths[:i]) + j
                context = dict(common, block_size=block_sizes[i], shift=j % 2 == 1,
                               depth=depth + 1, **self.stage_context(i))
                blocks.append(Block(
                    dims[i], build_mixer(mixer, dims[i], num_heads[i], context,
                                         mixer_cfg.get(mixer, {})),
                    FFN(dims[i], mlp_ratio, drop=drop_rate, act_cfg=act_cfg),
                    drop_path=dpr[depth], norm_cfg=norm_cfg))
            downsample = (self.build_downsample(dims[i], dims[i + 1], norm_cfg)
                          if i < 3 else None)
            # mmdet's SwinBlockSequence names: blocks, then the merge (if any)
            self.stages.append(nn.ModuleDict(dict(blocks=nn.ModuleList(blocks),
                                                  downsample=downsample)))
            link_history(blocks)
        self.num_features = dims
        self.build_outputs(dims, norm_cfg)

    def stage_context(self, stage):
        """What the backbone offers the mixers of ``stage`` beyond the common
        options (a window or stripe size)."""
        return {}

    def stage_modules(self, index):
        return [self.stages[index]]  # its blocks and the merge after them

    def stage_blocks(self, index):
        return self.stages[index].blocks

    def merge(self, index):
        return self.stages[index - 1].downsample if index else None
