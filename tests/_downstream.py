"""Small mmseg / mmdet / mmpretrain models around a backbone, for registry tests."""


def downstream_model_cfg(scope, backbone, in_channels):
    """A tiny real model of ``scope`` with ``backbone`` (per-stage ``in_channels``)."""
    if scope == 'mmseg':
        return dict(
            type='EncoderDecoder', backbone=backbone,
            data_preprocessor=dict(type='SegDataPreProcessor', size=(64, 64)),
            decode_head=dict(type='UPerHead', in_channels=list(in_channels),
                             in_index=list(range(len(in_channels))),
                             channels=16, num_classes=5, pool_scales=(1, 2)))
    if scope == 'mmdet':
        return dict(
            type='RetinaNet', backbone=backbone,
            data_preprocessor=dict(type='DetDataPreprocessor'),
            neck=dict(type='FPN', in_channels=list(in_channels),
                      out_channels=16, num_outs=5),
            bbox_head=dict(
                type='RetinaHead', num_classes=3, in_channels=16,
                feat_channels=16,
                anchor_generator=dict(
                    type='AnchorGenerator', octave_base_scale=4,
                    scales_per_octave=3, ratios=[0.5, 1.0, 2.0],
                    strides=[8, 16, 32, 64, 128]),
                bbox_coder=dict(type='DeltaXYWHBBoxCoder'),
                loss_cls=dict(type='FocalLoss', use_sigmoid=True),
                loss_bbox=dict(type='L1Loss')))
    if scope == 'mmpretrain':
        return dict(
            type='ImageClassifier', backbone=backbone,
            neck=dict(type='GlobalAveragePooling'),
            head=dict(type='LinearClsHead', num_classes=10,
                      in_channels=in_channels[-1]))
    raise KeyError(scope)
