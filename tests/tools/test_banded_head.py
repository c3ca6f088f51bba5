"""tools/deploy/banded_head.py: the UPerHead tail in bands of rows against mmseg's own
whole-image inference (``EncoderDecoder.inference``), on a real mmseg UPerNet."""
import pytest
import torch
import torch.nn.functional as F
from mmengine.config import ConfigDict

from tools.deploy.banded_head import banded_logits, banded_predict, resize_rows
from tools.deploy.cases import tiny_upernet


@pytest.mark.parametrize('align_corners', [False, True])
@pytest.mark.parametrize('src, dst', [((5, 7), (19, 23)), ((16, 9), (64, 36)),
                                      ((30, 20), (11, 8)), ((1, 3), (4, 6))])
def test_resize_rows_are_rows_of_interpolate(src, dst, align_corners):
    torch.manual_seed(0)
    x = torch.randn(2, 3, *src, dtype=torch.float64)
    whole = F.interpolate(x, size=dst, mode='bilinear', align_corners=align_corners)
    for first, last in ((0, dst[0]), (1, 3), (dst[0] - 2, dst[0])):
        torch.testing.assert_close(
            resize_rows(x, dst, first, last, align_corners), whole[:, :, first:last],
            rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('align_corners', [False, True])
@pytest.mark.parametrize('hw, band_rows', [((75, 101), 7), ((64, 96), 16),
                                           ((64, 96), 64)])
def test_bands_match_mmseg_whole_inference(hw, band_rows, align_corners):
    torch.manual_seed(0)
    model = tiny_upernet('infinitevl').eval()
    model.decode_head.align_corners = align_corners
    for m in model.modules():  # non-trivial BN statistics
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2)
    model.test_cfg = ConfigDict(mode='whole')
    x = torch.randn(2, 3, *hw)
    meta = dict(img_shape=hw, ori_shape=hw, pad_shape=hw, padding_size=[0] * 4)
    with torch.no_grad():
        ref = model.inference(x, [meta] * 2)
        bands = list(banded_logits(model, x, band_rows))
        labels = banded_predict(model, x, band_rows)
    assert [b[:2] for b in bands] == [(i, min(i + band_rows, hw[0]))
                                      for i in range(0, hw[0], band_rows)]
    logits = torch.cat([b[2] for b in bands], dim=2)
    torch.testing.assert_close(logits, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(labels, logits.argmax(1), rtol=0, atol=0)


def test_refuses_other_heads():
    model = tiny_upernet('infinitevl')
    model.decode_head = torch.nn.Identity()
    with pytest.raises(ValueError, match='UPerHead'):
        next(banded_logits(model, torch.randn(1, 3, 64, 64)))
