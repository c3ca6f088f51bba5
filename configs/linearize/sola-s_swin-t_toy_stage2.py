# Stage II of sola-s_swin-t_stage2.py at toy scale, starting from the toy
# Stage I's last checkpoint (load_from). The classifier has the toy set's 4
# classes: with a teacher checkpoint, its head.fc (or head) is the teacher's.
_base_ = ['./sola-s_swin-t_stage2.py']

data_root = 'data/toy/imagenet/train'
img_size = 64
toy_arch = dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(2, 4, 8, 16))
# Random teacher (and head) by default; a tiny Swin teacher checkpoint as in the
# toy Stage I: --cfg-options model.teacher.init_cfg.type=Pretrained
#   model.teacher.init_cfg.checkpoint=PATH
load_from = 'work_dirs/sola-s_swin-t_toy_stage1/iter_100.pth'

# STUDENT: the toy Stage I's tiny SoLA-Vision; its weights come from load_from.
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
    backbone=dict(_delete_=True, **student),
    head=dict(num_classes=4, in_channels=128))

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
optim_wrapper = dict(optimizer=dict(lr=5e-4))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-2, by_epoch=False, begin=0, end=10),
    dict(type='CosineAnnealingLR', eta_min=1e-6, by_epoch=False, begin=10,
         end=max_iters),
]
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(interval=max_iters, max_keep_ckpts=1))
auto_scale_lr = dict(base_batch_size=8)
randomness = dict(seed=0)
