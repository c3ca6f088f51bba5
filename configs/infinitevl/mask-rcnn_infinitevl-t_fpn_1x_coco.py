_base_ = ['./_base_/mask-rcnn_infinitevl_fpn_1x_coco.py']

model = dict(
    backbone=dict(arch='t', drop_path_rate=0.1),
    neck=dict(in_channels=[96, 128, 192, 256]))
