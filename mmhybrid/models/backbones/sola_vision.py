"""SoLA-Vision: layer-wise hybrid of WKV linear and global softmax attention.

Paper: "SoLA-Vision: Fine-grained Layer-wise Linear Softmax Hybrid Attention"
(Sec. 4, Supplement Table 7). Four stages, a 4x4 patch stem with an absolute
position embedding, Swin patch merging, and per stage a list of token mixers:
the paper's 'L' (``'wkv'``, Eq. 9) and 'S' (``'softmax'``) layers, or any other
registered mixer (:mod:`mmhybrid.layers.mixer_layout`), e.g. InfiniteVL's
``'gated_deltanet'`` ('G') and ``'sliding_window'`` ('W'). Hidden State Bridges
(Eq. 10) feed the hidden state of a shallow linear layer into the input of a
deeper softmax layer.
"""
import torch
import torch.nn as nn

from mmhybrid.layers import (Block, ConvMlp, HiddenStateBridge, PatchMerging,
                             build_mixer, check_mixer_cfg, link_history,
                             parse_mixers)
from mmhybrid.layers.mixer_layout import letters_of
from mmhybrid.layers.mixers import ChannelMix
from mmhybrid.registry import register_model
from .base_backbone import check_rates, resolve_arch
from .pyramid import PyramidBackbone

# Table 7 as printed: widths per stage (S and B are Swin-T's and Swin-B's), layers
# ('L' WKV, 'S' softmax) and HSB routes. Our counts against the paper's, and the
# readings checked for T's parameters and S's FLOPs (e.g. S and B with exchanged
# stage-1 widths), are in docs/design.md. Routes are ((stage, layer) of a linear
# source, (stage, layer) of a softmax target), 1-based. For B the table prints
# targets (3,3),(3,6),...,(3,15), which are 'L' layers of its schedule; we read
# them as the softmax layers that follow (3,4),(3,7),...,(3,16) -- see
# docs/design.md.
_T = dict(embed_dims=(96, 128, 192, 256), mixers='LL/LL/LLSLLS/LS',
          hsb_routes=(((1, 2), (3, 3)), ((2, 2), (3, 6)), ((3, 2), (4, 2))))
ARCH_ZOO = {
    't': _T,
    's': dict(_T, embed_dims=(96, 192, 384, 768)),
    'b': dict(embed_dims=(128, 256, 512, 1024), mixers='LL/LL/LLLSLLSLLSLLSLLS/LS',
              hsb_routes=(((1, 2), (3, 4)), ((1, 2), (3, 7)), ((2, 2), (3, 10)),
                          ((2, 2), (3, 13)), ((3, 2), (3, 16)), ((3, 2), (4, 2)))),
}
# SoLA with bidirectional Gated DeltaNet ('G') in place of every WKV layer ('L'):
# same widths and HSB routes (docs/design.md, "Gated DeltaNet, sliding-window ...")
for _arch in ('t', 's', 'b'):
    ARCH_ZOO[f'{_arch}-gdn'] = dict(
        ARCH_ZOO[_arch], mixers=ARCH_ZOO[_arch]['mixers'].replace('L', 'G'))


def check_routes(routes, stages, layout):
    """An HSB goes from a layer whose mixer carries a hidden state (``wkv``,
    ``gated_deltanet``: a ``hidden_dims`` attribute) to a deeper ``softmax``
    layer. ``stages`` are the built blocks, ``layout`` their mixers."""
    layout = letters_of(layout)
    for src, dst in routes:
        for name, (s, l) in (('source', src), ('target', dst)):
            if not (1 <= s <= len(stages) and 1 <= l <= len(stages[s - 1])):
                raise ValueError(f'HSB {name} {(s, l)} is outside the layers '
                                 f'{layout}')
        source = stages[src[0] - 1][src[1] - 1].attn
        if not hasattr(source, 'hidden_dims'):
            raise ValueError(f'HSB source {src} must be a layer whose mixer carries '
                             f"a hidden state ('wkv', 'gated_deltanet'), not "
                             f'{type(source).__name__}')
        if type(stages[dst[0] - 1][dst[1] - 1].attn).__name__ != 'SoftmaxAttention':
            raise ValueError(f"HSB target {dst} must be a 'softmax' layer, not "
                             f'{type(stages[dst[0] - 1][dst[1] - 1].attn).__name__}')
        if tuple(src) >= tuple(dst):
            raise ValueError(f'HSB route {src} -> {dst} must go to a deeper layer')


@register_model()
class SoLAVision(PyramidBackbone):
    """SoLA-Vision backbone.

    Args:
        arch (str | dict): 't', 's', 'b' (or 'tiny', 'small', 'base'), 't-gdn',
            's-gdn', 'b-gdn' (every 'L' replaced by 'G'), or a dict with ``embed_dims``,
            ``mixers`` and optionally ``hsb_routes``.
        mixers (str | sequence, optional): override the arch's token mixers, one
            entry per stage, each a list of registered mixer names or letters
            (:mod:`mmhybrid.layers.mixer_layout`): ``'LL/LL/LLSLLS/LS'``
            ('L' WKV, 'S' softmax, 'G' Gated DeltaNet, 'W' sliding window ...).
            The entries give the stage depths. The resolved list is the
            ``mixers`` attribute. ``schedule`` is the same in SoLA's spelling.
        hsb_routes (sequence, optional): override the arch's HSB routes,
            ``((src_stage, src_layer), (dst_stage, dst_layer))`` 1-based, from a
            layer whose mixer carries a hidden state (``wkv``,
            ``gated_deltanet``) to a deeper ``softmax`` layer.
        with_hsb (bool): build and use the Hidden State Bridges.
        pretrain_img_size (int): image size the position embedding is stored for.
        head_dim (int): channels per head of the attention mixers.
        hidden_rate (float): channel-mix expansion of the WKV layers.
        mlp_ratio (float): conv-MLP expansion of the other layers.
        key_norm (bool): Vision-RWKV's LayerNorm on the WKV output and the
            channel-mix key; not in the paper, off by default.
        history (dict, optional): historical attention (HAViT) in the softmax
            layers, carried from one to the next within a stage (see
            :class:`~mmhybrid.layers.HistoricalAttention`); off by default.
        drop_path_rate (float): stochastic depth, linearly increasing per layer.
        layer_scale_init_value (float, optional): enables LayerScale.
        out_indices, frozen_stages, norm_eval, with_cp, pretrained, init_cfg: see
            :class:`BaseBackbone`.
        window_size (int | sequence[int]): window of the window mixers (odd for
            ``sliding_window``), one for all stages or one per stage.
        mixer_cfg (dict, optional): options per mixer name (or letter), e.g.
            ``dict(gated_deltanet=dict(expand_v=2, conv_size=0))``.
    """

    arch_zoo = ARCH_ZOO

    def __init__(self, arch='t', mixers=None, hsb_routes=None, with_hsb=True,
                 pretrain_img_size=224, in_channels=3, patch_size=4,
                 head_dim=32, hidden_rate=4, mlp_ratio=4, qkv_bias=True,
                 key_norm=False, history=None, drop_rate=0., drop_path_rate=0.1,
                 layer_scale_init_value=None, out_indices=(0, 1, 2, 3),
                 norm_cfg=dict(type='LN'), frozen_stages=-1, norm_eval=False,
                 with_cp=False, pretrained=None, init_cfg=None, window_size=7,
                 mixer_cfg=None, schedule=None):
        owner = type(self).__name__
        if isinstance(arch, dict) and 'schedule' in arch:  # SoLA's spelling
            arch = dict(arch, mixers=arch['schedule'])
            del arch['schedule']
        arch = resolve_arch(arch, self.arch_zoo, owner, ('embed_dims', 'mixers'),
                            mixers=mixers if mixers is not None else schedule,
                            hsb_routes=hsb_routes)
        check_rates(owner, drop_rate=drop_rate, drop_path_rate=drop_path_rate)
        embed_dims = tuple(arch['embed_dims'])
        layout = parse_mixers(arch['mixers'], len(embed_dims), owner)
        if history is not None and not any('softmax' in s for s in layout):
            raise ValueError(f'history (HAViT) needs softmax layers; mixers '
                             f'{layout} have none')
        routes = [tuple(map(tuple, r)) for r in arch.get('hsb_routes', ()) if with_hsb]
        window_sizes = ((window_size, ) * len(layout) if isinstance(window_size, int)
                        else tuple(window_size))
        if len(window_sizes) != len(layout):
            raise ValueError(f'window_size {window_size!r} must be an int or have one '
                             f'entry per stage ({len(layout)})')
        mixer_cfg = check_mixer_cfg(mixer_cfg, owner)
        super().__init__(len(layout), frozen_stages, norm_eval, with_cp, init_cfg,
                         out_indices, pretrained)
        self.embed_dims = embed_dims
        self.mixers = layout
        self.hsb_routes = routes
        self.patch_size = patch_size

        self.build_stem(in_channels, embed_dims[0], pretrain_img_size, norm_cfg,
                        drop_rate, kernel_size=patch_size, stride=patch_size)

        num_layers = sum(map(len, layout))
        dpr = torch.linspace(0, drop_path_rate, num_layers).tolist()
        self.downsamples = nn.ModuleList()
        self.stages = nn.ModuleList()
        depth = 0
        for i, (names, dims) in enumerate(zip(layout, embed_dims)):
            if i > 0:
                self.downsamples.append(PatchMerging(
                    embed_dims[i - 1], dims, norm_cfg=norm_cfg))
            blocks = []
            for j, name in enumerate(names):
                context = dict(qkv_bias=qkv_bias, history=history, key_norm=key_norm,
                               norm_cfg=norm_cfg, window_size=window_sizes[i],
                               shift=j % 2 == 1, depth=depth + 1)
                mixer = build_mixer(name, dims, max(dims // head_dim, 1), context,
                                    mixer_cfg.get(name, {}))
                # the paper's 'L' layer: spatial mix, then channel mix (Fig. 4c)
                mlp = (ChannelMix(dims, hidden_rate, key_norm, norm_cfg)
                       if name == 'wkv' else ConvMlp(dims, mlp_ratio))
                blocks.append(Block(dims, mixer, mlp, drop_path=dpr[depth],
                                    layer_scale_init_value=layer_scale_init_value,
                                    norm_cfg=norm_cfg))
                depth += 1
            self.stages.append(nn.ModuleList(blocks))
            link_history(self.stages[-1])

        check_routes(routes, self.stages, layout)
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
