# Mask R-CNN + FPN on COCO 2017, 1x (ELFATT Table 3: the VMamba/Swin recipe,
# AdamW lr 1e-4, wd 0.05, 16 images per iteration). Variants set the backbone
# class, arch, attention plan, drop path and the neck in_channels. Fine-tune
# from ImageNet-1K weights with --cfg-options model.backbone.init_cfg.type=Pretrained
# model.backbone.init_cfg.checkpoint=<checkpoint>
_base_ = ['../../_base_/recipes/mask-rcnn_fpn_coco_1x.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.CSWin',
        arch='t',
        attn='elfatt',
        # 14x14 windows in stages 1-3: the block sizes that reproduce the
        # attention FLOPs of Tables 2-3 (docs/design.md, "ELFATT")
        block_sizes=(196, 196, 196, 49),
        out_indices=(0, 1, 2, 3),
        with_cp=False))

optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={'relative_position_bias_table': dict(decay_mult=0.)}))
