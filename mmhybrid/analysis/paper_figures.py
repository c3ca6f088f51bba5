"""Parameter and FLOP figures the papers print, with the config that reproduces each,
and the bare backbones of every arch we ship (:data:`ARCH_FIGURES`).

``tools/analysis/get_flops.py --paper-tables`` counts every entry and prints our
figures beside these (the table in docs/benchmarks.md); the tests use the SoLA
and ELFATT rows. ``--arch-tables`` counts :data:`ARCH_FIGURES` (no paper figures
exist for most of them). Config paths are relative to the repository root.
``part`` is what the paper counts: ``'backbone'`` (SoLA: "backbone only") or
``'model'`` (ELFATT and InfViT count the classifier, 1000-class head included).
FLOPs are the papers' GFLOPs; ``flops_fa`` is ELFATT's "FA" column (attention run
by FlashAttention, which their counter cannot see), which we compare with our
count minus scaled-dot-product attention.
"""

PAPERS = {'sola': 'SoLA-Vision', 'elfatt': 'ELFATT', 'infvit': 'InfSA / InfViT'}


def _sola(table, arch, config, shape, params, flops, options=None):
    return dict(paper='sola', table=table, model=f'SoLA-{arch.upper()}',
                config=config.format(arch), options=options or {},
                part='backbone', shape=shape, params=params, flops=flops)


def _elfatt(backbone, attn, params, flops, flops_fa):
    return dict(paper='elfatt', table='Table 1', model=f'{backbone}-{attn.upper()}',
                config=f'configs/elfatt/{backbone.lower()}-elfatt_in1k.py',
                options={'model.backbone.attn': attn}, part='model',
                shape=(224, 224), params=params, flops=flops, flops_fa=flops_fa)


def _infvit(arch, params, flops=None):
    variant = arch.split('-')[0]
    return dict(paper='infvit', table='Table 1' + (' / 3' if flops else ''),
                model=f'InfViT-{arch}',
                config=f'configs/infvit/infvit-{variant}-4l_in1k.py',
                options={'model.backbone.arch': arch}, part='model',
                shape=(224, 224), params=params, flops=flops)


PAPER_FIGURES = [
    # SoLA-Vision Table 7 (= Table 3): ImageNet models, HSB on, 224^2
    _sola('Table 7', 't', 'configs/sola/sola-{}_in1k.py', (224, 224), 6.59, 1.89),
    _sola('Table 7', 's', 'configs/sola/sola-{}_in1k.py', (224, 224), 30.69, 5.43),
    _sola('Table 7', 'b', 'configs/sola/sola-{}_in1k.py', (224, 224), 88.26, 14.96),
    # Table 5 (UPerNet ADE20K, 512^2) and Table 4 (Mask R-CNN COCO, 1333x800):
    # backbone FLOPs. The runs were made without HSB, but the tables repeat Table 3's
    # params (bridges included) and Table 8 prints the same FLOPs with and without
    # HSB: the counted model had its bridges, so we count it with them too.
    _sola('Table 5', 't', 'configs/sola/upernet_sola-{}-hsb_ade20k.py', (512, 512),
          6.59, 10.88),
    _sola('Table 5', 's', 'configs/sola/upernet_sola-{}-hsb_ade20k.py', (512, 512),
          30.69, 27.22),
    _sola('Table 5', 'b', 'configs/sola/upernet_sola-{}-hsb_ade20k.py', (512, 512),
          88.26, 89.04),
    _sola('Table 4', 't', 'configs/sola/mask-rcnn_sola-{}_fpn_1x_coco.py',
          (800, 1333), 6.59, 56.0, {'model.backbone.with_hsb': True}),
    _sola('Table 4', 's', 'configs/sola/mask-rcnn_sola-{}_fpn_1x_coco.py',
          (800, 1333), 30.69, 134.0, {'model.backbone.with_hsb': True}),
    _sola('Table 4', 'b', 'configs/sola/mask-rcnn_sola-{}_fpn_1x_coco.py',
          (800, 1333), 88.26, 403.0, {'model.backbone.with_hsb': True}),
    # ELFATT Table 1, 224^2 rows of the attentions we implement: # and FLOPs nFA/FA
    _elfatt('CSWin-T', 'elfatt', 20, 4.44, 4.13),
    _elfatt('CSWin-T', 'effatt', 20, 4.35, 4.17),
    _elfatt('CSWin-T', 'global', 20, 7.60, 4.09),
    _elfatt('CSWin-T', 'local', 20, 4.36, 4.09),
    _elfatt('CSWin-B', 'elfatt', 73, 15.47, 14.46),
    _elfatt('CSWin-B', 'effatt', 73, 14.98, 14.53),
    _elfatt('CSWin-B', 'global', 73, 22.33, 14.39),
    _elfatt('CSWin-B', 'local', 73, 15.03, 14.39),
    _elfatt('Swin-T', 'elfatt', 30, 4.99, 4.67),
    _elfatt('Swin-T', 'effatt', 28, 4.55, 4.45),
    _elfatt('Swin-T', 'global', 28, 8.81, 4.38),
    _elfatt('Swin-T', 'local', 28, 4.51, None),
    _elfatt('Swin-B', 'elfatt', 91, 16.46, 15.68),
    _elfatt('Swin-B', 'effatt', 88, 15.69, 15.33),
    _elfatt('Swin-B', 'global', 88, 21.57, 15.19),
    _elfatt('Swin-B', 'local', 88, 15.47, None),
    # InfViT Table 1 (params) and Table 3 (GFLOPs at 224^2, 4L only)
    _infvit('linear-4l', 53.5, 59.0),
    _infvit('pure-4l', 57.7, 59.0),
    _infvit('linear-24l', 305.4),
    _infvit('pure-24l', 330.6),
]


def _arch(model, backbone, arch, shape=(224, 224), **options):
    return dict(model=model, type=backbone, arch=arch, options=options,
                shape=shape)


# Every arch of every backbone, built bare with its defaults (backbone only) at the
# input it is meant for: ``get_flops.py --arch-tables [TYPE ...]``.
ARCH_FIGURES = [
    _arch('SoLA-T', 'SoLAVision', 't'),
    _arch('SoLA-S', 'SoLAVision', 's'),
    _arch('SoLA-B', 'SoLAVision', 'b'),
    _arch('SoLA-T-GDN', 'SoLAVision', 't-gdn'),
    _arch('SoLA-B-GDN', 'SoLAVision', 'b-gdn'),
    _arch('InfiniteVL-T', 'InfiniteVLVision', 't'),
    _arch('InfiniteVL-B', 'InfiniteVLVision', 'b'),
    _arch('HAViT-DeiT-T', 'HAViT', 'deit-t'),
    _arch('HAViT-DeiT-S', 'HAViT', 'deit-s'),
    _arch('HAViT-DeiT-B', 'HAViT', 'deit-b'),
    _arch('HAViT (paper, CIFAR)', 'HAViT', 'paper', (32, 32), img_size=32,
          patch_size=4),
    _arch('Swin-T-ELFATT', 'SwinELFATT', 't'),
    _arch('Swin-B-ELFATT', 'SwinELFATT', 'b'),
    _arch('CSWin-T-ELFATT', 'CSWin', 't'),
    _arch('CSWin-B-ELFATT', 'CSWin', 'b'),
    _arch('InfViT-Linear-4L', 'InfViT', 'linear-4l'),
    _arch('InfViT-Pure-4L', 'InfViT', 'pure-4l'),
    _arch('InfViT-Linear-24L', 'InfViT', 'linear-24l'),
    _arch('InfViT-Pure-24L', 'InfViT', 'pure-24l'),
]
