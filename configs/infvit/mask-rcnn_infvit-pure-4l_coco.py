# Mask R-CNN + Pure InfViT-4L (the paper's 4-layer model), the local path on,
# simple feature pyramid from the last map
_base_ = ['./_base_/mask-rcnn_infvit_coco.py']

model = dict(backbone=dict(arch='pure-4l'), neck=dict(in_channels=1024))
