# Mask R-CNN + Pure InfViT-24L (the paper's 24-layer model), the local path
# on, simple feature pyramid from the last map
_base_ = ['./_base_/mask-rcnn_infvit_coco.py']

model = dict(
    backbone=dict(arch='pure-24l', drop_path_rate=0.2),
    neck=dict(in_channels=1024))
