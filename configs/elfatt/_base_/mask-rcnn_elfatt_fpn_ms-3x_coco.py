# Mask R-CNN + FPN on COCO 2017, 3x multi-scale (ELFATT Table 3 "3xMS", the
# VMamba / Swin recipe): 36 epochs, lr steps at 27 and 33, and the DETR-style
# augmentation: either the shorter side drawn from 480..800 (step 32, longer side
# <= 1333), or a resize to 400/500/600, a random 384..600 crop and then the
# 480..800 resize.
_base_ = ['./mask-rcnn_elfatt_fpn_1x_coco.py']

multi_scale = [(1333, s) for s in range(480, 801, 32)]
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args=None),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(
        type='RandomChoice',
        transforms=[
            [dict(type='RandomChoiceResize', scales=multi_scale, keep_ratio=True)],
            [
                dict(type='RandomChoiceResize',
                     scales=[(1333, 400), (1333, 500), (1333, 600)],
                     keep_ratio=True),
                dict(type='RandomCrop', crop_type='absolute_range',
                     crop_size=(384, 600), allow_negative_crop=True),
                dict(type='RandomChoiceResize', scales=multi_scale,
                     keep_ratio=True),
            ],
        ]),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
         end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True,
         milestones=[27, 33], gamma=0.1),
]
