# Mask R-CNN + Linear InfViT-B (12 layers, ViT-B width), simple feature pyramid
_base_ = ['./_base_/mask-rcnn_infvit_coco.py']

model = dict(backbone=dict(arch='linear-b'), neck=dict(in_channels=768))
