# UPerNet-SoLA-T on the toy ADE20K of tools/make_toy_data.py (tools/demo.py):
# the real config with CPU-sized inputs, heads and schedule, trained from
# scratch. The toy images are ~128x160, so crops are 128x128.
_base_ = ['../upernet_sola-t_ade20k.py']

data_root = 'data/toy/ade'
crop_size = (128, 128)
data_preprocessor = dict(size=crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(drop_path_rate=0.),
    decode_head=dict(channels=128),
    auxiliary_head=dict(channels=64))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomResize', scale=(512, 128), ratio_range=(0.75, 1.5),
         keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(512, 128), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(
    batch_size=4, num_workers=1, persistent_workers=True,
    dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(
    num_workers=1, persistent_workers=True,
    dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader

# from scratch in a few hundred iterations: larger lr, short warm-up
max_iters = 120
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-2, by_epoch=False, begin=0, end=20),
    dict(type='PolyLR', eta_min=0., power=1.0, begin=20, end=max_iters,
         by_epoch=False),
]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(interval=max_iters, max_keep_ckpts=1))

# reproducible demo figures
randomness = dict(seed=0)
