"""Two-stage detectors as one graph (tools/deploy/detector_graph.py): our SoLA Mask
R-CNN config with the tiny SoLA of tools/deploy/cases.py and narrow heads.

The graph in eager PyTorch is checked against mmdet's own ``predict`` (boxes, scores,
labels, each box's mask probabilities) at several sizes and batch sizes, with and
without a mask head, with detections and with none; the ONNX file against the graph
in onnxruntime at sizes and batch sizes other than the export's."""
from pathlib import Path

import pytest
import torch

from tools.deploy import export
from tools.deploy.cases import MASK_RCNN, mask_rcnn_detections, narrow_mask_rcnn
from tools.deploy.exportable import build

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip('onnxruntime')


@pytest.mark.parametrize('mask, nms_pre', [(True, 1000), (False, 1000), (True, 40),
                                           (True, -1)])
def test_graph_equals_mmdet_predict(mask, nms_pre):
    from tools.deploy.detector_graph import matched_error, mmdet_detections
    graph = mask_rcnn_detections(0, mask=mask, nms_pre=nms_pre)
    assert graph.detector.roi_head.with_mask == mask
    for batch, shape in [(2, (96, 128)), (1, (130, 97)), (3, (64, 192))]:
        x = torch.randn(batch, 3, *shape, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            ours, ref = graph(x), mmdet_detections(graph.detector, x)
        assert len(ours) == (3 if mask else 2)
        assert (ref[1] >= 0).sum() > 20 * batch  # boxes kept in every image
        assert matched_error(ours, ref) < 1e-6, (batch, shape)


def test_graph_without_detections():
    from tools.deploy.detector_graph import mmdet_detections
    graph = mask_rcnn_detections(0, score_thr=0.99)
    x = torch.randn(2, 3, 96, 128)
    with torch.no_grad():
        dets, labels, masks = graph(x)
        ref = mmdet_detections(graph.detector, x)
    assert (ref[1] == -1).all() and (labels == -1).all()
    assert not dets.any() and not masks.any()


def test_matched_error_pairs_swapped_detections():
    from tools.deploy.detector_graph import matched_error
    gen = torch.Generator().manual_seed(0)
    dets, labels = torch.rand(2, 5, 5, generator=gen) * 50, torch.randint(
        0, 3, (2, 5), generator=gen)
    masks = torch.rand(2, 5, 4, 4, generator=gen)
    swap = torch.tensor([1, 0, 2, 3, 4])
    swapped = (dets[:, swap], labels[:, swap], masks[:, swap])
    assert matched_error(swapped, (dets, labels, masks)) == 0
    moved = dets.clone()
    moved[1, 3, 0] += 1.
    assert matched_error((moved, labels, masks), (dets, labels, masks)) > 1e-3
    duplicate = tuple(t.clone() for t in (dets, labels, masks))
    for t in duplicate:  # detection 1 twice, detection 0 missing
        t[0, 0] = t[0, 1]
    assert matched_error(duplicate, (dets, labels, masks)) > 1e-3
    masks_of_other = masks.clone()
    masks_of_other[0, 2] = masks[0, 4]
    assert matched_error((dets, labels, masks_of_other), (dets, labels, masks)) > 1e-3


def test_mask_rcnn_dynamic_onnx(tmp_path):
    graph = mask_rcnn_detections(seed=1)
    ok, lines = export.export_and_check(graph, (96, 128), str(tmp_path / 'm.onnx'))
    assert ok, '\n'.join(lines)
    path = export.export_onnx(graph, torch.randn(2, 3, 96, 128), str(tmp_path / 'm.onnx'))
    import onnx
    outputs = {o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
               for o in onnx.load(path).graph.output}
    assert outputs == {'dets': ['batch', 100, 5], 'labels': ['batch', 100],
                       'masks': ['batch', 100, 28, 28]}  # mmdeploy's names
    run = export.onnx_runner(path)
    for batch, shape in [(1, (160, 96)), (3, (128, 160))]:
        x = torch.randn(batch, 3, *shape, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            ref = graph(x)
        assert (ref[1] >= 0).sum() > 20 * batch
        assert graph.parity_error(run(x), ref) < 1e-4, (batch, shape)


def test_detector_part_refusals(tmp_path):
    with pytest.raises(SystemExit, match='RPN head'):
        build(str(ROOT / 'configs/sola/upernet_sola-t_ade20k.py'), part='detector')
    cascade = 'mmdet::cascade_rcnn/cascade-mask-rcnn_r50_fpn_1x_coco.py'
    with pytest.raises(SystemExit, match='cascade'):
        build(cascade, part='detector')
    with pytest.raises(SystemExit, match='max_per_img'):
        build(str(MASK_RCNN), part='detector', cfg_options={
            **narrow_mask_rcnn(), 'model.test_cfg.rcnn.max_per_img': -1})
    graph = mask_rcnn_detections()
    for fmt, exporter, why in (('torch-export', 'torchscript', 'nms_pre'),
                               ('onnx', 'dynamo', 'NMS')):
        ok, lines = export.export_and_check(graph, (96, 128), str(tmp_path / 'm'),
                                            fmt, exporter)
        assert not ok and lines[0].startswith('refused: ') and why in lines[0]
        assert not (tmp_path / 'm').exists()
