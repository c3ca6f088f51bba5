# Stage I of sola-s_swin-t_stage1.py at toy scale (CPU, tools/make_toy_data.py's
# ImageNet layout, 64x64 images): a tiny Swin teacher and a tiny student.
_base_ = ['./sola-s_swin-t_stage1.py']

data_root = 'data/toy/imagenet/train'
img_size = 64
# the tiny teacher's heads are SoLA's (head_dim 8 here): dims // 8
toy_arch = dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(2, 4, 8, 16))
# Random weights by default (the mechanics only); the student inherits the
# random teacher's weights only if both read one file. To start from a tiny
# Swin teacher checkpoint (e.g. trained on the toy classes), the student
# inheriting it (each mixer's rule, docs/design.md "Weight inheritance"):
#   --cfg-options model.teacher.init_cfg.type=Pretrained
#   model.teacher.init_cfg.checkpoint=PATH model.backbone.init_cfg.type=Pretrained
#   model.backbone.init_cfg.checkpoint=PATH

# STUDENT: a tiny SoLA-Vision with the teacher's widths, depths and heads:
# WKV layers with one softmax layer ending stages 3 and 4, two bridges
student = dict(
    type='mmhybrid.SoLAVision', arch=dict(
        embed_dims=(16, 32, 64, 128), mixers='LL/LL/LS/LS',
        hsb_routes=(((1, 2), (3, 2)), ((3, 1), (4, 2)))),
    head_dim=8, pretrain_img_size=img_size, drop_path_rate=0.,
    out_indices=(0, 1, 2, 3))

model = dict(
    teacher=dict(
        _delete_=True, type='mmhybrid.SwinELFATT', attn='local', downsample='linear',
        arch=toy_arch, window_size=4, drop_path_rate=0., out_indices=(0, 1, 2, 3)),
    backbone=dict(_delete_=True, **student))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=img_size, crop_ratio_range=(0.5, 1.),
         backend='pillow', interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    batch_size=8, num_workers=1,
    dataset=dict(data_root=data_root, pipeline=train_pipeline))

max_iters = 100
train_cfg = dict(max_iters=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-2, by_epoch=False, begin=0, end=10),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=False, begin=10,
         end=max_iters),
]
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(interval=max_iters, max_keep_ckpts=1))
auto_scale_lr = dict(base_batch_size=8)
randomness = dict(seed=0)
