"""``tools/deploy/export.py`` loaded as a module (tools/deploy is not a package, put on
``sys.path`` here) and the tiny UPerNet the deploy tests export."""
import importlib.util
import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[1] / 'tools' / 'deploy'
sys.path.insert(0, str(DEPLOY))  # its siblings: cases, checks


def load_export_tool():
    spec = importlib.util.spec_from_file_location('_deploy_export', DEPLOY / 'export.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_upernet(name):
    """A real mmseg UPerNet (16 channels, 5 classes, BN) on the tiny backbone
    ``name`` of tools/deploy/cases.py."""
    import torch
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    from cases import CASES, build_case
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
