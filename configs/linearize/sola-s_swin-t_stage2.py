# Swin-T -> SoLA-S, Stage II (InfiniteVL Sec. 3.3, Eq. 4 adapted to dense
# prediction): the whole SoLA-S (bridges included) against Swin-T on the same
# images: MSE on the four output maps, plus T^2 KL(teacher || student) of the
# ImageNet logits of Swin-T's classifier (its head in the teacher checkpoint;
# the student's head starts as a copy). Every student parameter trains.
# Stage I's teacher, student and data; the weights start from Stage I's last
# checkpoint through load_from (the whole distiller's; the heads come from the
# teacher checkpoint).
_base_ = ['./sola-s_swin-t_stage1.py']

load_from = 'work_dirs/sola-s_swin-t_stage1/iter_1250.pth'

model = dict(
    stage='end_to_end',
    backbone=dict(drop_path_rate=0.1, init_cfg=None),  # weights from load_from
    head=dict(num_classes=1000, in_channels=768),
    temperature=1.)

# ~3 ImageNet-1k epochs: 3750 x 1024 images (proposal, README.md)
max_iters = 3750
train_cfg = dict(max_iters=max_iters)
optim_wrapper = dict(optimizer=dict(lr=2e-4))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0, end=120),
    dict(type='CosineAnnealingLR', eta_min=1e-6, by_epoch=False, begin=120,
         end=max_iters),
]
default_hooks = dict(checkpoint=dict(interval=max_iters // 5))
