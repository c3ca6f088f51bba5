"""SoLA-Vision: layer-wise hybrid of WKV linear and global softmax attention.

Paper: "SoLA-Vision: Fine-grained Layer-wise Linear Softmax Hybrid Attention"
(Sec. 4, Supplement Table 7). Four stages, a 4x4 patch stem with an absolute
position embedding, Swin patch merging, and a per-stage schedule of 'L' (WKV
linear, Eq. 9) and 'S' (global softmax) layers. Hidden State Bridges (Eq. 10)
feed the WKV state of a shallow 'L' layer into the input of a deeper 'S' layer.
Schedules may also use 'G' (bidirectional Gated DeltaNet, a linear layer whose
hidden state can be bridged too) and 'W' (2D sliding-window attention), the
layers of InfiniteVL (see infinitevl_vision.py).
"""
import torch
import torch.nn as nn

from mmhybrid.layers import (BidirectionalGatedDeltaNet, Block, ChannelMix,
                             ConvMlp, HiddenStateBridge, PatchMerging,
                             SlidingWindowAttention, SoftmaxAttention, SpatialMix,
                             link_history)
from mmhybrid.registry import register_model
from .base_backbone import check_rates, resolve_arch
from .pyramid import PyramidBackbone


def build_layer(letter, dims, num_heads=1, hidden_rate=4, key_norm=False,
                mlp_ratio=4, qkv_bias=True, history=None, window_size=7,
                expand_v=1., conv_size=3, norm_cfg=dict(type='LN'), **block):
    """A layer of the schedule, each a :class:`~mmhybrid.layers.Block`: 'L' the WKV
    linear layer (Sec. 4.4, Fig. 4c: spatial mix, channel mix); 'S' global softmax
    attention (Sec. 4.4), 'G' bidirectional Gated DeltaNet (InfiniteVL Sec. 3.1)
    and 'W' 2D sliding-window attention (InfiniteVL Sec. 3.2), then the conv MLP."""
    if letter == 'L':
        return Block(dims, SpatialMix(dims, key_norm, norm_cfg),
                     ChannelMix(dims, hidden_rate, key_norm, norm_cfg),
                     norm_cfg=norm_cfg, **block)
    mixer = (SoftmaxAttention(dims, num_heads, qkv_bias=qkv_bias, history=history)
             if letter == 'S' else
             BidirectionalGatedDeltaNet(dims, num_heads, expand_v, conv_size)
             if letter == 'G' else
             SlidingWindowAttention(dims, num_heads, window_size, qkv_bias))
    return Block(dims, mixer, ConvMlp(dims, mlp_ratio), norm_cfg=norm_cfg, **block)


LAYER_NAMES = {'L': 'WKV linear', 'S': 'global softmax',
               'G': 'bidirectional Gated DeltaNet', 'W': 'sliding-window attention'}
# the arguments of build_layer each letter reads (layer_cfg may set only these)
LAYER_ARGS = {'L': {'hidden_rate', 'key_norm'},
              'S': {'num_heads', 'qkv_bias', 'history', 'mlp_ratio'},
              'G': {'num_heads', 'expand_v', 'conv_size', 'mlp_ratio'},
              'W': {'num_heads', 'window_size', 'qkv_bias', 'mlp_ratio'}}

# Table 7 as printed: widths per stage (S and B are Swin-T's and Swin-B's), schedules
# and HSB routes. Our counts against the paper's, and the readings checked for T's
# parameters and S's FLOPs (e.g. S and B with exchanged stage-1 widths), are in
# docs/design.md. Routes are ((stage, layer) of an 'L' source, (stage, layer) of an
# 'S' target), 1-based. For B the table prints targets (3,3),(3,6),...,(3,15), which
# are 'L' layers of its schedule; we read them as the softmax layers that follow
# (3,4),(3,7),...,(3,16) -- see docs/design.md.
_T = dict(embed_dims=(96, 128, 192, 256), schedule='LL/LL/LLSLLS/LS',
          hsb_routes=(((1, 2), (3, 3)), ((2, 2), (3, 6)), ((3, 2), (4, 2))))
ARCH_ZOO = {
    't': _T,
    's': dict(_T, embed_dims=(96, 192, 384, 768)),
    'b': dict(embed_dims=(128, 256, 512, 1024), schedule='LL/LL/LLLSLLSLLSLLSLLS/LS',
              hsb_routes=(((1, 2), (3, 4)), ((1, 2), (3, 7)), ((2, 2), (3, 10)),
                          ((2, 2), (3, 13)), ((3, 2), (3, 16)), ((3, 2), (4, 2)))),
}
# SoLA with bidirectional Gated DeltaNet ('G') in place of every WKV layer ('L'):
# same widths and HSB routes (docs/design.md, "Gated DeltaNet, sliding-window ...")
for _arch in ('t', 'b'):
    ARCH_ZOO[f'{_arch}-gdn'] = dict(
        ARCH_ZOO[_arch], schedule=ARCH_ZOO[_arch]['schedule'].replace('L', 'G'))


def parse_schedule(schedule, num_stages):
    """'LL/LL/LLSLLS/LS' -> ['LL', 'LL', 'LLSLLS', 'LS'], validated."""
    stages = schedule.split('/') if isinstance(schedule, str) else list(schedule)
    if len(stages) != num_stages:
        raise ValueError(f'schedule {schedule!r} has {len(stages)} stages, expected '
                         f"{num_stages} (one per embed_dims entry, separated by '/', "
                         "e.g. 'LL/LL/LLSLLS/LS')")
    for i, stage in enumerate(stages, 1):
        if not stage or set(stage) - set(LAYER_NAMES):
            raise ValueError(
                f'stage {i} of schedule {schedule!r} has no layer' if not stage else
                f'unknown layer letters {sorted(set(stage) - set(LAYER_NAMES))} in '
                f'stage {i} of schedule {schedule!r}; use ' + ', '.join(
                    f'{k!r} ({v})' for k, v in LAYER_NAMES.items()))
    return stages


def check_routes(routes, stages):
    """An HSB goes from a linear ('L', 'G') layer's hidden state to a deeper global
    softmax ('S') layer."""
    for src, dst in routes:
        for name, (s, l), letters in (('source', src, 'LG'), ('target', dst, 'S')):
            if not (1 <= s <= len(stages) and 1 <= l <= len(stages[s - 1])):
                raise ValueError(f'HSB {name} {(s, l)} is outside the schedule '
                                 f'{"/".join(stages)}')
            if stages[s - 1][l - 1] not in letters:
                raise ValueError(f'HSB {name} {(s, l)} must be an '
                                 f'{" or ".join(map(repr, letters))} layer, not '
                                 f'{stages[s - 1][l - 1]!r}; schedule is '
                                 f'{"/".join(stages)}')
        if tuple(src) >= tuple(dst):
            raise ValueError(f'HSB route {src} -> {dst} must go to a deeper layer')


@register_model()
class SoLAVision(PyramidBackbone):
    """SoLA-Vision backbone.

    Args:
        arch (str | dict): 't', 's', 'b' (or 'tiny', 'small', 'base'), 't-gdn',
            'b-gdn' (every 'L' replaced by 'G'), or a dict with ``embed_dims``,
            ``schedule`` and optionally ``hsb_routes``.
        schedule (str, optional): override the arch's layer schedule, one letter
            per layer ('L' WKV linear, 'S' global softmax, 'G' bidirectional
            Gated DeltaNet, 'W' sliding-window attention), '/' between stages.
        hsb_routes (sequence, optional): override the arch's HSB routes,
            ``((src_stage, src_layer), (dst_stage, dst_layer))`` 1-based, from an
            'L' or 'G' layer to a deeper 'S' layer.
        with_hsb (bool): build and use the Hidden State Bridges.
        pretrain_img_size (int): image size the position embedding is stored for.
        head_dim (int): channels per head of the 'S', 'W' and 'G' layers.
        hidden_rate (float): channel-mix expansion of the WKV layers.
        mlp_ratio (float): MLP expansion of the 'S', 'W' and 'G' layers.
        key_norm (bool): Vision-RWKV's LayerNorm on the WKV output and the
            channel-mix key; not in the paper, off by default.
        history (dict, optional): historical attention (HAViT) in the 'S'
            layers, carried from one 'S' layer to the next within a stage (see
            :class:`~mmhybrid.layers.HistoricalAttention`); off by default.
        drop_path_rate (float): stochastic depth, linearly increasing per layer.
        layer_scale_init_value (float, optional): enables LayerScale.
        out_indices, frozen_stages, norm_eval, with_cp, pretrained, init_cfg: see
            :class:`BaseBackbone`.
        window_size (int | sequence[int]): odd window of the 'W' layers, one for
            all stages or one per stage.
        layer_cfg (dict, optional): extra arguments per layer letter, e.g.
            ``dict(G=dict(expand_v=2, conv_size=0))``.
    """

    arch_zoo = ARCH_ZOO

    def __init__(self, arch='t', schedule=None, hsb_routes=None, with_hsb=True,
                 pretrain_img_size=224, in_channels=3, patch_size=4,
                 head_dim=32, hidden_rate=4, mlp_ratio=4, qkv_bias=True,
                 key_norm=False, history=None, drop_rate=0., drop_path_rate=0.1,
                 layer_scale_init_value=None, out_indices=(0, 1, 2, 3),
                 norm_cfg=dict(type='LN'), frozen_stages=-1, norm_eval=False,
                 with_cp=False, pretrained=None, init_cfg=None, window_size=7,
                 layer_cfg=None):
        owner = type(self).__name__
        arch = resolve_arch(arch, self.arch_zoo, owner, ('embed_dims', 'schedule'),
                            schedule=schedule, hsb_routes=hsb_routes)
        check_rates(owner, drop_rate=drop_rate, drop_path_rate=drop_path_rate)
        embed_dims = tuple(arch['embed_dims'])
        stages = parse_schedule(arch['schedule'], len(embed_dims))
        if history is not None and not any('S' in s for s in stages):
            raise ValueError(f'history (HAViT) needs softmax layers; schedule '
                             f'{"/".join(stages)} has no S')
        routes = [tuple(map(tuple, r)) for r in arch.get('hsb_routes', ()) if with_hsb]
        check_routes(routes, stages)
        window_sizes = ((window_size, ) * len(stages) if isinstance(window_size, int)
                        else tuple(window_size))
        if len(window_sizes) != len(stages):
            raise ValueError(f'window_size {window_size!r} must be an int or have one '
                             f'entry per stage ({len(stages)})')
        layer_cfg = dict(layer_cfg or {})
        if set(layer_cfg) - set(LAYER_NAMES):
            raise ValueError(f'layer_cfg has unknown layer letters '
                             f'{sorted(set(layer_cfg) - set(LAYER_NAMES))}; use '
                             f'{sorted(LAYER_NAMES)}')
        for letter, cfg in layer_cfg.items():
            if set(cfg) - LAYER_ARGS[letter]:
                raise ValueError(
                    f'layer_cfg[{letter!r}] has {sorted(set(cfg) - LAYER_ARGS[letter])},'
                    f' which {LAYER_NAMES[letter]} layers do not take; they take '
                    f'{sorted(LAYER_ARGS[letter])}')
        super().__init__(len(stages), frozen_stages, norm_eval, with_cp, init_cfg,
                         out_indices, pretrained)
        self.embed_dims = embed_dims
        self.schedule = '/'.join(stages)
        self.hsb_routes = routes
        self.patch_size = patch_size

        self.build_stem(in_channels, embed_dims[0], pretrain_img_size, norm_cfg,
                        drop_rate, kernel_size=patch_size, stride=patch_size)

        dpr = iter(torch.linspace(0, drop_path_rate, len(''.join(stages))).tolist())
        self.downsamples = nn.ModuleList()
        self.stages = nn.ModuleList()
        for i, (letters, dims) in enumerate(zip(stages, embed_dims)):
            if i > 0:
                self.downsamples.append(PatchMerging(
                    embed_dims[i - 1], dims, norm_cfg=norm_cfg))
            kwargs = dict(num_heads=max(dims // head_dim, 1), hidden_rate=hidden_rate,
                          key_norm=key_norm, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                          history=history, window_size=window_sizes[i],
                          norm_cfg=norm_cfg,
                          layer_scale_init_value=layer_scale_init_value)
            self.stages.append(nn.ModuleList(
                build_layer(letter, dims, drop_path=next(dpr),
                            **{**kwargs, **layer_cfg.get(letter, {})})
                for letter in letters))
            link_history(self.stages[-1])

        for src, dst in routes:
            key = f'{dst[0]}_{dst[1]}'
            if key in self.bridges:
                raise ValueError(f'two HSB routes end at {dst}')
            source = self.stages[src[0] - 1][src[1] - 1].attn
            self.bridges[key] = HiddenStateBridge(source.hidden_dims,
                                                  embed_dims[dst[0] - 1])
            self.bridge_sources[key] = src
        self.build_outputs(embed_dims, norm_cfg)

    def stage_modules(self, index):
        return [self.stages[index]] + ([self.downsamples[index - 1]] if index else [])

    def stage_blocks(self, index):
        return self.stages[index]

    def merge(self, index):
        return self.downsamples[index - 1] if index else None

    def init_scratch(self):
        super().init_scratch()
        wkv = [m for m in self.modules() if isinstance(m, SpatialMix)]
        for i, mixer in enumerate(wkv):
            mixer.init_decay(i / max(len(wkv) - 1, 1))
