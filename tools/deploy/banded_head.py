"""Whole-image UPerNet inference with the head's full-resolution tail in bands of rows.

mmseg's ``UPerHead`` resizes its four 512-channel FPN maps to 1/4 of the image and
concatenates them (8 GiB at a 4096^2 image), and ``EncoderDecoder.inference`` returns
the class logits resized to the image (150 x 4096^2 floats, 9.4 GiB): at 4096^2 a whole
UPerNet does not fit 23.5 GiB, whatever the backbone. :func:`banded_predict` runs the
backbone, the lateral, PPM and FPN convs whole, as mmseg runs them, then the tail
(resize, concatenate, fuse, classify, resize to the image, argmax) for one band of
output rows at a time, writing each band's labels into the label map: what mmseg's
``mode='whole'`` predicts, up to float rounding in the interpolation (each band's
logits against ``inference``'s: tests/tools/test_banded_head.py).

It reads the labels of an image of the input's size (``img_shape == pad_shape``, no
flip, no rescale to another ``ori_shape``) from a segmentor whose decode head is an
mmseg ``UPerHead``.
"""
import torch
import torch.nn.functional as F


def _source_rows(first, last, src_height, height, align_corners):
    """For rows [first, last) of a bilinear resize of ``src_height`` rows to
    ``height``: the two source rows each reads and the second one's weight."""
    y = torch.arange(first, last, dtype=torch.float64)
    if align_corners:
        src = y * ((src_height - 1) / (height - 1)) if height > 1 else y * 0
    else:  # PyTorch's area_pixel_compute_source_index, clamped at 0
        src = ((y + 0.5) * (src_height / height) - 0.5).clamp(min=0)
    y0 = src.floor().long().clamp(max=src_height - 1)
    return y0, (y0 + 1).clamp(max=src_height - 1), src - y0


def resize_rows(x, size, first, last, align_corners=False, src_height=None,
                src_first=0):
    """Rows [first, last) of ``F.interpolate(map, size, mode='bilinear',
    align_corners=align_corners)``, where ``x`` holds rows [src_first, src_first +
    x.shape[-2]) of a map ``src_height`` rows high (default: all of it). The rows
    are interpolated here, the columns by ``F.interpolate`` at an unchanged height
    (which reads each row with weight 1)."""
    src_height = x.shape[-2] if src_height is None else src_height
    y0, y1, weight = _source_rows(first, last, src_height, size[0], align_corners)
    weight = weight.to(x.dtype)[:, None]
    rows = torch.lerp(x[:, :, y0 - src_first], x[:, :, y1 - src_first], weight)
    return F.interpolate(rows, size=(last - first, size[1]), mode='bilinear',
                         align_corners=align_corners)


def fpn_maps(segmentor, image):
    """The backbone and UPerHead up to its FPN outputs, as mmseg computes them."""
    head = segmentor.decode_head
    inputs = head._transform_inputs(segmentor.extract_feat(image))
    laterals = [conv(inputs[i]) for i, conv in enumerate(head.lateral_convs)]
    laterals.append(head.psp_forward(inputs))
    del inputs
    for i in range(len(laterals) - 1, 0, -1):
        laterals[i - 1] = laterals[i - 1] + F.interpolate(
            laterals[i], size=laterals[i - 1].shape[2:], mode='bilinear',
            align_corners=head.align_corners)
    return [conv(x) for conv, x in zip(head.fpn_convs, laterals)] + laterals[-1:]


def banded_logits(segmentor, image, band_rows=256):
    """Yield ``(first, last, logits)``: the class logits of rows [first, last) of
    the image, (B, classes, last - first, W), band after band."""
    head = segmentor.decode_head
    if type(head).__name__ != 'UPerHead':
        raise ValueError(f'banded inference needs an mmseg UPerHead, got '
                         f'{type(head).__name__}')
    ac = head.align_corners
    maps = fpn_maps(segmentor, image)
    fine = maps[0].shape[2:]
    H, W = image.shape[2:]
    for first in range(0, H, band_rows):
        last = min(first + band_rows, H)
        # logit rows the band reads, then the fused rows their 3x3 conv reads
        y0, y1, _ = _source_rows(first, last, fine[0], H, ac)
        lo, hi = int(y0[0]), int(y1[-1]) + 1
        top, bottom = max(lo - 1, 0), min(hi + 1, fine[0])
        cat = torch.cat([maps[0][:, :, top:bottom]] + [
            resize_rows(x, fine, top, bottom, ac) for x in maps[1:]], dim=1)
        fused = head.fpn_bottleneck(cat)[:, :, lo - top:hi - top]
        logits = head.cls_seg(fused)
        yield first, last, resize_rows(logits, (H, W), first, last, ac,
                                       src_height=fine[0], src_first=lo)


@torch.no_grad()
def banded_predict(segmentor, image, band_rows=256):
    """(B, H, W) class labels of ``image`` (B, 3, H, W), see the module docstring."""
    labels = image.new_empty(image.shape[0], *image.shape[2:], dtype=torch.long)
    for first, last, logits in banded_logits(segmentor, image, band_rows):
        labels[:, first:last] = logits.argmax(1)
    return labels
