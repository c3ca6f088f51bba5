# ImageNet-1K classification of the ELFATT backbones (Table 1): the last
# stage's map, global average pooling and a linear head, trained from scratch
# with CSWin's recipe, as the paper does (Dong et al. 2022, their train
# commands): AdamW, 300 epochs of cosine decay to 1e-5 after 20 warm-up epochs,
# then 10 cool-down epochs at 1e-5; RandAugment, Mixup 0.8 / CutMix 1.0, label
# smoothing 0.1, random erasing 0.25 (the shared Swin recipe has the same),
# model EMA, no gradient clipping; test crops cover 0.9 of the resized image
# (ResizeEdge 248 -> CenterCrop 224). These settings are the base sizes'
# (1024 images per iteration, lr 1e-3, wd 0.1, EMA decay 0.99992); the tiny
# variants set theirs. Variants also set the backbone and the head in_channels.
_base_ = ['../../_base_/recipes/in1k_swin_300e.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.CSWin',
        arch='b',
        attn='elfatt',
        out_indices=(3, ),
        with_cp=False))

test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=248, edge='short', backend='pillow',
         interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

optim_wrapper = dict(
    optimizer=dict(lr=1e-3, weight_decay=0.1),
    clip_grad=None,
    paramwise_cfg=dict(
        custom_keys={'relative_position_bias_table': dict(decay_mult=0.)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=20,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=20, end=300),
]
train_cfg = dict(max_epochs=310)  # 10 cool-down epochs at 1e-5 after the cosine
# mmengine's EMA momentum is 1 - decay, per iteration
custom_hooks = [dict(type='EMAHook', momentum=8e-5, priority='ABOVE_NORMAL')]
