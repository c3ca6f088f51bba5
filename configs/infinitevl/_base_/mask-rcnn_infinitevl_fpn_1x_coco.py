# Mask R-CNN + InfiniteVL-style backbone on COCO 2017, 1x, with SoLA-Vision's
# recipe (Sec. 5.2). Variants set arch, drop path and the neck in_channels.
# Fine-tune from your ImageNet-1K weights with --cfg-options
# model.backbone.init_cfg.type=Pretrained model.backbone.init_cfg.checkpoint=...
_base_ = ['../../sola/_base_/mask-rcnn_sola_fpn_1x_coco.py']

model = dict(backbone=dict(type='mmhybrid.InfiniteVLVision', window_size=7))
