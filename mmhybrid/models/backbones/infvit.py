"""InfViT: a plain Pre-LN ViT whose attention is Infinite Self-Attention.

Paper: Roffo & Palmer, "Self-Attention And Beyond the Infinite: Towards Linear
Transformers with Infinite Self-Attention" (Sec. 3.2-3.4, 4, Supplement 14). Each
layer is pure InfSA (``'pure_infsa'``, 'P', O(N^2)), linear InfSA
(``'linear_infsa'``, 'I', O(N)), softmax (``'softmax'``, 'S', the standard ViT
baseline) or any other registered mixer (:mod:`mmhybrid.layers.mixer_layout`). Widths/depths of the paper's models are derived from its
parameter counts in docs/design.md ("InfViT").
"""

import torch.nn as nn

from mmhybrid.layers import (Block, MixerState, Mlp, build_mixer, check_mixer_cfg,
                             link_history, parse_mixers)
from mmhybrid.ops.streaming import tokens_to_map
from mmhybrid.registry import register_model
from .base_backbone import BaseBackbone, check_rates, resolve_arch

# Width 1024, MLP ratio 4.5 and tied Q = K reproduce Table 1/3 (docs/design.md).
_L = dict(embed_dims=1024, mlp_ratio=4.5, mixers='I')
_B = dict(embed_dims=768, depth=12, mlp_ratio=4.)
ARCH_ZOO = {
    'linear-4l': dict(_L, depth=4, num_heads=64),
    'pure-4l': dict(_L, depth=4, num_heads=16, mixers='P'),
    'linear-24l': dict(_L, depth=24, num_heads=16),
    'pure-24l': dict(_L, depth=24, num_heads=16, mixers='P'),
    # ViT-B width/depth (86M with softmax) for dense-prediction comparisons;
    # linear keeps the paper's 4x heads (d_h = 16).
    'linear-b': dict(_B, num_heads=48, mixers='I'),
    'pure-b': dict(_B, num_heads=12, mixers='P'),
}
OUT_TYPES = ('featmap', 'cls_token', 'avg_featmap')


def infsa_mixers(attn_types):
    """InfViT's ``attn_types`` (letters 'P' pure, 'L' linear, 'S' softmax, or the
    names 'pure', 'linear', 'softmax') as a ``mixers=`` entry."""
    names = {'P': 'pure_infsa', 'L': 'linear_infsa', 'S': 'softmax',
             'pure': 'pure_infsa', 'linear': 'linear_infsa', 'softmax': 'softmax'}
    types = list(attn_types)
    if not types or not set(types) <= set(names):
        raise ValueError(f"attn_types {attn_types!r} must give 'P' (pure), 'L' "
                         f"(linear) or 'S' (softmax) per layer, or one letter for "
                         f"all layers; any registered mixer goes in mixers=")
    return [names[t] for t in types]


@register_model()
class InfViT(BaseBackbone):
    """InfViT backbone returning (B, C, H/16, W/16) maps of chosen layers.

    Args:
        arch (str | dict): one of ``arch_zoo`` or a dict with ``embed_dims``,
            ``depth``, ``num_heads`` (int or one per layer), ``mlp_ratio``,
            ``mixers`` and optionally ``head_dim`` (softmax layers).
        mixers (str | sequence, optional): override the arch's token mixers:
            one entry (the one stage; :mod:`mmhybrid.layers.mixer_layout`), a
            list of registered names or letters repeated over the layers, e.g.
            ``'I'`` (every layer linear InfSA) or ``'IIIS'`` (every fourth
            softmax). The resolved list is the ``mixers`` attribute.
        attn_types (str | sequence, optional): the InfSA paper's spelling of
            ``mixers`` ('P' pure, 'L' linear, 'S' softmax, one per layer or one
            for all; or the names 'pure', 'linear', 'softmax').
        mixer_cfg (dict, optional): options per mixer name (or letter).
        img_size (int): image size the position embedding is stored for.
        patch_size (int): patch (and output) stride.
        tie_qk (bool, optional): tied Q = K; default per variant (linear: tied).
        gamma_init (float): initial InfSA discount (Table 4: 0.7).
        discount (str): ``'layer'`` (every layer applies its gamma once, as the
            public code's per-layer rho; Eq. 9's gamma^t arises along paths
            through t layers) or ``'depth'`` (a pure layer at depth t scales
            its output by gamma^t). See docs/design.md, "InfViT".
        local_path (str, optional): ``'lepe'`` adds a depth-wise 3x3 conv of V
            to every InfSA layer (a local path for dense prediction).
        with_cls_token (bool): prepend a class token (dropped from the outputs).
        history (dict, optional): historical attention (HAViT) in the softmax
            layers, carried through all of them (see
            :class:`~mmhybrid.layers.HistoricalAttention`); off by default.
        out_indices (int | sequence[int]): layers whose LayerNorm-ed outputs are
            returned, e.g. (2, 5, 8, 11) for mmseg's ``MultiLevelNeck``.
        out_type (str): what each output is: ``'featmap'`` (B, C, H/p, W/p),
            ``'cls_token'`` (B, C; mmpretrain's ``VisionTransformerClsHead``) or
            ``'avg_featmap'`` (B, C, the mean of the patch tokens).
        frozen_stages, norm_eval, with_cp, pretrained, init_cfg: see
            :class:`BaseBackbone` (stages are layers); a Pretrained ``init_cfg``
            also reads the ViT checkpoints of mmpretrain, mmseg, timm and the
            InfSA authors (docs/weights.md).
    """
    out_unit = 'layers'
    arch_zoo = ARCH_ZOO
    arch_keys = ('embed_dims', 'depth', 'num_heads', 'mlp_ratio', 'mixers')

    def __init__(self, arch='linear-4l', mixers=None, attn_types=None, img_size=224,
                 patch_size=16, in_channels=3, qkv_bias=None, tie_qk=None,
                 gamma_init=0.7, discount='layer', local_path=None,
                 with_cls_token=True, history=None, drop_rate=0.,
                 drop_path_rate=0.1, layer_scale_init_value=None, out_indices=(-1, ),
                 out_type='featmap', norm_cfg=dict(type='LN', eps=1e-6),
                 frozen_stages=-1, norm_eval=False, with_cp=False,
                 pretrained=None, init_cfg=None, mixer_cfg=None):
        owner = type(self).__name__
        if isinstance(arch, dict) and 'attn_types' in arch:  # the paper's spelling
            arch = dict(arch, mixers=[infsa_mixers(arch['attn_types'])])
            del arch['attn_types']
        if mixers is None and attn_types is not None:
            mixers = [infsa_mixers(attn_types)]
        arch = resolve_arch(arch, self.arch_zoo, owner, self.arch_keys,
                            mixers=mixers, qkv_bias=qkv_bias)
        check_rates(owner, drop_rate=drop_rate, drop_path_rate=drop_path_rate)
        qkv_bias = arch.get('qkv_bias', True)
        dims, depth = arch['embed_dims'], arch['depth']
        layout = parse_mixers(arch['mixers'], [depth], owner)
        heads = arch['num_heads']
        heads = [heads] * depth if isinstance(heads, int) else list(heads)
        if len(heads) != depth:
            raise ValueError(f'num_heads {heads} must have {depth} entries')
        if history is not None and 'softmax' not in layout[0]:
            raise ValueError(f'history (HAViT) needs softmax layers; mixers '
                             f'{layout} have none')
        mixer_cfg = check_mixer_cfg(mixer_cfg, owner)
        if out_type not in OUT_TYPES or (out_type == 'cls_token'
                                         and not with_cls_token):
            raise ValueError(f'out_type must be one of {OUT_TYPES} '
                             f"('cls_token' needs with_cls_token), got {out_type!r}")
        super().__init__(depth, frozen_stages, norm_eval, with_cp, init_cfg,
                         out_indices, pretrained)
        self.embed_dims = dims
        self.mixers = layout
        self.out_type = out_type
        self.patch_size = patch_size
        self.num_extra_tokens = int(with_cls_token)

        self.build_stem(in_channels, dims, img_size, None, drop_rate,
                        kernel_size=patch_size, stride=patch_size)

        context = dict(head_dim=arch.get('head_dim'), qkv_bias=qkv_bias,
                       history=history, tie_qk=tie_qk, gamma_init=gamma_init,
                       discount=discount, local_path=local_path)
        self.layers = nn.ModuleList(
            Block(dims, build_mixer(name, dims, heads[i],
                                    dict(context, depth=i + 1, shift=i % 2 == 1),
                                    mixer_cfg.get(name, {})),
                  Mlp(dims, arch['mlp_ratio']), norm_cfg=norm_cfg,
                  drop_path=drop_path_rate * i / max(depth - 1, 1),
                  layer_scale_init_value=layer_scale_init_value,
                  extra_tokens=self.num_extra_tokens)
            for i, name in enumerate(layout[0]))
        link_history(self.layers)
        self.build_outputs([dims] * depth, norm_cfg)

    def stage_modules(self, index):
        return [self.layers[index]]

    def unused_parts(self):
        return self.layers[self.out_indices[-1] + 1:]

    def forward(self, x):
        x, hw = self.embed(x)
        outs = []
        state = MixerState()  # HAViT: mixed logits carried between softmax layers
        for i, layer in enumerate(self.layers[:self.out_indices[-1] + 1]):
            x, state = self.run_layer(layer, x, hw, state)
            if i in self.out_indices:
                outs.append(self.format_output(getattr(self, f'norm{i}')(x), hw))
        return tuple(outs)

    def format_output(self, x, hw):
        """Normed tokens (B, extra + N, C) -> the output of ``out_type``."""
        if self.out_type == 'cls_token':
            return x[:, 0]
        patches = x[:, self.num_extra_tokens:]
        if self.out_type == 'avg_featmap':
            return patches.mean(1)
        return tokens_to_map(patches, hw).contiguous()
