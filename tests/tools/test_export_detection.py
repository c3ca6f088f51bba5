"""Mask R-CNN's first stage through ONNX with dynamic H/W: our SoLA Mask R-CNN
config (backbone swapped for the tiny SoLA of tools/deploy/cases.py, FPN and RPN
as configured) from images to the FPN maps and the RPN's raw scores and box deltas,
checked in onnxruntime against eager at three sizes other than the export size."""
from pathlib import Path

import pytest
import torch

from tests._deploy_tool import load_export_tool

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / 'configs/sola/mask-rcnn_sola-t_fpn_1x_coco.py'
pytest.importorskip('onnxruntime')


def test_mask_rcnn_rpn_dynamic_onnx(tmp_path, capsys):
    export = load_export_tool()
    from cases import CASES
    backbone = dict(CASES['sola-min'], _delete_=True)
    model = export.build(str(CONFIG), part='detector', cfg_options={
        'model.backbone': backbone, 'model.neck.in_channels': [16, 16, 32, 32],
        'model.neck.out_channels': 16, 'model.rpn_head.in_channels': 16,
        'model.rpn_head.feat_channels': 16})
    assert 'RoI stage' in capsys.readouterr().out
    assert type(model.detector).__name__ == 'MaskRCNN'
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 96, 128))
    assert len(outs) == 5 + 2 * 5  # five FPN levels, scores and deltas per level
    ok, lines = export.export_and_check(model, (96, 128), str(tmp_path / 'm.onnx'))
    assert ok, '\n'.join(lines)


def test_detector_part_needs_a_two_stage_detector():
    with pytest.raises(SystemExit, match='two-stage'):
        load_export_tool().build(str(ROOT / 'configs/sola/upernet_sola-t_ade20k.py'),
                      part='detector')
