# Mask R-CNN + SoLA-Vision on COCO 2017, 1x (paper Sec. 5.2, Table 4), without
# the Hidden State Bridge as in the paper (Supplement 8.1). Variants set arch,
# drop path and the neck in_channels. Fine-tune from your ImageNet-1K
# weights with --cfg-options model.backbone.init_cfg.type=Pretrained
# model.backbone.init_cfg.checkpoint=<in1k checkpoint>
_base_ = ['../../_base_/recipes/mask-rcnn_fpn_coco_1x.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.SoLAVision',
        out_indices=(0, 1, 2, 3),
        with_hsb=False,
        with_cp=False))
