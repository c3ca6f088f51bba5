# Mask R-CNN + InfiniteVL-style backbone on COCO 2017, 1x, with SoLA-Vision's
# recipe (Sec. 5.2). Variants set arch, drop path and the neck in_channels.
# Fine-tune from your ImageNet-1K weights with --cfg-options
# model.backbone.init_cfg.type=Pretrained model.backbone.init_cfg.checkpoint=...
_base_ = ['../../_base_/recipes/mask-rcnn_fpn_coco_1x.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.InfiniteVLVision',
        window_size=7,
        out_indices=(0, 1, 2, 3),
        with_cp=False))

optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'attn.A_log': dict(decay_mult=0.),
            'attn.dt_bias': dict(decay_mult=0.),
            'attn.o_norm': dict(decay_mult=0.),
        }))
