# Stage I of sola-s_swin-t_stage1.py at toy scale (CPU, tools/make_toy_data.py's
# ImageNet layout, 64x64 images): a tiny Swin teacher and a tiny student.
_base_ = ['./sola-s_swin-t_stage1.py']

data_root = 'data/toy/imagenet/train'
img_size = 64
toy_arch = dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(2, 2, 4, 4))
# Random weights by default (the mechanics only). To start from a tiny Swin
# teacher checkpoint (e.g. trained on the toy classes) and have the student
# inherit it: --cfg-options model.teacher.init_cfg.type=Pretrained
#   model.teacher.init_cfg.checkpoint=PATH model.backbone.init_cfg.type=Pretrained
#   model.backbone.init_cfg.checkpoint=PATH

# STUDENT: a tiny Swin-ELFATT for now (it inherits every shared tensor of a Swin
# checkpoint today). Switch to a tiny SoLAVision once Swin -> SoLA inheritance
# lands (issue 36), e.g. dict(type='mmhybrid.SoLAVision', arch=dict(
# embed_dims=(16, 32, 64, 128), schedule='LL/LL/LS/LS'), head_dim=8, ...).
student = dict(
    type='mmhybrid.SwinELFATT', attn='elfatt', downsample='linear', arch=toy_arch,
    block_sizes=(8, 8, 16, 8), drop_path_rate=0., out_indices=(0, 1, 2, 3))

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
