_base_ = ['./_base_/mask-rcnn_infinitevl_fpn_1x_coco.py']

model = dict(
    backbone=dict(arch='b', drop_path_rate=0.3),
    neck=dict(in_channels=[128, 256, 512, 1024]))
