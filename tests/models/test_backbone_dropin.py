"""What upstream models pass to backbones, accepted by every mmhybrid backbone:
mmseg's ``pretrained``, ``init_cfg`` lists, ``out_indices`` forms; and modules
after the last output neither run nor trained (DDP without
``find_unused_parameters``)."""
import pytest
import torch
from mmengine.config import Config

import mmhybrid  # noqa: F401
from mmhybrid.models.backbones.base_backbone import parse_out_indices
from mmhybrid.utils import swap_backbone

from tests.tools.test_upstream_configs import build, narrow, upstream_config
from tools.tiny_backbones import ARCHS, NAMES, build_tiny, tiny_backbone

def test_parse_out_indices_forms_and_errors():
    assert parse_out_indices(2, 4) == (2, )
    assert parse_out_indices([3, 1], 4) == (1, 3)
    assert parse_out_indices((-1, 0), 4) == (0, 3)
    assert parse_out_indices((2, 5, 8, 11), 12) == (2, 5, 8, 11)
    with pytest.raises(ValueError, match=r'4 outputs, use 0..3 \(or -4..-1'):
        parse_out_indices((0, 4), 4)
    with pytest.raises(ValueError, match='twice'):
        parse_out_indices((1, -3), 4)
    with pytest.raises(ValueError, match='empty'):
        parse_out_indices((), 4)
    with pytest.raises(TypeError, match='int or a sequence'):
        parse_out_indices('last', 4)


@pytest.mark.parametrize('name', NAMES)
def test_out_indices_forms(name):
    full = build_tiny(name, out_indices=(0, 1, 2, 3)).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        ref = full(x)
    for given, expect in ((-1, (3, )), (1, (1, )), ([2, 0], (0, 2)),
                          ((-3, -1), (1, 3))):
        model = build_tiny(name, out_indices=given).eval()
        own = model.state_dict().keys()
        model.load_state_dict({k: v for k, v in full.state_dict().items()
                               if k in own})
        assert model.out_indices == expect
        with torch.no_grad():
            outs = model(x)
        assert len(outs) == len(expect)
        for out, i in zip(outs, expect):
            torch.testing.assert_close(out, ref[i])


@pytest.mark.parametrize('name', NAMES)
def test_modules_after_last_output_not_run_nor_trained(name):
    model = build_tiny(name, out_indices=(0, 1)).train()
    tail = model.unused_parts()
    assert tail and all(not p.requires_grad for m in tail for p in m.parameters())
    sum(o.square().mean() for o in model(torch.randn(2, 3, 64, 64))).backward()
    for key, p in model.named_parameters():
        assert (p.grad is not None) == p.requires_grad, key
    # kept in the state dict: checkpoints of the full model load as they are
    full = build_tiny(name)
    assert model.state_dict().keys() == full.state_dict().keys() - {
        k for k in full.state_dict() if k.startswith(('norm2.', 'norm3.'))}
    model.train()  # train() keeps the tail frozen
    assert all(not p.requires_grad for m in tail for p in m.parameters())


def _save_backbone(name, path):
    src = build_tiny(name)
    torch.save({'state_dict': {f'backbone.{k}': v
                               for k, v in src.state_dict().items()}}, path)
    return src.state_dict()


@pytest.mark.parametrize('name', NAMES)
def test_init_cfg_list_applies_pretrained_last(name, tmp_path):
    path = tmp_path / 'backbone.pth'
    saved = _save_backbone(name, path)
    model = build_tiny(name, init_cfg=[
        dict(type='Pretrained', checkpoint=str(path)),
        dict(type='Constant', layer='Linear', val=0.5, bias=0.)])
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, saved[key], msg=key)
    # a layer the checkpoint lacks keeps the other initialiser's values
    linear = next(k for k, m in model.named_modules()
                  if isinstance(m, torch.nn.Linear))
    partial = tmp_path / 'partial.pth'
    torch.save({k: v for k, v in saved.items()
                if not k.startswith(linear + '.')}, partial)
    model = build_tiny(name, init_cfg=[
        dict(type='Constant', layer='Linear', val=0.5, bias=0.),
        dict(type='Pretrained', checkpoint=str(partial))])
    assert torch.all(model.get_submodule(linear).weight == 0.5)
    key = next(k for k in saved if not k.startswith(linear + '.'))
    torch.testing.assert_close(model.state_dict()[key], saved[key])


def _seg_model(name, **model_kw):
    cfg = upstream_config('mmseg', 'upernet/upernet_r50_4xb4-80k_ade20k-512x512.py')
    narrow(cfg.model)
    swap_backbone(cfg, tiny_backbone(name))
    cfg.model.update(model_kw)
    return cfg.model


@pytest.mark.parametrize('name', NAMES)
def test_mmseg_model_level_pretrained_loads_our_weights(name, tmp_path):
    path = tmp_path / 'backbone.pth'
    saved = _save_backbone(name, path)
    with pytest.warns(UserWarning, match='pretrained is deprecated'):
        model = build('mmseg', _seg_model(name, pretrained=str(path)))
    model.init_weights()
    for key, value in model.backbone.state_dict().items():
        torch.testing.assert_close(value, saved[key], msg=key)


def test_pretrained_and_init_cfg_together_refused(tmp_path):
    cfg = _seg_model('SoLAVision', pretrained='a.pth')
    cfg.backbone.init_cfg = dict(type='Pretrained', checkpoint='b.pth')
    with pytest.raises(ValueError, match='init_cfg and pretrained cannot'):
        build('mmseg', cfg)
    with pytest.raises(TypeError, match='pretrained must be a str'):
        build_tiny('InfViT', pretrained=dict(checkpoint='a.pth'))


def test_swap_backbone_channels_and_leftovers():
    cfg = upstream_config('mmdet', 'retinanet/retinanet_r50_fpn_1x_coco.py')
    cfg.model.init_cfg = dict(type='Pretrained', checkpoint='whole-model.pth')
    swap_backbone(cfg, tiny_backbone('SwinELFATT'), pretrained='ours.pth')
    neck, backbone = cfg.model.neck, cfg.model.backbone
    # RetinaNet's FPN skips stage 0: the backbone does not return it
    assert backbone.out_indices == (1, 2, 3)
    assert neck.in_channels == [32, 64, 128] and neck.start_level == 0
    assert neck.num_outs == 5
    assert backbone.init_cfg == dict(type='Pretrained', checkpoint='ours.pth')
    assert 'init_cfg' not in cfg.model

    cfg = upstream_config('mmseg', 'pspnet/pspnet_r50-d8_4xb4-80k_ade20k-512x512.py')
    swap_backbone(cfg, tiny_backbone('SoLAVision'))
    model = cfg.model
    assert 'pretrained' not in model
    assert model.backbone.out_indices == (2, 3)
    assert (model.decode_head.in_index, model.decode_head.in_channels) == (1, 32)
    assert (model.auxiliary_head.in_index,
            model.auxiliary_head.in_channels) == (0, 32)

    # a plain backbone returning one map is given ViTDet's pyramid
    cfg = upstream_config('mmdet', 'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py')
    swap_backbone(cfg, tiny_backbone('InfViT', out_indices=-1))
    assert cfg.model.neck.type == 'mmhybrid.SimpleFeaturePyramid'
    assert cfg.model.neck.scales == (4., 2., 1., .5)

    cfg = Config(dict(model=upstream_config(
        'mmseg', 'upernet/upernet_r50_4xb4-80k_ade20k-512x512.py').model,
        default_scope='mmseg'))
    with pytest.raises(ValueError, match='set its out_indices to name 4'):
        swap_backbone(cfg, tiny_backbone('SoLAVision', out_indices=(2, 3)))


@pytest.mark.parametrize('depth,expected', [(4, (0, 1, 2, 3)), (12, (2, 5, 8, 11))])
def test_swap_backbone_spreads_plain_outputs_over_the_depth(depth, expected):
    """InfViT (its own out_indices: the last layer) in mmseg's ViT + MultiLevelNeck
    recipe, which reads 4 maps: 4 layers spread as mmseg's ViT-B's (2, 5, 8, 11)."""
    cfg = upstream_config('mmseg',
                          'vit/vit_vit-b16_mln_upernet_8xb2-80k_ade20k-512x512.py')
    infvit = tiny_backbone('InfViT', arch=dict(ARCHS['InfViT'], depth=depth,
                                               attn_types='L'))
    del infvit['out_indices']
    swap_backbone(cfg, infvit)
    assert cfg.model.backbone.out_indices == expected
    assert cfg.model.neck.in_channels == [32] * 4
