"""InfiniteVL-style vision backbone: Gated DeltaNet + sliding-window attention.

Paper: "InfiniteVL: Synergizing Linear and Sparse Attention for Highly-Efficient,
Unlimited-Input Vision-Language Models" (Sec. 3.2). Its LLM is a stack of hybrid
blocks, each one SWA layer followed by three Gated DeltaNet layers. Here the same
block, 'WGGG', repeats through SoLA-Vision's four-stage hierarchy: 'W' is 2D
sliding-window attention on the token grid, 'G' a bidirectional Gated DeltaNet
layer. T and B keep SoLA-T/B's widths and stage depths, and the block is cut
into those stages (docs/design.md), so the models differ from SoLA-T/B only in
their token mixers.
"""
from mmhybrid.registry import register_model
from .sola_vision import SoLAVision


def block_schedule(block, depths):
    """Repeat ``block`` over ``sum(depths)`` layers, cut into stages of ``depths``.

    ``block_schedule('WGGG', (2, 2, 6, 2)) == 'WG/GG/WGGGWG/GG'``.
    """
    layers = iter(block * sum(depths))
    return '/'.join(''.join(next(layers) for _ in range(d)) for d in depths)


ARCH_ZOO = {
    't': dict(embed_dims=(96, 128, 192, 256),
              mixers=block_schedule('WGGG', (2, 2, 6, 2))),
    # Swin-T's widths and depths: the student of a Swin-T teacher (docs/weights.md)
    's': dict(embed_dims=(96, 192, 384, 768),
              mixers=block_schedule('WGGG', (2, 2, 6, 2))),
    'b': dict(embed_dims=(128, 256, 512, 1024),
              mixers=block_schedule('WGGG', (2, 2, 16, 2))),
}


@register_model()
class InfiniteVLVision(SoLAVision):
    """InfiniteVL-style hierarchical backbone (archs 't', 's', 'b' or a dict).

    Takes every argument of :class:`SoLAVision`; the archs have no global
    softmax layer and therefore no Hidden State Bridge. ``window_size`` (default
    7, per stage allowed) sets the 'W' layers' neighbourhood.
    """
    arch_zoo = ARCH_ZOO
