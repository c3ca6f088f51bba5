"""Tiny configs of every mmhybrid backbone (real architectures, small widths): one
per family, for the tests and the tools' checks (``tools/deploy/cases.py`` derives
its variants from them)."""
import copy

SOLA_ROUTES = (((1, 2), (3, 3)), ((2, 2), (3, 6)), ((3, 2), (4, 2)))

TINY_BACKBONES = {
    'SoLAVision': dict(
        type='mmhybrid.SoLAVision', head_dim=16, drop_path_rate=0.,
        arch=dict(embed_dims=(16, 16, 32, 32), schedule='LL/LL/LLSLLS/LS',
                  hsb_routes=SOLA_ROUTES)),
    'SwinELFATT': dict(
        type='mmhybrid.SwinELFATT', window_size=4, block_sizes=(8, 8, 16, 8),
        drop_path_rate=0.,
        arch=dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(2, 2, 4, 4))),
    'CSWin': dict(
        type='mmhybrid.CSWin', block_sizes=(8, 8, 16, 8), drop_path_rate=0.,
        arch=dict(embed_dims=16, depths=(1, 2, 2, 1), num_heads=(2, 2, 4, 4),
                  split_sizes=(1, 2, 2, 2))),
    'InfiniteVLVision': dict(
        type='mmhybrid.InfiniteVLVision', head_dim=16, window_size=3,
        drop_path_rate=0.,
        arch=dict(embed_dims=(16, 16, 32, 32), schedule='WG/GG/WGGG/WG')),
    'HAViT': dict(
        type='mmhybrid.HAViT', img_size=64, drop_path_rate=0.,
        out_indices=(0, 1, 2, 3), out_type='featmap',
        arch=dict(embed_dims=32, depth=4, num_heads=4, mlp_ratio=2.)),
    # four layers, one per pyramid level of mmseg's ViT + MultiLevelNeck configs
    'InfViT': dict(
        type='mmhybrid.InfViT', img_size=64, drop_path_rate=0.,
        out_indices=(0, 1, 2, 3),
        arch=dict(embed_dims=32, depth=4, num_heads=4, mlp_ratio=2.,
                  attn_types='PLSL')),
}
NAMES = sorted(TINY_BACKBONES)
# the arch dicts alone, for tests that build a backbone class directly
ARCHS = {name: cfg['arch'] for name, cfg in TINY_BACKBONES.items()}


def tiny_backbone(name, **kwargs):
    """The tiny config of backbone ``name`` with ``kwargs`` on top."""
    cfg = copy.deepcopy(TINY_BACKBONES[name])
    cfg.update(kwargs)
    return cfg


def build_tiny(name, **kwargs):
    """The tiny backbone ``name``, initialised."""
    from mmhybrid.registry import build_model
    model = build_model(tiny_backbone(name, **kwargs))
    model.init_weights()
    return model
