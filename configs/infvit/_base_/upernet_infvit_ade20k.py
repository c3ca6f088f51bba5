# UPerNet + InfViT on ADE20K (shared 512x512, 160k recipe). A plain ViT gives one
# stride-16 map per chosen layer; mmseg's MultiLevelNeck resamples four of them
# to strides 4/8/16/32 (as mmseg's upernet_vit-b16). The local path (a 3x3
# depth-wise conv of V per layer) is on: a linear InfSA head gives every token
# the same context, so without it no layer mixes neighbouring tokens
# (docs/infvit.md); model.backbone.local_path=None is the paper's bare model.
# Variants set arch, out_indices and channels. Fine-tune from ImageNet-1K weights
# (configs/infvit/infvit-*_in1k.py or a public infsa checkpoint) with
#   --cfg-options model.backbone.init_cfg.type=Pretrained \
#                 model.backbone.init_cfg.checkpoint=<checkpoint>
_base_ = ['../../_base_/recipes/upernet_ade20k_160k.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.InfViT',
        img_size=224,  # grid of the stored position embedding; resized on the fly
        patch_size=16,
        local_path='lepe',
        drop_path_rate=0.1,
        with_cp=False),
    neck=dict(type='MultiLevelNeck', scales=[4, 2, 1, 0.5]),
    decode_head=dict(in_index=[0, 1, 2, 3], channels=512),
    auxiliary_head=dict(in_index=3))
