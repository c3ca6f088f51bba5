"""SoLA-Vision: layer-wise hybrid of WKV linear and global softmax attention.

Paper: "SoLA-Vision: Fine-grained Layer-wise Linear Softmax Hybrid Attention"
(Sec. 4, Supplement Table 7). Four stages, a 4x4 patch stem with an absolute
position embedding, Swin patch merging, and a per-stage schedule of 'L' (WKV
linear, Eq. 9) and 'S' (global softmax) layers. Hidden State Bridges (Eq. 10)
feed the WKV state of a shallow 'L' layer into the input of a deeper 'S' layer.
"""
import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.transformer import PatchEmbed, PatchMerging

from mmhybrid.layers import HiddenStateBridge, SoftmaxLayer, WKVLayer
from mmhybrid.layers.historical_attention import is_historical, link_history
from mmhybrid.registry import register_model
from ..utils import resize_pos_embed
from .base_backbone import BaseBackbone

LAYER_TYPES = {'L': WKVLayer, 'S': SoftmaxLayer}

# Table 7. Routes are ((stage, layer) of an 'L' source, (stage, layer) of an 'S'
# target), 1-based. For B the table prints targets (3,3),(3,6),...,(3,15), which
# are 'L' layers of its schedule; we read them as the softmax layers that follow
# (3,4),(3,7),...,(3,16) -- see docs/design.md.
ARCH_SETTINGS = {
    't': dict(
        embed_dims=(96, 128, 192, 256),
        schedule='LL/LL/LLSLLS/LS',
        hsb_routes=(((1, 2), (3, 3)), ((2, 2), (3, 6)), ((3, 2), (4, 2)))),
    's': dict(
        embed_dims=(96, 192, 384, 768),
        schedule='LL/LL/LLSLLS/LS',
        hsb_routes=(((1, 2), (3, 3)), ((2, 2), (3, 6)), ((3, 2), (4, 2)))),
    'b': dict(
        embed_dims=(128, 256, 512, 1024),
        schedule='LL/LL/LLLSLLSLLSLLSLLS/LS',
        hsb_routes=(((1, 2), (3, 4)), ((1, 2), (3, 7)), ((2, 2), (3, 10)),
                    ((2, 2), (3, 13)), ((3, 2), (3, 16)), ((3, 2), (4, 2)))),
}


def parse_schedule(schedule, num_stages):
    """'LL/LL/LLSLLS/LS' -> ['LL', 'LL', 'LLSLLS', 'LS'], validated."""
    stages = schedule.split('/') if isinstance(schedule, str) else list(schedule)
    if len(stages) != num_stages:
        raise ValueError(f'schedule {schedule!r} has {len(stages)} stages, '
                         f'expected {num_stages} (one per embed_dims entry)')
    for i, stage in enumerate(stages, 1):
        if not stage:
            raise ValueError(f'stage {i} of schedule {schedule!r} has no layer')
        bad = set(stage) - set(LAYER_TYPES)
        if bad:
            raise ValueError(f'unknown layer letters {sorted(bad)} in stage {i} '
                             f'of {schedule!r}; use {sorted(LAYER_TYPES)}')
    return stages


def check_routes(routes, stages):
    """Each route must go from an earlier 'L' layer to a later 'S' layer."""
    for src, dst in routes:
        for name, (s, l), letter in (('source', src, 'L'), ('target', dst, 'S')):
            if not (1 <= s <= len(stages) and 1 <= l <= len(stages[s - 1])):
                raise ValueError(f'HSB {name} {(s, l)} is outside the schedule '
                                 f'{"/".join(stages)}')
            if stages[s - 1][l - 1] != letter:
                raise ValueError(f'HSB {name} {(s, l)} must be an {letter!r} '
                                 f'layer, schedule is {"/".join(stages)}')
        if tuple(src) >= tuple(dst):
            raise ValueError(f'HSB route {src} -> {dst} must go to a deeper layer')


@register_model()
class SoLAVision(BaseBackbone):
    """SoLA-Vision backbone.

    Args:
        arch (str | dict): 't', 's', 'b', or a dict with ``embed_dims``,
            ``schedule`` and optionally ``hsb_routes``.
        schedule (str, optional): override the arch's layer schedule, one letter
            per layer ('L' WKV linear, 'S' global softmax), '/' between stages.
        hsb_routes (sequence, optional): override the arch's HSB routes,
            ``((src_stage, src_layer), (dst_stage, dst_layer))`` 1-based.
        with_hsb (bool): build and use the Hidden State Bridges.
        pretrain_img_size (int): image size the position embedding is stored for.
        head_dim (int): channels per softmax attention head.
        hidden_rate (float): channel-mix expansion of the WKV layers.
        mlp_ratio (float): MLP expansion of the softmax layers.
        key_norm (bool): LayerNorm on the WKV output and channel-mix key.
        history (dict, optional): historical attention (HAViT) in the 'S'
            layers, carried from one 'S' layer to the next within a stage (see
            :class:`~mmhybrid.layers.HistoricalAttention`); off by default.
        drop_path_rate (float): stochastic depth, linearly increasing per layer.
        layer_scale_init_value (float, optional): enables LayerScale.
        out_indices (sequence[int]): stages whose (normed) maps are returned.
        frozen_stages, norm_eval, with_cp, init_cfg: see :class:`BaseBackbone`.
    """

    def __init__(self, arch='t', schedule=None, hsb_routes=None, with_hsb=True,
                 pretrain_img_size=224, in_channels=3, patch_size=4,
                 head_dim=32, hidden_rate=4, mlp_ratio=4, qkv_bias=True,
                 key_norm=True, history=None, drop_rate=0., drop_path_rate=0.1,
                 layer_scale_init_value=None, out_indices=(0, 1, 2, 3),
                 norm_cfg=dict(type='LN'), frozen_stages=-1, norm_eval=False,
                 with_cp=False, init_cfg=None):
        if isinstance(arch, str):
            if arch.lower() not in ARCH_SETTINGS:
                raise KeyError(f'unknown SoLAVision arch {arch!r}; choose from '
                               f'{sorted(ARCH_SETTINGS)} or pass a dict')
            arch = ARCH_SETTINGS[arch.lower()]
        arch = dict(arch)
        embed_dims = tuple(arch['embed_dims'])
        stages = parse_schedule(schedule or arch['schedule'], len(embed_dims))
        if history is not None and not any('S' in s for s in stages):
            raise ValueError(f'history (HAViT) needs softmax layers; schedule '
                             f'{"/".join(stages)} has no S')
        routes = [tuple(map(tuple, r)) for r in
                  (hsb_routes if hsb_routes is not None else
                   arch.get('hsb_routes', ()))]
        if with_hsb:
            check_routes(routes, stages)
        else:
            routes = []
        for i in out_indices:
            if not 0 <= i < len(stages):
                raise ValueError(f'out_indices {out_indices} outside 0..'
                                 f'{len(stages) - 1}')
        super().__init__(len(stages), frozen_stages, norm_eval, with_cp,
                         init_cfg)
        self.embed_dims = embed_dims
        self.schedule = '/'.join(stages)
        self.hsb_routes = routes
        self.out_indices = tuple(out_indices)
        self.patch_size = patch_size

        self.patch_embed = PatchEmbed(
            in_channels=in_channels, embed_dims=embed_dims[0],
            kernel_size=patch_size, stride=patch_size, padding='corner',
            norm_cfg=norm_cfg)
        self.pos_grid = (pretrain_img_size // patch_size, ) * 2
        self.pos_embed = nn.Parameter(
            torch.zeros(1, self.pos_grid[0] * self.pos_grid[1], embed_dims[0]))
        self.drop_after_pos = nn.Dropout(drop_rate)

        total = sum(len(s) for s in stages)
        dpr = torch.linspace(0, drop_path_rate, total).tolist()
        self.downsamples = nn.ModuleList()
        self.stages = nn.ModuleList()
        for i, (letters, dims) in enumerate(zip(stages, embed_dims)):
            if i > 0:
                self.downsamples.append(PatchMerging(
                    embed_dims[i - 1], dims, kernel_size=2, padding='corner',
                    norm_cfg=norm_cfg, bias=False))
            first = sum(len(s) for s in stages[:i])
            own_kwargs = {
                'L': dict(hidden_rate=hidden_rate, key_norm=key_norm),
                'S': dict(num_heads=max(dims // head_dim, 1),
                          mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                          history=history),
            }
            self.stages.append(nn.ModuleList(
                LAYER_TYPES[letter](
                    dims, drop_path=dpr[first + j],
                    layer_scale_init_value=layer_scale_init_value,
                    norm_cfg=norm_cfg, **own_kwargs[letter])
                for j, letter in enumerate(letters)))
            link_history(self.stages[-1])

        # bridges are keyed by target layer "<stage>_<layer>" (1-based)
        self.bridges = nn.ModuleDict()
        for src, dst in routes:
            key = f'{dst[0]}_{dst[1]}'
            if key in self.bridges:
                raise ValueError(f'two HSB routes end at {dst}')
            self.bridges[key] = HiddenStateBridge(embed_dims[src[0] - 1],
                                                  embed_dims[dst[0] - 1])
        self._bridge_sources = {f'{dst[0]}_{dst[1]}': src for src, dst in routes}

        for i in self.out_indices:
            self.add_module(f'norm{i}', build_norm_layer(norm_cfg,
                                                         embed_dims[i])[1])
        self._freeze_stages()

    def stage_parts(self, index):
        if index == 0:
            return [self.patch_embed, self.pos_embed]
        parts = [self.stages[index - 1]]
        if index > 1:
            parts.append(self.downsamples[index - 2])
        parts += [b for k, b in self.bridges.items()
                  if int(k.split('_')[0]) == index]
        if index - 1 in self.out_indices:
            parts.append(getattr(self, f'norm{index - 1}'))
        return parts

    def init_scratch(self):
        super().init_scratch()
        wkv_layers = [m for m in self.modules() if isinstance(m, WKVLayer)]
        for i, layer in enumerate(wkv_layers):
            layer.init_decay(i / max(len(wkv_layers) - 1, 1))

    def forward(self, x):
        if x.dim() != 4:
            raise ValueError(f'expected a (B, C, H, W) image batch, got shape '
                             f'{tuple(x.shape)}')
        x, hw = self.patch_embed(x)
        x = x + resize_pos_embed(self.pos_embed, self.pos_grid, hw)
        x = self.drop_after_pos(x)

        sources = set(self._bridge_sources.values())
        hidden = {}
        outs = []
        for i, stage in enumerate(self.stages):
            if i > 0:
                x, hw = self.downsamples[i - 1](x, hw)
            history = None  # HAViT: carried between the stage's 'S' layers
            for j, layer in enumerate(stage):
                key = f'{i + 1}_{j + 1}'
                if key in self.bridges:
                    state, state_hw = hidden[self._bridge_sources[key]]
                    x = self.run_layer(self.bridges[key], x, hw, state,
                                       state_hw)
                if is_historical(layer):
                    x, history = self.run_layer(layer, x, hw, history)
                else:
                    x, state = self.run_layer(layer, x, hw)
                if (i + 1, j + 1) in sources:
                    hidden[(i + 1, j + 1)] = (state, hw)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(x)
                outs.append(out.transpose(1, 2).reshape(
                    x.shape[0], -1, *hw).contiguous())
        return tuple(outs)
