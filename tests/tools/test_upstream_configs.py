"""Our backbones in model configs shipped with mmseg, mmdet and mmpretrain.

Each case reads a real config from ``<pkg>/.mim/configs``, swaps in one of our
backbones (tiny widths) with :func:`mmhybrid.utils.swap_backbone`, keeps the
config's own mmseg ``pretrained`` (mmseg's EncoderDecoder hands it to the
backbone), shrinks the input, builds the model through the upstream registry and
runs one loss + backward on generated data. Every trainable parameter of the
whole model must get a finite gradient: what DDP needs without
``find_unused_parameters``.

The cases cover one config per head / neck / detector family and rotate the four
backbones over them (each backbone meets segmentation and detection, hierarchical
ones a one-stage, a two-stage and a cascade detector; InfViT the ViT + MLN recipe
and ViTDet-style Mask R-CNN): a full cross product would cost 4x the time and test
the same channel plumbing again.
"""
import warnings

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope

import mmhybrid  # noqa: F401
from mmhybrid.utils import register_scope, swap_backbone

from tests._toy_runner import fewer_proposals
from tools.tiny_backbones import tiny_backbone

SIZE = {'mmseg': 64, 'mmdet': 128, 'mmpretrain': 64}
WIDTH_KEYS = ('in_channels', 'out_channels', 'channels', 'feat_channels',
              'fc_out_channels', 'conv_out_channels', 'c1_channels')
CASES = [
    # mmseg: decode head (+ auxiliary head) families
    ('mmseg', 'upernet/upernet_r50_4xb4-80k_ade20k-512x512.py', 'SoLAVision'),
    ('mmseg', 'pspnet/pspnet_r50-d8_4xb4-80k_ade20k-512x512.py', 'SwinELFATT'),
    ('mmseg', 'deeplabv3plus/deeplabv3plus_r50-d8_4xb4-80k_ade20k-512x512.py',
     'CSWin'),
    ('mmseg', 'fcn/fcn_r50-d8_4xb4-80k_ade20k-512x512.py', 'InfViT'),
    ('mmseg', 'segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py', 'CSWin'),
    ('mmseg', 'sem_fpn/fpn_r50_4xb4-160k_ade20k-512x512.py', 'SwinELFATT'),
    ('mmseg', 'vit/vit_vit-b16_mln_upernet_8xb2-80k_ade20k-512x512.py', 'InfViT'),
    # mmdet: one-stage, two-stage, cascade
    ('mmdet', 'retinanet/retinanet_r50_fpn_1x_coco.py', 'SwinELFATT'),
    ('mmdet', 'fcos/fcos_r50-caffe_fpn_gn-head_1x_coco.py', 'CSWin'),
    ('mmdet', 'atss/atss_r50_fpn_1x_coco.py', 'SoLAVision'),
    ('mmdet', 'faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py', 'CSWin'),
    ('mmdet', 'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py', 'InfViT'),
    ('mmdet', 'cascade_rcnn/cascade-mask-rcnn_r50_fpn_1x_coco.py', 'SoLAVision'),
    # mmpretrain
    ('mmpretrain', 'resnet/resnet50_8xb32_in1k.py', 'SoLAVision'),
]


def narrow(cfg, factor=4):
    """Divide every neck/head width by ``factor``, in place (layers, losses,
    samplers and assigners untouched). Runs before :func:`swap_backbone`, which
    then sets the widths facing the backbone."""
    if isinstance(cfg, dict):
        for key, value in cfg.items():
            if key in WIDTH_KEYS and isinstance(value, int):
                cfg[key] = max(value // factor, 1)
            elif key in WIDTH_KEYS and isinstance(value, (list, tuple)):
                cfg[key] = type(value)(max(v // factor, 1) for v in value)
            elif key != 'backbone':
                narrow(value, factor)
    elif isinstance(cfg, (list, tuple)):
        for value in cfg:
            narrow(value, factor)
    return cfg


def upstream_config(scope, path):
    import importlib
    pkg = importlib.import_module(scope).__path__[0]
    return Config.fromfile(f'{pkg}/.mim/configs/{path}')


def _seg_batch(model_cfg, size):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    num_classes = model_cfg.decode_head.num_classes
    inputs, samples = [], []
    for _ in range(2):
        inputs.append(torch.randint(0, 256, (3, size, size), dtype=torch.uint8))
        sample = SegDataSample(metainfo=dict(img_shape=(size, size),
                                             ori_shape=(size, size)))
        sample.gt_sem_seg = PixelData(
            data=torch.randint(0, num_classes, (1, size, size)))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


def _det_batch(size, rng):
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    inputs, samples = [], []
    for _ in range(2):
        inputs.append(torch.randint(0, 256, (3, size, size), dtype=torch.uint8))
        xy = rng.uniform(0, size * 0.6, (3, 2))
        wh = rng.uniform(size * 0.15, size * 0.4, (3, 2))
        boxes = np.concatenate([xy, np.minimum(xy + wh, size - 1)], 1)
        masks = np.zeros((3, size, size), np.uint8)
        for m, (x0, y0, x1, y1) in zip(masks, boxes.astype(int)):
            m[y0:y1, x0:x1] = 1
        sample = DetDataSample(metainfo=dict(
            img_shape=(size, size), ori_shape=(size, size), scale_factor=(1., 1.)))
        sample.gt_instances = InstanceData(
            bboxes=torch.tensor(boxes, dtype=torch.float32),
            labels=torch.tensor(rng.integers(0, 80, 3)),
            masks=BitmapMasks(masks, size, size))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


def _cls_batch(size):
    from mmpretrain.structures import DataSample
    inputs = [torch.randint(0, 256, (3, size, size), dtype=torch.uint8)
              for _ in range(2)]
    samples = [DataSample().set_gt_label(i) for i in range(2)]
    return dict(inputs=inputs, data_samples=samples)


def build(scope, model_cfg):
    register_scope(scope)
    with DefaultScope.overwrite_default_scope(scope):
        return MODELS.build(model_cfg)


@pytest.mark.parametrize('scope,path,name', CASES,
                         ids=[f'{p.split("/")[0]}-{n}' for _, p, n in CASES])
def test_backbone_in_upstream_config(scope, path, name):
    check_loss_step(scope, path, name, narrow_heads=True)


CROSS = [(scope, path, name) for scope, path, _ in CASES
         for name in sorted({n for *_, n in CASES})]


@pytest.mark.slow
@pytest.mark.parametrize('scope,path,name', CROSS,
                         ids=[f'{p.split("/")[0]}-{n}' for _, p, n in CROSS])
def test_every_backbone_in_every_config_full_heads(scope, path, name):
    """The full cross product, with the configs' own head widths."""
    check_loss_step(scope, path, name, narrow_heads=False)


def check_loss_step(scope, path, name, narrow_heads):
    cfg = upstream_config(scope, path)
    pretrained = cfg.model.get('pretrained')
    if narrow_heads:
        narrow(cfg.model)
    swap_backbone(cfg, tiny_backbone(name))
    model_cfg = cfg.model
    size = SIZE[scope]
    if scope == 'mmseg':
        model_cfg.data_preprocessor.size = (size, size)
        # kept: mmseg's EncoderDecoder passes it on to our backbone
        model_cfg.pretrained = pretrained
    fewer_proposals(model_cfg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        model = build(scope, model_cfg).train()
    if pretrained is not None:
        assert any('pretrained is deprecated' in str(w.message) for w in caught)
        assert model.backbone.init_cfg == dict(type='Pretrained',
                                               checkpoint=pretrained)
    assert type(model.backbone).__name__ == name

    batch = (_seg_batch(model_cfg, size) if scope == 'mmseg' else
             _det_batch(size, np.random.default_rng(0)) if scope == 'mmdet' else
             _cls_batch(size))
    data = model.data_preprocessor(batch, training=True)
    losses = model(**data, mode='loss')
    loss, _ = model.parse_losses(losses)
    assert torch.isfinite(loss)
    loss.backward()
    trainable = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
    no_grad = [k for k, p in trainable if p.grad is None]
    assert not no_grad, f'parameters without gradient (DDP would fail): {no_grad}'
    for key, p in trainable:
        assert torch.isfinite(p.grad).all(), key
