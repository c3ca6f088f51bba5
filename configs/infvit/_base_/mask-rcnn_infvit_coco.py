# Mask R-CNN + InfViT on COCO 2017 (shared 1x recipe). The last stride-16 map feeds
# a ViTDet-style simple feature pyramid (strides 4-32, plus 64 by subsampling for
# the RPN). The local path (a 3x3 depth-wise conv of V per layer) is on, as in
# the UPerNet configs. Variants set arch and the pyramid's in_channels. Fine-tune
# from ImageNet-1K weights with --cfg-options model.backbone.init_cfg.type=Pretrained
# model.backbone.init_cfg.checkpoint=<checkpoint>
_base_ = ['../../_base_/recipes/mask-rcnn_fpn_coco_1x.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.InfViT',
        img_size=224,
        patch_size=16,
        out_indices=(-1, ),
        local_path='lepe',
        drop_path_rate=0.1,
        with_cp=False),
    neck=dict(
        _delete_=True,
        type='mmhybrid.SimpleFeaturePyramid',
        out_channels=256,
        scales=(4.0, 2.0, 1.0, 0.5),
        num_outs=5))
