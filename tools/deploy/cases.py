"""The tiny backbones of every family and attention plan, and two whole models, for
the deploy checks.

Real architectures at small widths (same layers, ops and code paths as the paper
sizes): SoLA with its four layer letters (L: WKV, S: softmax, G: gated delta rule,
W: sliding window), InfiniteVL, Swin- and CSWin-ELFATT with each attention plan,
InfViT (pure, linear and mixed) and HAViT; a real mmseg UPerNet and our SoLA Mask
R-CNN config with narrow heads on the smallest SoLA (``WHOLE_MODELS``, as
``tools/deploy/export.py`` exports them). ``build_case(name)`` returns the module in
eval mode.
"""
from pathlib import Path

SOLA_ROUTES = (((1, 2), (3, 3)), ((2, 2), (3, 6)), ((3, 2), (4, 2)))
DIMS = (16, 16, 32, 32)
VIT = dict(embed_dims=32, depth=3, num_heads=4, mlp_ratio=2.)
HAVIT = dict(type='mmhybrid.HAViT', arch=VIT, img_size=32, patch_size=8,
             drop_path_rate=0., out_type='featmap')

CASES = {
    # the smallest SoLA with every part (WKV, softmax, a Hidden State Bridge)
    'sola-min': dict(type='mmhybrid.SoLAVision', head_dim=16, drop_path_rate=0.,
                     arch=dict(embed_dims=DIMS, schedule='L/L/LS/L',
                               hsb_routes=(((1, 1), (3, 2)), ))),
    'sola-LS': dict(type='mmhybrid.SoLAVision', head_dim=16, drop_path_rate=0.,
                    arch=dict(embed_dims=DIMS, schedule='LL/LL/LLSLLS/LS',
                              hsb_routes=SOLA_ROUTES)),
    'sola-GWS': dict(type='mmhybrid.SoLAVision', head_dim=8, window_size=3,
                     drop_path_rate=0.,
                     arch=dict(embed_dims=DIMS, schedule='GG/WG/GGSWGS/GS')),
    'infinitevl': dict(type='mmhybrid.InfiniteVLVision', head_dim=8, window_size=3,
                       drop_path_rate=0.,
                       arch=dict(embed_dims=DIMS, schedule='WG/GG/WGGGWG/GG')),
    **{f'infvit-{name}': dict(type='mmhybrid.InfViT', img_size=64, drop_path_rate=0.,
                              out_indices=(0, 1, 2, 3),
                              arch=dict(VIT, depth=4, attn_types=name[0].upper()))
       for name in ('pure', 'linear')},
    'havit': HAVIT,
    'havit-zero': dict(HAVIT, history=dict(alpha=0.45, init='zero')),
}
for _plan in ('elfatt', 'local', 'global', 'effatt'):
    CASES[f'swin-{_plan}'] = dict(
        type='mmhybrid.SwinELFATT', attn=_plan, window_size=4,
        block_sizes=(8, 8, 16, 8), drop_path_rate=0.,
        arch=dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(2, 2, 4, 4)))
    CASES[f'cswin-{_plan}'] = dict(
        type='mmhybrid.CSWin', attn=_plan, block_sizes=(8, 8, 16, 8),
        drop_path_rate=0.,
        arch=dict(embed_dims=16, depths=(1, 2, 2, 1), num_heads=(2, 2, 4, 4),
                  split_sizes=(1, 2, 2, 2)))
NAMES = sorted(CASES)
MASK_RCNN = (Path(__file__).resolve().parents[2] / 'configs' / 'sola' /
             'mask-rcnn_sola-t_fpn_1x_coco.py')


def tiny_upernet(name):
    """A real mmseg UPerNet (16 channels, 5 classes, BN) on the tiny backbone
    ``name``, initialised."""
    import torch
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    with torch.no_grad():
        channels = [o.shape[1] for o in build_case(name)(torch.randn(1, 3, 64, 64))]
    init_default_scope('mmseg')
    model = MODELS.build(dict(
        type='EncoderDecoder',
        data_preprocessor=dict(type='SegDataPreProcessor', size_divisor=32),
        backbone=dict(CASES[name]),
        decode_head=dict(type='UPerHead', in_channels=channels,
                         in_index=[0, 1, 2, 3], pool_scales=(1, 2, 3, 6),
                         channels=16, num_classes=5,
                         norm_cfg=dict(type='BN', requires_grad=True),
                         align_corners=False)))
    model.init_weights()
    return model


def narrow_mask_rcnn(num_classes=3, score_thr=0.05, mask=True, nms_pre=1000):
    """``--cfg-options`` that put :data:`MASK_RCNN` on the tiny 'sola-min' with
    16-channel heads; RoIs of small images then spread over all four levels."""
    width = 16
    options = {
        'model.backbone': dict(CASES['sola-min'], _delete_=True),
        'model.neck.in_channels': list(DIMS), 'model.neck.out_channels': width,
        'model.rpn_head.in_channels': width, 'model.rpn_head.feat_channels': width,
        'model.roi_head.bbox_roi_extractor.out_channels': width,
        'model.roi_head.bbox_roi_extractor.finest_scale': 8,
        'model.roi_head.bbox_head.in_channels': width,
        'model.roi_head.bbox_head.fc_out_channels': 32,
        'model.roi_head.bbox_head.num_classes': num_classes,
        'model.test_cfg.rcnn.score_thr': score_thr,
        'model.test_cfg.rpn.nms_pre': nms_pre}  # -1: every anchor
    if mask:
        options.update({
            'model.roi_head.mask_roi_extractor.out_channels': width,
            'model.roi_head.mask_roi_extractor.finest_scale': 8,
            'model.roi_head.mask_head.in_channels': width,
            'model.roi_head.mask_head.conv_out_channels': width,
            'model.roi_head.mask_head.num_classes': num_classes})
    else:
        options.update({'model.roi_head.mask_roi_extractor': None,
                        'model.roi_head.mask_head': None})
    return options


def upernet_logits(backbone='sola-min'):
    """:func:`tiny_upernet` as ``export.py --part segmentor`` exports it."""
    from exportable import SegmentorLogits
    return SegmentorLogits(tiny_upernet(backbone))


def mask_rcnn_detections(seed=1, **options):
    """The narrow :data:`MASK_RCNN` (:func:`narrow_mask_rcnn`) as ``export.py --part
    detector`` exports it, its weights drawn from ``seed``."""
    import torch
    from exportable import build
    torch.manual_seed(seed)
    return build(str(MASK_RCNN), part='detector',
                 cfg_options=narrow_mask_rcnn(**options))


WHOLE_MODELS = {'upernet-sola': upernet_logits,
                'mask-rcnn-sola': mask_rcnn_detections}


def build_case(name):
    """The tiny backbone or whole model ``name``, initialised, in eval mode."""
    import copy

    from mmhybrid.registry import build_model
    if name in WHOLE_MODELS:
        model = WHOLE_MODELS[name]()
    else:
        model = build_model(copy.deepcopy(CASES[name]))
        model.init_weights()
    model.eval()  # some backbones' train() returns None: not chained
    return model

