"""HAViT: a plain ViT/DeiT whose attention layers carry historical attention.

Paper: Banik et al., "HAViT: Historical Attention Vision Transformer" (Sec. III,
Eq. 4-7). Every layer is softmax attention with ``A_l = alpha Q K^T / sqrt(d) +
(1 - alpha) A_{l-1}``; the model is :class:`InfViT`'s plain ViT with every mixer
``'softmax'`` and ``history`` on, plus the paper's model and DeiT sizes. Readings
of the paper: docs/design.md ("Historical attention (HAViT)").
"""
from mmhybrid.registry import register_model
from .infvit import InfViT

# 'paper': the model of Tables I-III (reference code, banik-s/HAViT
# create_model.py): width 192, 9 layers, 12 heads of 64 channels (attention
# 768 wide), MLP 512, no qkv bias; patch 4 on 32^2 CIFAR, 8 on 64^2 Tiny-ImageNet.
# 'deit-*': DeiT-T/S/B widths for ImageNet-1K.
ARCH_ZOO = {
    'paper': dict(embed_dims=192, depth=9, num_heads=12, head_dim=64,
                  mlp_ratio=512 / 192, qkv_bias=False),
    'deit-t': dict(embed_dims=192, depth=12, num_heads=3, mlp_ratio=4.),
    'deit-s': dict(embed_dims=384, depth=12, num_heads=6, mlp_ratio=4.),
    'deit-b': dict(embed_dims=768, depth=12, num_heads=12, mlp_ratio=4.),
}


@register_model()
class HAViT(InfViT):
    """HAViT backbone: a ViT with historical attention in all its layers.

    Args:
        arch (str | dict): ``'paper'``, ``'deit-t'``, ``'deit-s'``, ``'deit-b'``
            or a dict with ``embed_dims``, ``depth``, ``num_heads``, ``mlp_ratio``
            and optionally ``head_dim`` and ``qkv_bias``.
        history (dict): :class:`~mmhybrid.layers.HistoricalAttention` arguments;
            the paper's best is ``alpha=0.45, init='random'``. None gives the
            plain ViT baseline of the same size.
        out_type (str): ``'cls_token'`` (for ``VisionTransformerClsHead``),
            ``'avg_featmap'`` or ``'featmap'``.
        mixers (str | list): every layer softmax by default; any layout of
            :class:`InfViT` (historical layers need softmax ones).
        Others: see :class:`InfViT`.
    """

    arch_zoo = ARCH_ZOO
    arch_keys = ('embed_dims', 'depth', 'num_heads', 'mlp_ratio')

    def __init__(self, arch='deit-s', history=dict(alpha=0.45, init='random'),
                 out_type='cls_token', mixers='softmax', **kwargs):
        if 'attn_types' in kwargs:
            raise TypeError("HAViT's layers are named by mixers= (default "
                            "'softmax'); attn_types is InfViT's spelling")
        super().__init__(arch=arch, mixers=mixers, history=history,
                         out_type=out_type, **kwargs)
