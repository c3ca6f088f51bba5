"""A two-stage mmdet detector (Faster / Mask R-CNN) as one exportable graph.

:class:`TwoStageDetections` runs what ``detector.predict(rescale=False)`` runs, as
tensor operations that trace with dynamic batch, height and width, and returns
what mmdeploy's detectors return, per image padded to ``K = test_cfg.rcnn.max_per_img``:

- ``dets`` (B, K, 5): boxes x1, y1, x2, y2 in input pixels and the score (0 where
  padded; a kept score is above ``score_thr >= 0``),
- ``labels`` (B, K): class indices, -1 where padded,
- ``masks`` (B, K, M, M) (mask heads only): each box's mask probabilities on the mask
  head's M x M grid (the paste into the image, ``mask_head.predict_by_feat``, stays
  outside the graph, as in mmdeploy).

The steps follow mmdet 3.x: per level the RPN's ``nms_pre`` best anchors by sigmoid
score, box deltas decoded (``DeltaXYWHBBoxCoder``) and clipped to the image, boxes no
larger than ``min_bbox_size`` dropped, NMS per level, the ``max_per_img`` best
proposals; RoIAlign of each proposal on the level of its scale (``SingleRoIExtractor``:
``floor(log2(sqrt(w h) / finest_scale + 1e-6))``), the box head, softmax, class-wise
decoding, scores above ``score_thr``, NMS per class and the ``max_per_img`` best; the
mask head on the kept boxes, each box's own class channel, sigmoid.

Every image of the batch is handled at once: NMS groups are (image, level) or
(image, class), separated as mmcv's ``batched_nms`` separates groups, by offsetting
each group's boxes beyond the others'; NMS is torchvision's (ONNX
``NonMaxSuppression``), RoIAlign torchvision's (ONNX ``RoiAlign``, opset >= 16, the
same sampling as mmcv's ``RoIAlign``). The number of boxes after each filter depends
on the values; ONNX carries such shapes. :func:`mmdet_detections` runs mmdet's own
``predict`` into the same layout, to check against.
"""
import math

import torch
import torch.nn as nn
from torchvision.ops import nms, roi_align


def decode_deltas(anchors, deltas, coder, image_hw):
    """mmdet's ``delta2bbox`` for (..., 4) anchors and deltas: centres move by
    ``d_xy * wh``, sizes scale by ``exp(d_wh)`` (clamped to ``|log(16/1000)|``,
    the ``wh_ratio_clip`` both heads decode with),
    after de-normalising with the coder's means and stds; clipped to the image."""
    means, stds = (deltas.new_tensor(v) for v in (coder.means, coder.stds))
    deltas = deltas * stds + means
    max_ratio = abs(math.log(16 / 1000))
    wh = anchors[..., 2:] - anchors[..., :2]
    centre = (anchors[..., :2] + anchors[..., 2:]) * 0.5 + wh * deltas[..., :2]
    half = wh * deltas[..., 2:].clamp(-max_ratio, max_ratio).exp() * 0.5
    boxes = torch.cat([centre - half, centre + half], -1)
    if not coder.clip_border:
        return boxes
    upper = image_hw.flip(0).repeat(2).to(boxes)  # W, H, W, H (dtype and device)
    return torch.minimum(boxes.clamp_min(0), upper)


def grouped_nms(boxes, scores, groups, iou_threshold):
    """Indices of the boxes NMS keeps within each group, best score first (mmcv's
    ``batched_nms``: groups offset by ``group * (max coordinate + 1)``)."""
    top = torch.cat([boxes.flatten(), boxes.new_zeros(1)]).max()
    offsets = groups.to(boxes.dtype) * (top + 1)
    return nms(boxes + offsets[:, None], scores, iou_threshold)


def rank_in_image(images, batch):
    """For entries listed best first, each one's rank within its image."""
    member = images[:, None] == torch.arange(batch, device=images.device)[None, :]
    return (member.long().cumsum(0) - 1).gather(1, images[:, None])[:, 0]


def matched_error(outs, refs):
    """Relative error (max |diff| / max |ref| per output, as
    ``export.relative_error``) after pairing each image's detections with the other
    side's, both ways: each with the nearest one of the same label (max coordinate
    or score difference). Detections of equal score up to rounding can come in
    either order; one without a close partner on the other side still counts."""
    if len(outs) != len(refs) or any(o.shape != r.shape for o, r in zip(outs, refs)):
        raise RuntimeError(f'outputs {[tuple(o.shape) for o in outs]}, reference '
                           f'{[tuple(r.shape) for r in refs]}')
    outs, refs = [o.float() for o in outs], [r.float() for r in refs]
    err = 0.
    for a, b in ((outs, refs), (refs, outs)):
        distance = (a[0][:, :, None] - b[0][:, None]).abs().amax(-1)
        distance[a[1][:, :, None] != b[1][:, None]] = float('inf')
        pair = distance.argmin(-1)  # (B, K): b's slot for each of a's detections
        for x, y, ref in zip(a, b, refs):
            y = y.gather(1, pair.view(*pair.shape, *[1] * (y.dim() - 2)).expand_as(y))
            err = max(err, ((x - y).abs().max() / ref.abs().max().clamp_min(1e-12)).item())
    return err


def refusals(detector):
    """What :class:`TwoStageDetections` needs and ``detector`` lacks."""
    rpn, roi = (getattr(detector, name, None) for name in ('rpn_head', 'roi_head'))
    if rpn is None or type(roi).__name__ != 'StandardRoIHead':
        return ['an RPN head and a StandardRoIHead (no cascade)']
    extractors = [e for e in (roi.bbox_roi_extractor,
                              getattr(roi, 'mask_roi_extractor', None)) if e]
    needs = {
        'DeltaXYWHBBoxCoder without centre clamps': all(
            type(c).__name__ == 'DeltaXYWHBBoxCoder' and not c.add_ctr_clamp
            for c in (rpn.bbox_coder, roi.bbox_head.bbox_coder)),
        'a sigmoid RPN': rpn.use_sigmoid_cls,
        'a positive test_cfg.rcnn.max_per_img (the padded size)':
            detector.test_cfg.rcnn.get('max_per_img', 0) > 0,
        'plain NMS': all(cfg.nms.get('type', 'nms') == 'nms'
                         for cfg in (detector.test_cfg.rpn, detector.test_cfg.rcnn)),
        'class-wise box regression and a softmax classifier': not (
            roi.bbox_head.reg_class_agnostic or roi.bbox_head.custom_cls_channels),
        "'avg' RoIAlign and no shared head": not roi.with_shared_head and all(
            getattr(layer, 'pool_mode', 'avg') == 'avg'
            for e in extractors for layer in e.roi_layers)}
    return [need for need, met in needs.items() if not met]


class TwoStageDetections(nn.Module):
    """Images (B, 3, H, W) -> ``(dets, labels[, masks])`` of a two-stage mmdet
    detector (see the module docstring). Exported graphs are checked with
    :func:`matched_error` (``parity_error``)."""

    parity_error = staticmethod(matched_error)
    output_names = ('dets', 'labels', 'masks')  # mmdeploy's names
    # an inference graph: NMS and top-k choose boxes, nothing to train through
    differentiable = False
    # routes tools/deploy/export.py refuses, and why
    unsupported_exports = {
        'torch-export': 'it guards min(anchors, nms_pre) at the export size',
        'dynamo': "it has no ONNX translation of torchvision's NMS"}

    def __init__(self, detector):
        super().__init__()
        self.detector = detector
        reasons = refusals(detector)
        if reasons:
            raise ValueError('the detector graph needs ' + '; '.join(reasons))

    def forward(self, x):
        det = self.detector
        feats = det.extract_feat(x)
        image_hw = (torch.onnx.operators.shape_as_tensor(x)[2:] if torch.jit.is_tracing()
                    else torch.tensor(x.shape[2:]))  # a traced size, not a constant
        batch = x.shape[0]
        rois = self.proposals(feats, image_hw, batch)
        dets, labels, kept = self.boxes(feats, rois, image_hw, batch)
        if not det.roi_head.with_mask:
            return dets, labels
        return dets, labels, self.masks(feats, *kept, batch)

    def proposals(self, feats, image_hw, batch):
        """The RPN's proposals as RoIs (n, 5): image index, x1, y1, x2, y2."""
        head, cfg = self.detector.rpn_head, self.detector.test_cfg.rpn
        scores, deltas = head(feats)
        anchors = head.prior_generator.grid_priors(
            [s.shape[-2:] for s in scores], dtype=feats[0].dtype, device=feats[0].device)
        level_scores, level_boxes, levels = [], [], []
        for level, (score, delta, anchor) in enumerate(zip(scores, deltas, anchors)):
            score = score.permute(0, 2, 3, 1).reshape(batch, -1).sigmoid()
            delta = delta.permute(0, 2, 3, 1).reshape(batch, -1, 4)
            score, order = score.sort(1, descending=True)
            if cfg.get('nms_pre', -1) > 0:
                score, order = score[:, :cfg.nms_pre], order[:, :cfg.nms_pre]
            delta = delta.gather(1, order[..., None].expand(-1, -1, 4))
            level_boxes.append(decode_deltas(anchor[order], delta, head.bbox_coder,
                                             image_hw))
            level_scores.append(score)
            levels.append(torch.full_like(order[0], level))
        boxes = torch.cat(level_boxes, 1).flatten(0, 1)
        scores = torch.cat(level_scores, 1).flatten()
        levels = torch.cat(levels)
        images = torch.arange(batch, device=boxes.device)[:, None].expand(
            -1, levels.shape[0]).flatten()
        groups = images * len(feats) + levels.repeat(batch)
        if cfg.get('min_bbox_size', -1) >= 0:
            wh = boxes[:, 2:] - boxes[:, :2]
            valid = ((wh > cfg.min_bbox_size).all(1)).nonzero()[:, 0]
            boxes, scores, groups, images = (t[valid] for t in (boxes, scores, groups,
                                                                images))
        keep = grouped_nms(boxes, scores, groups, cfg.nms.iou_threshold)
        keep = keep[rank_in_image(images[keep], batch) < cfg.max_per_img]
        return torch.cat([images[keep, None].to(boxes.dtype), boxes[keep]], 1)

    def roi_features(self, extractor, feats, rois):
        """``SingleRoIExtractor``: each RoI aligned on the level of its scale.
        Returns the features of the RoIs grouped by level, and their order (the
        RoIs' indices): one concatenation instead of a scatter per level."""
        feats = feats[:extractor.num_inputs]
        scale = ((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2])).sqrt()
        level = (scale / extractor.finest_scale + 1e-6).log2().floor()
        level = level.clamp(0, len(feats) - 1).long()
        order = [(level == i).nonzero()[:, 0] for i in range(len(feats))]
        return torch.cat([
            roi_align(feat, rois[inds], layer.output_size, layer.spatial_scale,
                      layer.sampling_ratio, layer.aligned)
            for feat, layer, inds in zip(feats, extractor.roi_layers, order)]), \
            torch.cat(order)

    def boxes(self, feats, rois, image_hw, batch):
        """Detections padded to (B, K, 5) and (B, K); and the kept boxes as RoIs,
        their labels and their slots in the padded (B K) layout."""
        roi_head, cfg = self.detector.roi_head, self.detector.test_cfg.rcnn
        head = roi_head.bbox_head
        roi_feats, order = self.roi_features(roi_head.bbox_roi_extractor, feats, rois)
        rois = rois[order]
        cls_score, deltas = head(roi_feats)
        scores = cls_score.softmax(-1)[:, :-1]
        boxes = decode_deltas(rois[:, None, 1:], deltas.view(rois.shape[0], -1, 4),
                              head.bbox_coder, image_hw)
        roi_index, labels = (scores > cfg.score_thr).nonzero().unbind(1)
        boxes, scores = boxes[roi_index, labels], scores[roi_index, labels]
        images = rois[roi_index, 0].long()
        keep = grouped_nms(boxes, scores, images * head.num_classes + labels,
                           cfg.nms.iou_threshold)
        rank = rank_in_image(images[keep], batch)
        kept = rank < cfg.max_per_img
        keep, rank = keep[kept], rank[kept]
        slots = images[keep] * cfg.max_per_img + rank
        dets = torch.cat([boxes[keep], scores[keep, None]], 1)
        out_dets = dets.new_zeros(batch * cfg.max_per_img, 5).index_put((slots, ), dets)
        out_labels = torch.full_like(out_dets[:, 0], -1, dtype=torch.long).index_put(
            (slots, ), labels[keep])
        kept_rois = torch.cat([rois[roi_index[keep], :1], boxes[keep]], 1)
        return (out_dets.view(batch, cfg.max_per_img, 5),
                out_labels.view(batch, cfg.max_per_img),
                (kept_rois, labels[keep], slots))

    def masks(self, feats, rois, labels, slots, batch):
        """Each kept box's mask probabilities (its own class), padded to (B, K, M, M)."""
        roi_head, K = self.detector.roi_head, self.detector.test_cfg.rcnn.max_per_img
        roi_feats, order = self.roi_features(roi_head.mask_roi_extractor, feats, rois)
        logits = roi_head.mask_head(roi_feats)
        labels, slots = labels[order], slots[order]
        probs = logits[torch.arange(labels.shape[0], device=labels.device),
                       labels].sigmoid()
        out = probs.new_zeros(batch * K, *probs.shape[1:]).index_put((slots, ), probs)
        return out.view(batch, K, *probs.shape[1:])


def mmdet_detections(detector, x):
    """mmdet's own ``detector.predict(x, rescale=False)`` in the layout of
    :class:`TwoStageDetections` (masks: the mask head's grid, each box's class,
    sigmoid, from ``roi_head`` on mmdet's own boxes)."""
    from mmdet.structures import DetDataSample
    from mmdet.structures.bbox import bbox2roi
    B, _, H, W = x.shape
    samples = [DetDataSample(metainfo=dict(img_shape=(H, W), ori_shape=(H, W),
                                           batch_input_shape=(H, W),
                                           scale_factor=(1., 1.)))
               for _ in range(B)]
    K = detector.test_cfg.rcnn.max_per_img
    feats = detector.extract_feat(x)
    proposals = detector.rpn_head.predict(feats, samples, rescale=False)
    metas = [s.metainfo for s in samples]
    results = detector.roi_head.predict_bbox(feats, metas, proposals,
                                             detector.test_cfg.rcnn, rescale=False)
    dets = x.new_zeros(B, K, 5)
    labels = torch.full((B, K), -1, dtype=torch.long)
    for b, res in enumerate(results):
        n = len(res.scores)
        dets[b, :n] = torch.cat([res.bboxes, res.scores[:, None]], 1)
        labels[b, :n] = res.labels
    if not detector.roi_head.with_mask:
        return dets, labels
    rois = bbox2roi([res.bboxes for res in results])
    logits = detector.roi_head._mask_forward(feats, rois)['mask_preds']
    masks = x.new_zeros(B, K, *logits.shape[-2:])
    for b, (res, logit) in enumerate(zip(results, logits.split(
            [len(res.labels) for res in results]))):
        masks[b, :len(logit)] = logit[torch.arange(len(logit)), res.labels].sigmoid()
    return dets, labels, masks
