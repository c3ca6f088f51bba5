"""The tiny backbones of every family and attention plan, and two whole models, for
the deploy checks.

Variants of ``tools/tiny_backbones.py`` (real architectures at small widths: same
layers, ops and code paths as the paper sizes): SoLA with its four layer letters (L:
WKV, S: softmax, G: gated delta rule, W: sliding window), InfiniteVL, Swin- and
CSWin-ELFATT with each attention plan, InfViT (pure and linear), HAViT, and every
registered mixer in every layer of the tiny SoLA (``mixer-<name>``); a real
mmseg UPerNet and our SoLA Mask R-CNN config with narrow heads on the smallest SoLA
(``WHOLE_MODELS``, as ``tools/deploy/export.py`` exports them). ``build_case(name)``
returns the module in eval mode.
"""
from pathlib import Path

from mmhybrid.layers import registered_mixers
from tools.deploy.exportable import SegmentorLogits, build
from tools.tiny_backbones import TINY_BACKBONES

SOLA, INFINITEVL, HAVIT, INFVIT = (TINY_BACKBONES[name] for name in (
    'SoLAVision', 'InfiniteVLVision', 'HAViT', 'InfViT'))
DIMS = SOLA['arch']['embed_dims']
SMALL_HAVIT = dict(HAVIT, img_size=32, patch_size=8, out_indices=(-1, ),
                   arch=dict(HAVIT['arch'], depth=3))

CASES = {
    # the smallest SoLA with every part (WKV, softmax, a Hidden State Bridge)
    'sola-min': dict(SOLA, arch=dict(SOLA['arch'], schedule='L/L/LS/L',
                                     hsb_routes=(((1, 1), (3, 2)), ))),
    'sola-LS': SOLA,
    'sola-GWS': dict(SOLA, head_dim=8, window_size=3,
                     arch=dict(embed_dims=DIMS, schedule='GG/WG/GGSWGS/GS')),
    'infinitevl': dict(INFINITEVL, head_dim=8,
                       arch=dict(INFINITEVL['arch'], schedule='WG/GG/WGGGWG/GG')),
    **{f'infvit-{name}': dict(INFVIT, arch=dict(INFVIT['arch'], attn_types=name[0].upper()))
       for name in ('pure', 'linear')},
    'havit': SMALL_HAVIT,
    'havit-zero': dict(SMALL_HAVIT, history=dict(alpha=0.45, init='zero')),
}
for _plan in ('elfatt', 'local', 'global', 'effatt'):
    CASES[f'swin-{_plan}'] = dict(TINY_BACKBONES['SwinELFATT'], attn=_plan)
    CASES[f'cswin-{_plan}'] = dict(TINY_BACKBONES['CSWin'], attn=_plan)
# every registered mixer in every layer of the tiny SoLA, with its test options
for _name, _mixer in registered_mixers().items():
    CASES[f'mixer-{_name}'] = dict(
        SOLA, head_dim=8, mixers=_name, arch=dict(SOLA['arch'], hsb_routes=()),
        mixer_cfg={_name: getattr(_mixer, 'test_options', {})})
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
    return SegmentorLogits(tiny_upernet(backbone))


def mask_rcnn_detections(seed=1, **options):
    """The narrow :data:`MASK_RCNN` (:func:`narrow_mask_rcnn`) as ``export.py --part
    detector`` exports it, its weights drawn from ``seed``."""
    import torch
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

