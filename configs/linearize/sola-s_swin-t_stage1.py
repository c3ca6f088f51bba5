# Swin-T -> SoLA-S, Stage I (InfiniteVL Sec. 3.3, Eq. 3): layer-wise
# distillation. The frozen Swin-T runs once per batch; every SoLA-S layer takes
# the input of its Swin-T layer and learns its output (MSE). Only the replaced
# mixers and MLPs train (trainable='all' trains whole layers). Budget and the
# next step: README.md.
_base_ = ['./_base_/images.py', './_base_/linearize_runtime.py']

# a Swin-T ImageNet checkpoint in any format we read (official, timm,
# mmpretrain, mmseg; docs/weights.md)
teacher_checkpoint = 'checkpoints/swin_tiny_patch4_window7_224.pth'

model = dict(
    type='mmhybrid.LinearizationDistiller',
    stage='layerwise',
    # Swin-T as our SwinELFATT: it reads every Swin-T format and is Swin's function
    teacher=dict(
        type='mmhybrid.SwinELFATT', arch='t', attn='local', downsample='linear',
        drop_path_rate=0., out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=teacher_checkpoint)),
    # SoLA-S has Swin-T's widths and depths; its layers start from Swin-T's
    # (weight inheritance, issue 36). The bridges do not run in Stage I.
    backbone=dict(
        type='mmhybrid.SoLAVision', arch='s', drop_path_rate=0.,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=teacher_checkpoint)))

# ~1 ImageNet-1k epoch: 1250 x 1024 images (proposal, README.md)
max_iters = 1250
train_cfg = dict(max_iters=max_iters)
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0, end=60),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=False, begin=60,
         end=max_iters),
]
default_hooks = dict(checkpoint=dict(interval=max_iters // 5))
